#include "app/gui/compare_view.h"

#include <QColor>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <cmath>
#include <map>
#include <set>

#include <ATen/Parallel.h>

#include "app/gui/background_job.h"
#include "app/gui/compute_device.h"
#include "app/gui/generation_panel.h"
#include "app/gui/project_document.h"
#include "core/model/model.h"
#include "core/eval/perplexity.h"
#include "core/model/model_info.h"
#include "core/project/project_runner.h"
#include "core/runtime/latency.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "widgets/ab_chart.h"
#include "widgets/loss_curve.h"

namespace cwb {

namespace {

struct MetricSpec {
    const char* id;
    const char* title;
    const char* unit;
    bool withBase;   // KL and top-1 compare a variant with the base, so the base has no bar
};

const MetricSpec kMetrics[] = {{"perplexity", "Perplexity", "", true},
                               {"kl_mean", "KL divergence to the base (mean)", "nats", false},
                               {"top1", "Top-1 agreement with the base", "fraction", false},
                               {"bytes", "Model size", "MiB", true},   // charted in MiB, as the table and tree say sizes
                               {"bits_per_weight", "Bits per weight (linear layers)", "bits", true},
                               {"decode_ms_p50", "Decode latency (median per token)", "ms", true},
                               {"prefill_tokens_per_second", "Prefill speed", "tokens/s", true}};

} // namespace

CompareView::CompareView(QWidget* parent)
    : QWidget(parent), mMetric(new QComboBox(this)), mChart(new AbChart(this)), mLayerErrors(new LossCurve(this)),
      mTable(new QTableWidget(this)), mWarnings(new QLabel(this)),
      mMeasure(new QPushButton(tr("Measure &Latency"), this)), mCancelMeasure(new QPushButton(tr("Cancel"), this)),
      mProgress(new QProgressBar(this)), mMeasureStatus(new QLabel(this)),
      mGeneration(new GenerationPanel(this)) {
    for (const auto& m : kMetrics) mMetric->addItem(tr(m.title), QString::fromLatin1(m.id));
    auto* row = new QHBoxLayout;
    row->addWidget(new QLabel(tr("Metric:"), this));
    row->addWidget(mMetric, 1);
    row->addWidget(mMeasure);
    row->addWidget(mProgress);
    row->addWidget(mCancelMeasure);
    row->addWidget(mMeasureStatus);
    mCancelMeasure->setVisible(false);
    mCancelMeasure->setToolTip(tr("Stop measuring latency; nothing is stored"));
    connect(mCancelMeasure, &QPushButton::clicked, this, &CompareView::cancelMeasurement);
    mMeasureStatus->setWordWrap(true);
    mMeasure->setToolTip(tr("Time prefill and greedy decoding of the base and every variant on this machine (worker thread)"));
    mProgress->setRange(0, 1000);
    mProgress->setVisible(false);
    connect(mMeasure, &QPushButton::clicked, this, [this] { measureLatency(); });
    mTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    mTable->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    mLayerErrors->setAxisLabels(tr("linear layer (block order)"), tr("reconstruction error"));
    mLayerErrors->setLogScale(true);
    mLayerErrors->setToolTip(tr("Per-layer reconstruction error ‖W₀X − ŴX‖² / ‖W₀X‖² of the variant's weights Ŵ against the "
                                "base's W₀, X the layer's inputs in the variant on the calibration windows, whatever number "
                                "of steps changed the layer (stored when a variant runs with calibration text). ○ marks an "
                                "error of exactly 0, drawn a decade below the smallest. Hover a point for its layer and value."));
    auto* charts = new QSplitter(Qt::Horizontal, this);
    charts->addWidget(mChart);
    charts->addWidget(mLayerErrors);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(charts);
    auto* tablePane = new QWidget(this);
    auto* tableLayout = new QVBoxLayout(tablePane);
    tableLayout->setContentsMargins(0, 0, 0, 0);
    mWarnings->setWordWrap(true);
    mWarnings->setStyleSheet(QStringLiteral("color: #b00020;"));
    mWarnings->setVisible(false);
    tableLayout->addWidget(mWarnings);
    tableLayout->addWidget(mTable);
    splitter->addWidget(tablePane);
    splitter->addWidget(mGeneration);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 1);
    splitter->setStretchFactor(2, 2);
    // The panes' share at first (they started from their size hints: the generation boxes took most of a 768-px
    // screen and left the charts some 60 px, GUI probe).
    splitter->setSizes({500, 220, 280});
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(row);
    layout->addWidget(splitter, 1);
    connect(mMetric, &QComboBox::currentIndexChanged, this, &CompareView::refresh);
    setDocument(nullptr);
}

