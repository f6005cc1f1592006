#include "app/gui/run_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "app/gui/background_job.h"
#include "app/gui/compute_device.h"
#include "app/gui/project_document.h"
#include "core/eval/perplexity.h"
#include "core/model/model.h"
#include "core/model/model_info.h"
#include "core/project/project_runner.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "widgets/loss_curve.h"

namespace cwb {

namespace {

QString duration(double seconds) {
    const int s = int(std::lround(seconds));
    return s >= 3600 ? QStringLiteral("%1:%2:%3").arg(s / 3600).arg(s / 60 % 60, 2, 10, QChar('0')).arg(s % 60, 2, 10, QChar('0'))
                     : QStringLiteral("%1:%2").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
}

} // namespace

RunView::RunView(QWidget* parent)
    : QWidget(parent), mRunCurrent(new QPushButton(tr("Run variant"), this)), mRunAll(new QPushButton(tr("Run all"), this)),
      mCancel(new QPushButton(tr("Cancel"), this)), mProgress(new QProgressBar(this)), mStatus(new QLabel(this)),
      mLog(new QPlainTextEdit(this)), mLossCurve(new LossCurve(this)), mTick(new QTimer(this)) {
    mTick->setObjectName(QStringLiteral("progressTick"));
    mTick->setInterval(1000);
    connect(mTick, &QTimer::timeout, this, [this] {
        if (isRunning()) updateProgress(mJob->progress());
    });
    mRunCurrent->setToolTip(tr("Build and evaluate the current variant (F5)"));
    mRunAll->setToolTip(tr("Evaluate the base model and every variant whose results are out of date or missing (Shift+F5); when all are current, asks before measuring them again"));
    mCancel->setToolTip(tr("Stop the run; variants already evaluated keep their results (Esc)"));
    mCancel->setEnabled(false);
    mProgress->setRange(0, 1000);
    mLog->setReadOnly(true);
    mLog->setMaximumBlockCount(5000);
    mLossCurve->setAxisLabels(tr("step"), tr("loss"));
    mLossCurve->setVisible(false);
    auto* row = new QHBoxLayout;
    row->addWidget(mRunCurrent);
    row->addWidget(mRunAll);
    row->addWidget(mProgress, 1);
    row->addWidget(mCancel);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(mLog);
    splitter->addWidget(mLossCurve);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(row);
    layout->addWidget(mStatus);
    layout->addWidget(splitter, 1);
    connect(mRunCurrent, &QPushButton::clicked, this, &RunView::runCurrent);
    connect(mRunAll, &QPushButton::clicked, this, &RunView::runAll);
    connect(mCancel, &QPushButton::clicked, this, &RunView::cancel);
    setDocument(nullptr);
}

RunView::~RunView() = default;

void RunView::nameCurrentVariant() {
    const QString variant = mDocument ? mDocument->currentVariant() : QString();
    mRunCurrent->setText(variant.isEmpty() ? tr("Run variant") : tr("Run '%1'").arg(variant));
}

QString RunView::runCurrentText() const { return mRunCurrent->text(); }

void RunView::setDocument(ProjectDocument* document) {
    mJob.reset();   // cancels and waits: the job reads the old document's model
    mTick->stop();
    for (const auto& c : mVariantNaming) disconnect(c);   // safe where the old document is gone
    mVariantNaming.clear();
    mDocument = document;
    // The button names the variant it runs (it said "Run variant" only, GUI probe).
    if (document) {
        mVariantNaming << connect(document, &ProjectDocument::currentVariantChanged, this, &RunView::nameCurrentVariant);
        mVariantNaming << connect(document, &ProjectDocument::variantsChanged, this, &RunView::nameCurrentVariant);   // renamed
    }
    nameCurrentVariant();
    mRunCurrent->setEnabled(document && !mBatchRunning);   // a batch replay goes on across documents
    mRunAll->setEnabled(document && !mBatchRunning);
    mCancel->setEnabled(mBatchRunning);
    if (!mBatchRunning) {
        mStatus->setText(document ? tr("Ready.") : tr("Open a model or project."));
        // The last document's log, bar and curves are not this one's (GUI probe: its "weights are probably broken"
        // stayed under the next project).
        mLog->clear();
        mProgress->setValue(0);
        mLossCurve->clear();
        mLossCurve->setVisible(false);
    }
}

double RunView::elapsedSeconds() const { return isRunning() ? mClock.elapsed() / 1000.0 : 0.0; }

bool RunView::isRunning() const { return mJob && mJob->isRunning(); }

bool RunView::runCurrent() {
    if (!mDocument) return false;
    if (mDocument->currentVariant().isEmpty()) {
        QMessageBox::information(this, tr("Nothing to run"), tr("The project has no variant yet. Add one in the Pipeline tab (a step creates one)."));
        return false;
    }
    return run({mDocument->currentVariant()});
}

bool RunView::runAll(bool everything) {
    if (!mDocument) return false;
    QStringList names{QString::fromLatin1(Project::kBaseName)};
    for (const auto& v : mDocument->project().variants()) names << QString::fromStdString(v.name);
    if (everything) return run(names);
    // Results measured from what a run would measure now are kept, as `cwb project run` keeps them: after one edit,
    // Run all measured every variant again (GUI probe). Run 'variant' measures one again whatever it holds.
    QStringList current, toRun;
    for (const QString& name : names) {
        const auto& rows = mDocument->project().results(name.toStdString());
        const bool evaluated = std::any_of(rows.begin(), rows.end(), [](const ResultRow& r) { return r.metric == "perplexity"; });
        (evaluated && mDocument->resultsCurrent(name) ? current : toRun) << name;
    }
    if (toRun.isEmpty()) {
        const auto answer = QMessageBox::question(this, tr("Results are up to date"),
                                                  tr("Every variant's results were measured from its recipe, the model and "
                                                     "the settings as they are now. Measure them all again?"),
                                                  QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
        if (answer != QMessageBox::Yes) return false;
        toRun = names;
        current.clear();
    }
    if (!run(toRun)) return false;
    if (!current.isEmpty())
        mLog->appendPlainText(tr("Up to date, not measured again: %1 (Run '…' measures the current variant again)").arg(current.join(", ")));
    return true;
}

namespace {

// What a variant's results were measured from, besides the settings: the recipes along its lineage.
nlohmann::json lineageRecipes(const Project& project, const std::string& name) {
    nlohmann::json recipes = nlohmann::json::array();
    if (name != Project::kBaseName && project.hasVariant(name))
        for (const auto& v : project.lineage(name)) recipes.push_back(project.variant(v).recipe);
    return recipes;
}

// A variant's part of a run: its training curves are named after it, so two distilled variants of one Run All
// draw two curves instead of one zig-zag.
class VariantFeedback : public SubFeedback {
public:
    VariantFeedback(Feedback* parent, double begin, double end, std::string variant)
        : SubFeedback(parent, begin, end), mVariant(std::move(variant)) {}

protected:
    void onMetrics(const std::string& series, const std::map<std::string, double>& values) override {
        SubFeedback::onMetrics(mVariant + ": " + series, values);
    }

private:
    std::string mVariant;
};

} // namespace

bool RunView::run(QStringList variants) {
    if (!mDocument) return false;
    if (isRunning() || mBatchRunning) {
        QMessageBox::information(this, mBatchRunning ? tr("A batch replay is in progress") : tr("A run is in progress"),
                                 tr("Wait for it to finish or cancel it (Esc) first."));
        return false;
    }
    if (mBeforeRun && !mBeforeRun()) return false;
    if (mDocument->project().settings().evaluation.path.empty()) {
        QMessageBox::warning(this, tr("Cannot run"),
                             tr("The project has no evaluation text, so there is nothing to measure perplexity on.\n\n"
                                "Choose one in Project ▸ Settings (Ctrl+,), then run again."));
        return false;
    }
    const auto& baseRows = mDocument->project().results(Project::kBaseName);
    const bool baseMeasured = std::any_of(baseRows.begin(), baseRows.end(), [](const ResultRow& r) { return r.metric == "perplexity"; });
    // Every comparison needs the base's numbers as the variants' are measured now: a base not measured (latency rows
    // alone are not its evaluation) runs first, and so does one measured under other settings, tokenizer or texts
    // (decided on the worker, which reads the texts as they are now). A variant once came out beside a stale base,
    // compared across two contexts (GUI probe).
    if (!baseMeasured && !variants.contains(Project::kBaseName)) variants.prepend(QString::fromLatin1(Project::kBaseName));

    const Project snapshot = mDocument->project();   // the worker reads a copy; editing goes on meanwhile
    std::shared_ptr<const Model> model = mDocument->model();
    QPointer<ProjectDocument> document = mDocument;
    const RuntimeOptions options = guiRuntimeOptions();   // Run ▸ Compute On, as the run starts
    mJob = std::make_unique<BackgroundJob>(tr("Run %1").arg(variants.join(", ")), [this, snapshot, model, requested = variants, document, options](Feedback& feedback) {
        ProjectRunner runner(snapshot, *model, options);
        // Results are stamped with the texts as read now: one edited in place since the project recorded it keeps the
        // recorded hash, and results measured on its new content must not claim the old (as `project run` does).
        const TextHashes texts = textHashesOnDisk(snapshot.settings());
        QStringList variants = requested;
        const std::string base = Project::kBaseName;
        // Base results of a build that recorded no basis count as current, as the Compare tab shows them.
        if (!variants.contains(QString::fromStdString(base)) && !snapshot.resultBasis(base).is_null()) {
            const std::vector<std::string> why =
                Project::basisDifferences(snapshot.resultBasis(base), withTextHashes(snapshot.measurementBasis(base), texts));
            if (!why.empty()) {
                variants.prepend(QString::fromStdString(base));
                std::string reasons;
                for (const auto& w : why) reasons += (reasons.empty() ? "" : "; ") + w;
                feedback.log("base: measured again first, since its results are out of date (" + reasons + ")");
            }
        }
        const int n = variants.size();
        for (int i = 0; i < n; ++i) {
            feedback.log(QStringLiteral("%1: building and evaluating").arg(variants[i]).toStdString());
            VariantFeedback part(&feedback, double(i) / n, double(i + 1) / n, variants[i].toStdString());
            // The steps' notes are in the log already, as they came (they were written again here: every one twice).
            std::vector<ResultRow> rows = runner.evaluate(variants[i].toStdString(), &part);
            // One line of whole-model figures; the per-layer errors (one per linear layer) are counted, not listed: they
            // flooded the log (GUI probe) and the Compare tab charts them.
            QString summary;
            int perLayer = 0;
            for (const auto& r : rows) {
                if (isPerLayerMetric(r.metric)) ++perLayer;
                else if (r.metric == "bytes")   // as the Compare tab gives it ("1.1712e+06" read badly: GUI probe)
                    summary += QStringLiteral("  bytes %1").arg(QString::fromStdString(humanBytes(r.value)));
                else summary += QStringLiteral("  %1 %2").arg(QString::fromStdString(r.metric)).arg(r.value, 0, 'g', 6);
            }
            if (perLayer > 0) summary += QStringLiteral("  (+%1 per-layer reconstruction errors: Compare tab)").arg(perLayer);
            feedback.log((variants[i] + ":" + summary).toStdString());
            for (const auto& r : rows) {
                const std::string warning = r.metric == "perplexity" ? perplexityWarning(r.value, model->spec.vocab) : "";
                if (!warning.empty()) feedback.log("  warning: " + warning);
            }
            const QString name = variants[i];
            const nlohmann::json measuredRecipes = lineageRecipes(snapshot, name.toStdString());
            const ProjectSettings measuredSettings = snapshot.settings();
            const nlohmann::json basis = withTextHashes(snapshot.measurementBasis(name.toStdString()), texts);
            QMetaObject::invokeMethod(this, [this, document, name, rows, measuredRecipes, measuredSettings, basis] {
                if (!document) return;
                // The project went on being edited during the run: results measured from a recipe or settings that
                // are no longer the project's (or for a variant since removed) would be shown as if they were.
                const Project& now = document->project();
                const std::string key = name.toStdString();
                QString stale;
                if (key != Project::kBaseName && !now.hasVariant(key)) stale = tr("the variant was removed or renamed");
                else if (lineageRecipes(now, key) != measuredRecipes) stale = tr("its recipe was edited");
                else if (!(now.settings() == measuredSettings)) stale = tr("the project settings were changed");
                if (!stale.isEmpty()) {
                    appendLog(tr("%1: results not stored: %2 during the run; run it again.").arg(name, stale));
                    return;
                }
                try {
                    document->setResults(name, keepingLatency(now, key, rows, basis), basis);
                } catch (const std::exception& e) {
                    appendLog(tr("%1: results not stored: %2").arg(name, QString::fromStdString(errorText(e))));
                    return;
                }
                emit variantEvaluated(name);
            }, Qt::QueuedConnection);
        }
    });
    connect(mJob.get(), &BackgroundJob::progressChanged, this, &RunView::updateProgress);
    connect(mJob.get(), &BackgroundJob::logged, this, &RunView::appendLog);
    connect(mJob.get(), &BackgroundJob::metricsReported, this, &RunView::addMetrics);
    connect(mJob.get(), &BackgroundJob::finished, this, [this](bool cancelled, const QString& error) {
        mTick->stop();
        mRunCurrent->setEnabled(!mBatchRunning);
        mRunAll->setEnabled(!mBatchRunning);
        mCancel->setEnabled(mBatchRunning);
        const QString elapsed = duration(mClock.elapsed() / 1000.0);
        // A stopped run's bar went back to empty: left part-filled it looked like a run still going (GUI probe).
        if (cancelled || !error.isEmpty()) mProgress->setValue(0);
        if (cancelled) {
            mStatus->setText(tr("Cancelled after %1; variants that finished keep their results.").arg(elapsed));
            appendLog(tr("cancelled after %1").arg(elapsed));   // the log ended mid-step, as if it still ran (GUI probe)
        } else if (!error.isEmpty()) {
            mStatus->setText(tr("Failed after %1: %2").arg(elapsed, error));
            appendLog(tr("error: %1").arg(error));
            QMessageBox::critical(this, tr("Run failed"),
                                  tr("The run stopped with an error:\n%1\n\nFix the step or the project settings it names, then run again.").arg(error));
        } else {
            mProgress->setValue(1000);
            mStatus->setText(tr("Finished in %1.").arg(elapsed));
        }
        // Queued after the last variant's results, so listeners see them stored.
        QMetaObject::invokeMethod(this, [this, cancelled, error] { emit finished(!cancelled && error.isEmpty()); }, Qt::QueuedConnection);
    });
    mLog->clear();
    mLossCurve->clear();
    mLossCurve->setVisible(false);
    mProgress->setValue(0);
    mRunCurrent->setEnabled(false);
    mRunAll->setEnabled(false);
    mCancel->setEnabled(true);
    mStatus->setText(tr("Running %1…").arg(variants.join(", ")));
    mClock.start();
    mTick->start();
    emit jobStarted(mJob->title());
    mJob->start();
    return true;
}

void RunView::cancel() {
    if (isRunning()) {
        mJob->cancel();
        mStatus->setText(tr("Cancelling…"));
    } else if (mBatchRunning) {
        emit batchCancelRequested();
        mStatus->setText(tr("Stopping the batch replay…"));
    }
}

void RunView::setBatchRunning(bool running, const QString& summary) {
    // The replay had no progress or Cancel here, and Run stayed enabled beside it (GUI probe).
    mBatchRunning = running;
    mRunCurrent->setEnabled(!running && !isRunning());
    mRunAll->setEnabled(!running && !isRunning());
    mCancel->setEnabled(running || isRunning());
    if (running) {
        mProgress->setRange(0, 0);   // busy: the replay reports lines, not fractions
        mStatus->setText(tr("Replaying the saved project as a batch (Cancel or Esc stops it)…"));
    } else {
        mProgress->setRange(0, 1000);
        mProgress->setValue(0);
        mStatus->setText(summary);
    }
}

QString RunView::progressText(double fraction, double elapsedSeconds) {
    QString text = tr("Running: %1 % · elapsed %2").arg(fraction * 100, 0, 'f', 1).arg(duration(elapsedSeconds));
    if (fraction > 0.02 && elapsedSeconds >= 3) text += tr(" · about %1 left").arg(duration(elapsedSeconds * (1 - fraction) / fraction));
    return text;
}

void RunView::updateProgress(double fraction) {
    mProgress->setValue(int(std::lround(std::clamp(fraction, 0.0, 1.0) * 1000)));
    mStatus->setText(progressText(fraction, mClock.elapsed() / 1000.0));
}

void RunView::appendLog(const QString& line) { mLog->appendPlainText(line); }

QString RunView::logText() const { return mLog->toPlainText(); }

void RunView::addMetrics(const QString& series, const QVariantMap& values) {
    if (!values.contains("step")) return;
    const double step = values.value("step").toDouble();
    // The loss terms a training step reports (the held-out perplexity goes to the log: another scale).
    for (const char* key : {"loss", "kd", "ce"}) {
        if (!values.contains(key)) continue;
        const double v = values.value(key).toDouble();
        if (std::isfinite(v)) addLossPoint(series + " " + key, step, v);
    }
}

void RunView::addLossPoint(const QString& series, double step, double value) {
    mLossCurve->setVisible(true);
    mLossCurve->addPoint(series, step, value);
}

} // namespace cwb
