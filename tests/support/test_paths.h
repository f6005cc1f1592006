#pragma once
// Where tests find the shared fixtures and the cwb binary.
#include <QString>
#include <QStringList>

namespace cwb::test {

// CWB_FIXTURES_DIR + "/" + relative, or an empty string when the file is absent.
QString fixture(const QString& relative);
// CWB_REQUIRE_FIXTURES=1: a missing fixture fails the test instead of skipping it (a Qt Test skip exits 0, so CTest
// counts it as passed: a wrong fixture folder would otherwise pass every test that needs one).
bool fixturesRequired();
// The cwb executable under test (CWB_BINARY, set by CTest).
QString cwbBinary();

// Runs the cwb executable as a user would and collects its exit code and output.
struct CwbRun {
    int exitCode = -1;   // -1: did not finish in time
    QString out, err;
};
CwbRun runCwb(const QStringList& args, int timeoutMs = 600000);

// Runs cwb, waits until its stderr shows `marker`, then sends SIGINT (what Ctrl-C does) and collects the rest.
// `interrupted` is false when cwb ended, or the time ran out, before the marker (the signal was then not sent);
// exitCode -1 when it did not finish in time; -2 when it crashed.
struct InterruptedRun : CwbRun {
    bool interrupted = false;
};
InterruptedRun runCwbInterrupted(const QStringList& args, const QByteArray& marker, int timeoutMs = 120000);

} // namespace cwb::test

// Skips the current test with a clear message when a fixture is missing (fails it under CWB_REQUIRE_FIXTURES=1).
#define CWB_REQUIRE_FIXTURE(var, relative)                                                                    \
    const QString var = cwb::test::fixture(relative);                                                         \
    if (var.isEmpty()) {                                                                                       \
        const QString missing = QStringLiteral("fixture %1 not found under CWB_FIXTURES_DIR=%2")               \
                                    .arg(relative, QStringLiteral(CWB_FIXTURES_DIR));                          \
        if (cwb::test::fixturesRequired()) QFAIL(qPrintable(missing + " (CWB_REQUIRE_FIXTURES=1)"));           \
        QSKIP(qPrintable(missing));                                                                            \
    }