CompareView::~CompareView() = default;

void CompareView::setDocument(ProjectDocument* document) {
    if (mJob) mJob.reset();   // cancels and waits: the job reads the old document's model
    if (mDocument) disconnect(mDocument, nullptr, this, nullptr);
    mDocument = document;
    mGeneration->setDocument(document);
    mMeasureStatus->clear();   // the previous project's latency note (GUI probe)
    mLatencyStored = false;
    mLatencyAside.clear();
    if (document) {
        connect(document, &ProjectDocument::resultsChanged, this, &CompareView::refresh);
        connect(document, &ProjectDocument::variantsChanged, this, &CompareView::refresh);
        connect(document, &ProjectDocument::textsOnDiskChanged, this, &CompareView::refresh);
    }
    refresh();
}

void CompareView::setMetric(const QString& metric) {
    const int index = mMetric->findData(metric);
    if (index >= 0) mMetric->setCurrentIndex(index);
}

QString CompareView::metric() const { return mMetric->currentData().toString(); }

void CompareView::refresh() {
    mChart->clear();
    mLayerErrors->clear();
    mTable->clear();
    mTable->setRowCount(0);
    mTable->setColumnCount(0);
    mWarnings->clear();
    mWarnings->setVisible(false);
    if (!mDocument) return;
    const Project& project = mDocument->project();
    std::vector<std::string> names{Project::kBaseName};
    for (const auto& v : project.variants()) names.push_back(v.name);
    if (mLatencyStored) {   // which latencies are stored now: a re-run drops a variant's (it still said "2 variants", GUI probe)
        std::map<std::string, QStringList> byDevice;
        for (const auto& name : names)
            for (const auto& r : project.results(name))
                if (isLatencyMetric(r.metric)) {
                    byDevice[r.device] << QString::fromStdString(name);
                    break;
                }
        QStringList parts;
        for (const auto& [device, which] : byDevice) parts << tr("on %1 for %2").arg(QString::fromStdString(device), which.join(tr(", ")));
        mMeasureStatus->setText(parts.isEmpty() ? QString() : tr("Latency measured %1.").arg(parts.join(tr("; "))) + mLatencyAside);
    }

    const MetricSpec* spec = &kMetrics[0];
    for (const auto& m : kMetrics)
        if (metric() == m.id) spec = &m;
    std::vector<AbSeries> series;
    std::vector<std::string> metrics;   // table columns, in first-seen order
    std::map<std::pair<std::string, std::string>, ResultRow> cells;
    // x of each layer's error: its place among the base's linear layers (or first-seen order without a model).
    std::map<std::string, int> layerIndex;
    if (mDocument->model())
        for (const auto& layer : mDocument->model()->linearLayers()) layerIndex.emplace(layer, int(layerIndex.size()));
    // Results measured before their recipe, the settings or the tokenizer changed are marked, not shown as current.
    std::map<std::string, QStringList> stale;   // variant -> why its results are out of date
    for (const auto& name : names) {
        const QStringList why = mDocument->resultsOutdatedBy(QString::fromStdString(name));
        if (!why.isEmpty()) stale[name] = why;
    }
    auto label = [&](const std::string& name) { return QString::fromStdString(name) + (stale.count(name) ? tr(" (stale)") : QString()); };
    // One colour per variant in both charts (a variant without a bar or a line shifted the others', GUI probe).
    std::map<std::string, int> colourOf;
    for (const auto& v : project.variants()) colourOf.emplace(v.name, int(colourOf.size()));
    const auto colour = [&](const std::string& name) { return colourOf.count(name) ? colourOf.at(name) : -1; };
    QString baseBarLabel;   // the base's bar, when it has one
    // A perplexity above the vocabulary size is worse than a uniform guess: broken weights, not a figure to compare.
    const int64_t vocab = mDocument->model() ? mDocument->model()->spec.vocab : 0;
    auto brokenPerplexity = [&](const ResultRow& r) { return r.metric == "perplexity" ? perplexityWarning(r.value, vocab) : std::string(); };
    for (const auto& name : names) {
        for (const auto& r : project.results(name)) {
            if (isPerLayerMetric(r.metric)) {
                const std::string layer = layerOfMetric(r.metric);
                const int x = layerIndex.emplace(layer, int(layerIndex.size())).first->second;
                mLayerErrors->addPoint(label(name), x, r.value);   // marked stale as the bars are (GUI probe), and dashed
                if (mLayerErrors->pointCount(label(name)) == 1) mLayerErrors->setSeriesStyle(label(name), colour(name), stale.count(name) > 0);
                continue;
            }
            if (std::find(metrics.begin(), metrics.end(), r.metric) == metrics.end()) metrics.push_back(r.metric);
            cells[{name, r.metric}] = r;
            if (r.metric == spec->id && (spec->withBase || name != Project::kBaseName)) {
                const bool broken = !brokenPerplexity(r).empty();
                // Sizes in MiB: the bars read "1.171e+06" bytes beside a table in MiB (GUI probe).
                const double scale = r.metric == "bytes" ? 1.0 / (1024.0 * 1024.0) : 1.0;
                series.push_back({label(name) + (broken ? tr(" ⚠ worse than chance") : QString()), r.value * scale, r.error * scale,
                                  stale.count(name) > 0, colour(name)});
                if (name == Project::kBaseName) baseBarLabel = series.back().variant;
            }
        }
    }
    // Hovering a dot names its layer (x was only its place in block order).
    QStringList layerNames;
    for (const auto& [layer, index] : layerIndex) {
        if (index >= layerNames.size()) layerNames.resize(index + 1);
        layerNames[index] = QString::fromStdString(layer);
    }
    mLayerErrors->setStepNames(layerNames);
    // The first bar is the baseline only when it is the base's (a variant measured before the base must not be
    // labelled so; KL and top-1 have no base bar at all).
    if (!series.empty())
        mChart->setMetric(tr(spec->title), QString::fromLatin1(spec->unit), series, series.front().variant == baseBarLabel);
    QStringList staleNotes;
    for (const auto& [name, why] : stale)
        staleNotes << tr("%1 (stale): %2; run it again").arg(QString::fromStdString(name), why.join(QStringLiteral("; ")));
    mTable->setToolTip(staleNotes.join(QLatin1Char('\n')));

    QStringList columns;
    for (const auto& m : metrics) columns << QString::fromStdString(m);
    mTable->setColumnCount(columns.size());
    mTable->setHorizontalHeaderLabels(columns);
    QStringList warnings;
    for (const QString& text : mDocument->textsChangedOnDisk())
        warnings << tr("%1: results measured before may be of its earlier content, and a run now measures it as it is "
                       "(its results then show as stale). Project ▸ Settings ▸ OK records the text as it is now.").arg(text);
    QStringList rows;
    for (const auto& name : names) {
        if (project.results(name).empty()) continue;
        const int row = mTable->rowCount();
        mTable->insertRow(row);
        rows << label(name);
        for (int c = 0; c < columns.size(); ++c) {
            const auto it = cells.find({name, metrics[size_t(c)]});
            if (it == cells.end()) continue;
            QString text = metrics[size_t(c)] == "bytes" ? QString::fromStdString(humanBytes(it->second.value))
                                                         : QString::number(it->second.value, 'g', 6);
            if (it->second.error > 0) text += QStringLiteral(" ± %1").arg(it->second.error, 0, 'g', 3);
            auto* item = new QTableWidgetItem(text);
            QString tip = tr("%1 on %2, %3 threads, %4").arg(QString::fromStdString(it->second.device)).arg(it->second.threads)
                              .arg(QString::fromStdString(it->second.time));
            const std::string warning = brokenPerplexity(it->second);
            if (!warning.empty()) {
                item->setText(QStringLiteral("⚠ ") + text);
                item->setForeground(QColor(0xb0, 0x00, 0x20));
                tip = QString::fromStdString(warning) + QLatin1Char('\n') + tip;
                warnings << tr("%1: %2").arg(label(name), QString::fromStdString(warning));
            }
            item->setToolTip(tip);
            mTable->setItem(row, c, item);
        }
    }
    mTable->setVerticalHeaderLabels(rows);
    mWarnings->setText(warnings.join(QLatin1Char('\n')));
    mWarnings->setVisible(!warnings.isEmpty());
    mLayerErrors->flush();
}

