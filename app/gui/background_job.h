#pragma once
// A long core operation on a worker thread, adapted to Qt: the core's Feedback becomes progressChanged /
// logged signals (delivered on the GUI thread) and cancel() sets its flag. The UI never waits on it.
#include <QObject>
#include <QString>
#include <QVariantMap>

#include <functional>
#include <memory>

namespace cwb {

class Feedback;

class BackgroundJob : public QObject {
    Q_OBJECT
public:
    // Runs on the worker thread; throws cwb::Error (reported as failed), Cancelled (reported as cancelled), or
    // any std::exception (failed).
    using Work = std::function<void(Feedback& feedback)>;

    BackgroundJob(QString title, Work work, QObject* parent = nullptr);
    ~BackgroundJob() override;   // cancels and waits for the worker

    QString title() const { return mTitle; }
    void start();
    // Before the first start(), that start() begins cancelled: the work stops at its first check. (After a run has
    // finished it does nothing, so a stray cancel never stops a later run.)
    void cancel();
    bool isRunning() const;
    double progress() const;

signals:
    void progressChanged(double fraction);
    void logged(const QString& line);
    // Per-step figures a method reports (distill.kd: step, loss, ce, kd, eval_ppl, ...), for live curves.
    void metricsReported(const QString& series, const QVariantMap& values);
    // Exactly once per start(): `cancelled` when the user stopped it, else `error` is empty on success.
    void finished(bool cancelled, const QString& error);

private:
    class JobFeedback;
    QString mTitle;
    Work mWork;
    std::unique_ptr<JobFeedback> mFeedback;
    class QThread* mThread = nullptr;
    QString mError;
    bool mCancelled = false;
    bool mCancelBeforeStart = false;
};

} // namespace cwb
