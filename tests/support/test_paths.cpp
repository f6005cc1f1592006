#include "tests/support/test_paths.h"

#include <QElapsedTimer>
#include <QFileInfo>
#include <QProcess>
#include <QProcessEnvironment>

#include <signal.h>

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

InterruptedRun runCwbInterrupted(const QStringList& args, const QByteArray& marker, int timeoutMs) {
    InterruptedRun run;
    QProcess p;
    p.start(cwbBinary(), args);
    if (!p.waitForStarted()) return run;
    p.setReadChannel(QProcess::StandardError);
    QByteArray err;
    QElapsedTimer waited;
    waited.start();
    while (!err.contains(marker) && waited.elapsed() < timeoutMs && p.state() == QProcess::Running) {
        p.waitForReadyRead(1000);
        err += p.readAllStandardError();
    }
    if (err.contains(marker) && p.state() == QProcess::Running) {
        ::kill(pid_t(p.processId()), SIGINT);
        run.interrupted = true;
    }
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
    } else {
        run.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    }
    err += p.readAllStandardError();
    run.err = QString::fromUtf8(err);
    run.out = QString::fromUtf8(p.readAllStandardOutput());
    return run;
}

} // namespace cwb::test
