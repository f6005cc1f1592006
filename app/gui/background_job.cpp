#include "app/gui/background_job.h"

#include <QThread>

#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

// Signals emitted from the worker thread reach receivers on the GUI thread as queued calls.
class BackgroundJob::JobFeedback : public Feedback {
public:
    explicit JobFeedback(BackgroundJob* job) : mJob(job) {}

protected:
    void onProgress(double fraction) override { emit mJob->progressChanged(fraction); }
    void onLog(const std::string& line) override { emit mJob->logged(QString::fromStdString(line)); }
    void onMetrics(const std::string& series, const std::map<std::string, double>& values) override {
        QVariantMap map;
        for (const auto& [key, value] : values) map.insert(QString::fromStdString(key), value);
        emit mJob->metricsReported(QString::fromStdString(series), map);
    }

private:
    BackgroundJob* mJob;
};

BackgroundJob::BackgroundJob(QString title, Work work, QObject* parent)
    : QObject(parent), mTitle(std::move(title)), mWork(std::move(work)) {}

BackgroundJob::~BackgroundJob() {
    if (mThread) {
        cancel();
        mThread->wait();
        delete mThread;
    }
}

void BackgroundJob::start() {
    if (isRunning()) return;
    mFeedback = std::make_unique<JobFeedback>(this);
    if (mCancelBeforeStart) mFeedback->cancel();
    mCancelBeforeStart = false;
    mError.clear();
    mCancelled = false;
    delete mThread;
    mThread = QThread::create([this] {
        try {
            mWork(*mFeedback);
        } catch (const Cancelled&) {
            mCancelled = true;
        } catch (const std::exception& e) {
            mError = QString::fromStdString(errorText(e));
            if (mError.isEmpty()) mError = tr("unknown error");
        }
        if (mFeedback->isCancelled() && mError.isEmpty()) mCancelled = true;
    });
    connect(mThread, &QThread::finished, this, [this] { emit finished(mCancelled, mError); });
    mThread->start();
}

void BackgroundJob::cancel() {
    if (mFeedback) mFeedback->cancel();
    else mCancelBeforeStart = true;
}

bool BackgroundJob::isRunning() const { return mThread && mThread->isRunning(); }

double BackgroundJob::progress() const { return mFeedback ? mFeedback->progress() : 0.0; }

} // namespace cwb
