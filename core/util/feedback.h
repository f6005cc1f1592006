#pragma once
// Long core operations take a Feedback (after QGIS's QgsFeedback): progress in [0, 1], a cancel flag
// polled by the worker, and log lines. The GUI adapts it to a progress bar, batch mode to stderr lines.
#include <atomic>
#include <functional>
#include <map>
#include <string>

#include "core/util/error.h"

namespace cwb {

// A process-wide stop request, which the command line's SIGINT/SIGTERM handler sets (a lock-free atomic store,
// safe in a signal handler): every Feedback then reads as cancelled, so long work stops at its next check and
// removes what it was writing instead of dying in the middle of it.
namespace detail {
inline std::atomic<int> interruptSignal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
}
// signal: the signal number that asked (SIGINT 2, SIGTERM 15), for the exit code 128 + signal.
inline void requestInterrupt(int signal) noexcept { detail::interruptSignal.store(signal, std::memory_order_relaxed); }
inline bool interruptRequested() noexcept { return detail::interruptSignal.load(std::memory_order_relaxed) != 0; }
inline int interruptSignal() noexcept { return detail::interruptSignal.load(std::memory_order_relaxed); }

class Feedback {
public:
    virtual ~Feedback() = default;

    void setProgress(double fraction) {
        mProgress.store(fraction);
        onProgress(fraction);
    }
    double progress() const { return mProgress.load(); }

    void cancel() { mCancelled.store(true); }
    virtual bool isCancelled() const { return mCancelled.load() || interruptRequested(); }
    // Throws Cancelled when cancel() was called or an interrupt was requested; long loops call this once per unit
    // of work.
    void throwIfCancelled() const {
        if (isCancelled()) throw Cancelled();
    }

    void log(const std::string& line) { onLog(line); }
    // Named figures of one unit of work (a training step's losses), for live charts; `series` says whose.
    void metrics(const std::string& series, const std::map<std::string, double>& values) { onMetrics(series, values); }

protected:
    virtual void onProgress(double) {}
    virtual void onLog(const std::string&) {}
    virtual void onMetrics(const std::string&, const std::map<std::string, double>&) {}

private:
    std::atomic<double> mProgress{0.0};
    std::atomic<bool> mCancelled{false};
};

// Feedback that forwards to callbacks; handy for the CLI and tests.
class CallbackFeedback : public Feedback {
public:
    std::function<void(double)> progressCallback;
    std::function<void(const std::string&)> logCallback;
    std::function<void(const std::string&, const std::map<std::string, double>&)> metricsCallback;

protected:
    void onProgress(double fraction) override {
        if (progressCallback) progressCallback(fraction);
    }
    void onLog(const std::string& line) override {
        if (logCallback) logCallback(line);
    }
    void onMetrics(const std::string& series, const std::map<std::string, double>& values) override {
        if (metricsCallback) metricsCallback(series, values);
    }
};

// Progress of a step inside a larger operation: maps [0, 1] of the step onto [begin, end] of the parent.
class SubFeedback : public Feedback {
public:
    SubFeedback(Feedback* parent, double begin, double end) : mParent(parent), mBegin(begin), mEnd(end) {}
    bool isCancelled() const override { return Feedback::isCancelled() || (mParent && mParent->isCancelled()); }

protected:
    void onProgress(double fraction) override {
        if (mParent) mParent->setProgress(mBegin + (mEnd - mBegin) * fraction);
    }
    void onLog(const std::string& line) override {
        if (mParent) mParent->log(line);
    }
    void onMetrics(const std::string& series, const std::map<std::string, double>& values) override {
        if (mParent) mParent->metrics(series, values);
    }

private:
    Feedback* mParent;
    double mBegin;
    double mEnd;
};

} // namespace cwb
