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

bool fixturesRequired() { return QProcessEnvironment::systemEnvironment().value("CWB_REQUIRE_FIXTURES") == "1"; }

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
    bool finished = p.state() == QProcess::NotRunning;   // it ended before the marker: its own exit code
    if (!finished && err.contains(marker) && p.processId() > 0) {
        ::kill(pid_t(p.processId()), SIGINT);
        run.interrupted = true;
        finished = p.waitForFinished(timeoutMs);
    }
    if (finished) {
        run.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    } else {   // no marker in time, or no end after the signal: stopped, exit code -1
        p.kill();
        p.waitForFinished();
    }
    err += p.readAllStandardError();
    run.err = QString::fromUtf8(err);
    run.out = QString::fromUtf8(p.readAllStandardOutput());
    return run;
}

} // namespace cwb::test
