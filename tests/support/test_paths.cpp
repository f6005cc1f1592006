#include "tests/support/test_paths.h"

#include <QFileInfo>
#include <QProcess>
#include <QProcessEnvironment>

namespace cwb::test {

QString fixture(const QString& relative) {
    const QString path = QStringLiteral(CWB_FIXTURES_DIR) + "/" + relative;
    return QFileInfo::exists(path) ? path : QString();
}

QString cwbBinary() { return QProcessEnvironment::systemEnvironment().value("CWB_BINARY"); }

CwbRun runCwb(const QStringList& args, int timeoutMs) {
    QProcess p;
    p.start(cwbBinary(), args);
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        return {-1, {}, QStringLiteral("timed out")};
    }
    return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

} // namespace cwb::test