QString CompareView::warnings() const { return mWarnings->text(); }

QString CompareView::measurementStatus() const { return mMeasureStatus->text(); }

bool CompareView::isMeasuring() const { return mJob && mJob->isRunning(); }

void CompareView::cancelMeasurement() {
    if (mJob) mJob->cancel();
}

bool CompareView::measureLatency(int promptTokens, int genTokens) {
    if (!mDocument || isMeasuring()) return false;
    const Project snapshot = mDocument->project();   // the worker reads a copy; editing goes on meanwhile
    std::shared_ptr<const Model> model = mDocument->model();
    std::vector<std::string> names{Project::kBaseName};
    for (const auto& v : snapshot.variants()) names.push_back(v.name);
    auto measured = std::make_shared<std::map<std::string, LatencyResult>>();
    LatencyParams params;
    params.promptTokens = promptTokens;
    params.genTokens = genTokens;
    const RuntimeOptions options = guiRuntimeOptions();   // Run ▸ Compute On, as the measurement starts
    mJob = std::make_unique<BackgroundJob>(tr("Measure latency"), [snapshot, model, names, params, measured, options](Feedback& feedback) {
        ProjectRunner runner(snapshot, *model, options);
        for (size_t i = 0; i < names.size(); ++i) {
            const double from = double(i) / double(names.size()), to = double(i + 1) / double(names.size());
            SubFeedback build(&feedback, from, (from + to) / 2), time(&feedback, (from + to) / 2, to);
            try {
                std::unique_ptr<Model> variant;
                if (names[i] != Project::kBaseName) variant = runner.build(names[i], &build);
                (*measured)[names[i]] = cwb::measureLatency(variant ? *variant : *model, options, params, &time);
            } catch (const Cancelled&) {
                throw;   // a cancel, not a failure
            } catch (const Error& e) {
                throw Error(names[i] + ": " + errorText(e));   // which variant failed
            }
        }
    });
    QPointer<ProjectDocument> document = mDocument;
    connect(mJob.get(), &BackgroundJob::progressChanged, this, [this](double f) { mProgress->setValue(int(std::lround(f * 1000))); });
    const std::string device = options.device.str();
    std::map<std::string, nlohmann::json> startBasis;   // what each is measured from: the project as the job starts
    for (const auto& name : names) startBasis[name] = snapshot.measurementBasis(name);
    connect(mJob.get(), &BackgroundJob::finished, this, [this, document, measured, device, startBasis](bool cancelled, const QString& error) {
        mProgress->setVisible(false);
        mCancelMeasure->setVisible(false);
        mMeasure->setEnabled(true);
        const bool ok = !cancelled && error.isEmpty() && document;
        mMeasureStatus->setStyleSheet(ok || cancelled ? QString() : QStringLiteral("color: #b00020"));
        mLatencyStored = false;
        mLatencyAside.clear();
        mMeasureStatus->setText(cancelled ? tr("Latency measurement cancelled; nothing was stored.") : tr("Latency not measured: %1").arg(error));
        if (ok) {
            QStringList notStored;
            for (const auto& [name, latency] : *measured) {
                if (name != Project::kBaseName && !document->project().hasVariant(name)) continue;   // removed meanwhile
                std::vector<ResultRow> rows;
                for (const auto& r : document->project().results(name))
                    if (!isLatencyMetric(r.metric)) rows.push_back(r);
                // One basis per variant's rows: rows measured before an edit keep theirs, so the set stays marked. Their
                // basis must then be of the recipe and model the latency was measured from, or the latency would be
                // filed under another recipe (and a later run would keep it as that recipe's: review).
                const QString key = QString::fromStdString(name);
                const nlohmann::json stored = document->resultBasis(key);
                const bool current = rows.empty() || document->resultsCurrent(key);
                bool sameBuild = true;
                for (const char* part : {"steps", "model"})
                    sameBuild = sameBuild && stored.is_object() &&
                                stored.value(part, nlohmann::json()) == startBasis.at(name).value(part, nlohmann::json());
                if (!current && !sameBuild) {
                    notStored << key;
                    continue;
                }
                const std::optional<nlohmann::json> basis =
                    current ? std::optional<nlohmann::json>(startBasis.at(name)) : std::optional<nlohmann::json>(stored);
                const int threads = at::get_num_threads();
                rows.push_back({name, "decode_ms_p50", latency.decodeP50Ms, 0, device, threads, latency.decodeMeanMs / 1000.0, "", ""});
                rows.push_back({name, "prefill_tokens_per_second", latency.prefillTokensPerSecond, 0, device, threads,
                                latency.prefillSeconds, "", ""});
                document->setResults(key, rows, basis);
            }
            if (!notStored.isEmpty())
                mLatencyAside = tr(" Not stored for %1: its results are of an earlier recipe or model; run it, then "
                                   "measure again.").arg(notStored.join(tr(", ")));
            mLatencyStored = true;
            refresh();
        }
        emit latencyMeasured(ok, cancelled ? tr("Cancelled; nothing was stored.") : error);
    });
    mProgress->setValue(0);
    mProgress->setVisible(true);
    mCancelMeasure->setVisible(true);
    mMeasureStatus->clear();
    mMeasure->setEnabled(false);
    emit latencyStarted(mJob->title());
    mJob->start();
    return true;
}

} // namespace cwb
