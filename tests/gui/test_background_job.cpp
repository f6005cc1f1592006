// BackgroundJob: the core's Feedback adapted to Qt — progress and log lines arrive on the GUI thread,
// cancel() stops a job that polls its feedback, errors come back as messages, and the GUI thread never blocks.
#include <QThread>
#include <QtTest/QtTest>

#include <atomic>

#include "app/gui/background_job.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

using namespace cwb;

class TestBackgroundJob : public QObject {
    Q_OBJECT
private slots:
    void reportsProgressAndLogOnTheGuiThread();
    void cancelStopsAPollingJob();
    void cancelBeforeStartStopsAtTheFirstCheck();
    void errorsComeBackAsMessages();
};

void TestBackgroundJob::reportsProgressAndLogOnTheGuiThread() {
    QThread* gui = QThread::currentThread();
    BackgroundJob job("count", [](Feedback& f) {
        for (int i = 1; i <= 4; ++i) f.setProgress(i / 4.0);
        f.log("done counting");
    });
    QList<double> progress;
    QStringList lines;
    bool onGuiThread = true;
    connect(&job, &BackgroundJob::progressChanged, this, [&](double p) {
        progress << p;
        onGuiThread = onGuiThread && QThread::currentThread() == gui;
    });
    connect(&job, &BackgroundJob::logged, this, [&](const QString& l) { lines << l; });
    QSignalSpy finished(&job, &BackgroundJob::finished);
    job.start();
    QVERIFY(finished.wait(10000));
    QCOMPARE(finished.first().at(0).toBool(), false);   // not cancelled
    QCOMPARE(finished.first().at(1).toString(), QString());
    QCOMPARE(progress, (QList<double>{0.25, 0.5, 0.75, 1.0}));
    QCOMPARE(lines, QStringList{"done counting"});
    QVERIFY(onGuiThread);
}

void TestBackgroundJob::cancelStopsAPollingJob() {
    std::atomic<bool> started{false};
    BackgroundJob job("forever", [&](Feedback& f) {
        started = true;
        for (;;) {
            f.throwIfCancelled();
            QThread::msleep(1);
        }
    });
    QSignalSpy finished(&job, &BackgroundJob::finished);
    job.start();
    QTRY_VERIFY(started.load());
    QVERIFY(job.isRunning());
    job.cancel();
    QVERIFY(finished.wait(10000));
    QCOMPARE(finished.first().at(0).toBool(), true);
    QVERIFY(!job.isRunning());
}

// The regression: a cancel that came before start() (the GUI's Escape while a load was being set up) was lost, and
// the job ran to the end.
void TestBackgroundJob::cancelBeforeStartStopsAtTheFirstCheck() {
    std::atomic<int> checksPassed{0};
    BackgroundJob job("cancelled early", [&](Feedback& f) {
        for (int i = 0; i < 100; ++i) {
            f.throwIfCancelled();
            ++checksPassed;
        }
    });
    QSignalSpy finished(&job, &BackgroundJob::finished);
    job.cancel();
    job.start();
    QVERIFY(finished.wait(10000));
    QCOMPARE(finished.first().at(0).toBool(), true);
    QCOMPARE(checksPassed.load(), 0);
    // The cancel was spent on that run: the next start runs to the end.
    job.start();
    QVERIFY(finished.wait(10000));
    QCOMPARE(finished.at(1).at(0).toBool(), false);
    QCOMPARE(checksPassed.load(), 100);
}

void TestBackgroundJob::errorsComeBackAsMessages() {
    BackgroundJob job("fail", [](Feedback&) { throw Error("model.gguf", "truncated tensor data"); });
    QSignalSpy finished(&job, &BackgroundJob::finished);
    job.start();
    QVERIFY(finished.wait(10000));
    QCOMPARE(finished.first().at(0).toBool(), false);
    QCOMPARE(finished.first().at(1).toString(), QString("model.gguf: truncated tensor data"));
}

QTEST_MAIN(TestBackgroundJob)
#include "test_background_job.moc"
