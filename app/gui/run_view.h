#pragma once
// Runs variants on a worker thread: each is rebuilt from the base with its lineage's recipe and evaluated
// (ProjectRunner, the same code as `cwb project run`), and its results are stored in the project as soon as
// it finishes. Shows progress, elapsed time and an ETA, the log, and Cancel (the core's Feedback flag).
// A LossCurve stays hidden until a step reports losses (addLossPoint), e.g. a distillation step.
#include <QElapsedTimer>
#include <QStringList>
#include <QVariantMap>
#include <QWidget>

#include <functional>
#include <memory>

class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QTimer;
class QPushButton;

namespace cwb {

class BackgroundJob;
class LossCurve;
class ProjectDocument;

class RunView : public QWidget {
    Q_OBJECT
public:
    explicit RunView(QWidget* parent = nullptr);
    ~RunView() override;

    void setDocument(ProjectDocument* document);
    // "base" and variant names; the base is added first when it has no results yet. False (with a message box)
    // when nothing can run: no project, a job already running, or no evaluation text.
    bool run(QStringList variants);
    // Asked before each run starts; false stops it (the main window asks about Layers edits not applied).
    void setBeforeRun(std::function<bool()> check) { mBeforeRun = std::move(check); }
    bool runCurrent();
    // The base and the variants whose results are out of date or missing (asks when none is); `everything`: all of them.
    bool runAll(bool everything = false);
    void cancel();
    bool isRunning() const;
    // A batch replay of the saved project (a separate process the main window runs) shown here: a busy bar, the run
    // buttons off, Cancel asking it to stop (batchCancelRequested); `summary` is shown when it ends.
    void setBatchRunning(bool running, const QString& summary = {});
    bool isBatchRunning() const { return mBatchRunning; }
    double elapsedSeconds() const;   // of the run in progress (0 when none)
    LossCurve* lossCurve() const { return mLossCurve; }
    QString logText() const;   // the log as shown (each variant's results, notes and warnings)
    QString runCurrentText() const;   // the Run button's text, naming the current variant

public slots:
    void appendLog(const QString& line);
    void addLossPoint(const QString& series, double step, double value);
    // Live curves from a method's per-step metrics (distillation losses).
    void addMetrics(const QString& series, const QVariantMap& values);

signals:
    void jobStarted(const QString& title);
    // Exactly once per started run.
    void finished(bool succeeded);
    void variantEvaluated(const QString& variant);
    void batchCancelRequested();

private:
    std::function<bool()> mBeforeRun;
    void nameCurrentVariant();
    QList<QMetaObject::Connection> mVariantNaming;
    void updateProgress(double fraction);
public:
    // "Running: 48.6 % · elapsed 0:12 · about 0:13 left": no estimate before a few seconds or a little progress,
    // from which it would say "0:00 left" of a long step just begun (GUI probe).
    static QString progressText(double fraction, double elapsedSeconds);

private:

    ProjectDocument* mDocument = nullptr;
    QPushButton* mRunCurrent;
    QPushButton* mRunAll;
    QPushButton* mCancel;
    QProgressBar* mProgress;
    QLabel* mStatus;
    QPlainTextEdit* mLog;
    LossCurve* mLossCurve;
    std::unique_ptr<BackgroundJob> mJob;
    QElapsedTimer mClock;
    QTimer* mTick;   // the elapsed time and estimate go on while no progress comes (a long step)
    bool mBatchRunning = false;
};

} // namespace cwb
