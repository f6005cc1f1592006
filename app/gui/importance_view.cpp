#include "app/gui/importance_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "app/gui/background_job.h"
#include "app/gui/compute_device.h"
#include "app/gui/layer_pick_bar.h"
#include "app/gui/project_document.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/model/model.h"
#include "core/util/feedback.h"
#include "core/eval/perplexity.h"
#include "widgets/importance_heatmap.h"
#include "widgets/score_histogram.h"

namespace cwb {

namespace {

QString unitOf(const QString& kind) {
    if (kind == "heads.ablation") return QObject::tr("Δ loss (nats)");
    if (kind == "linears.sensitivity") return QObject::tr("KL (nats)");
    if (kind == "channels.wanda") return QObject::tr("|W|·‖X‖");
    return {};
}

HeatmapData heatmapData(const ImportanceMap& map) {
    HeatmapData data;
    data.title = QString::fromStdString(map.kind);
    for (const auto& r : map.rowLabels) data.rowLabels << QString::fromStdString(r);
    for (const auto& c : map.columnLabels) data.columnLabels << QString::fromStdString(c);
    data.values = map.values;
    data.unit = unitOf(data.title);
    return data;
}

} // namespace

ImportanceView::ImportanceView(QWidget* parent)
    : QWidget(parent), mKind(new QComboBox(this)), mSamples(new QSpinBox(this)), mTokens(new QSpinBox(this)),
      mProbeLabel(new QLabel(tr("Each layer:"), this)), mProbe(new QComboBox(this)),
      mCompute(new QPushButton(tr("Compute"), this)), mCancel(new QPushButton(tr("Cancel"), this)),
      mProgress(new QProgressBar(this)), mStatus(new QLabel(this)), mHeatmap(new ImportanceHeatmap(this)),
      mPick(new LayerPickBar(this)), mChannelPanel(new QWidget(this)), mChannelBlock(new QComboBox(mChannelPanel)),
      mHistogram(new ScoreHistogram(mChannelPanel)) {
    for (const auto& k : importanceKinds()) mKind->addItem(QString::fromStdString(k));
    mKind->setToolTip(tr("heads.ablation: loss increase when one attention head is removed\n"
                         "linears.sensitivity: KL to the model when only that layer is compressed (Each layer: RTN int4 or a step's method)\n"
                         "channels.wanda: Wanda score summed per MLP channel"));
    mSamples->setRange(1, 4096);
    mSamples->setValue(8);
    mSamples->setToolTip(tr("token windows drawn from the project's calibration text (or its evaluation text)"));
    mTokens->setRange(2, 8192);
    mTokens->setValue(128);
    mTokens->setToolTip(tr("tokens per window"));
    mCompute->setToolTip(tr("Measure the chosen metric on a worker thread (F6)"));
    mProbe->setToolTip(tr("What each layer is compressed with, one at a time, for its sensitivity: RTN int4 g32, or the "
                          "method and parameters of a step of the current variant"));
    mProbe->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    mProbe->setMinimumContentsLength(16);
    mCancel->setEnabled(false);
    mProgress->setRange(0, 1000);
    mProgress->setVisible(false);
    // The description names the measurement (a recipe step's JSON for sensitivity maps): wrapped, and never what
    // sets the view's width, which once squeezed the model dock to a sliver (GUI probe).
    mStatus->setWordWrap(true);
    mStatus->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);

    auto* row = new QHBoxLayout;
    row->addWidget(new QLabel(tr("Metric:"), this));
    row->addWidget(mKind, 1);
    row->addWidget(new QLabel(tr("Windows:"), this));
    row->addWidget(mSamples);
    row->addWidget(new QLabel(tr("× tokens:"), this));
    row->addWidget(mTokens);
    row->addWidget(mProbeLabel);
    row->addWidget(mProbe, 1);
    row->addWidget(mCompute);
    row->addWidget(mProgress, 1);
    row->addWidget(mCancel);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(row);
    layout->addWidget(mStatus);
    auto* channelRow = new QHBoxLayout;
    channelRow->addWidget(new QLabel(tr("Channel scores of:"), mChannelPanel));
    channelRow->addWidget(mChannelBlock, 1);
    auto* channelLayout = new QVBoxLayout(mChannelPanel);
    channelLayout->setContentsMargins(0, 0, 0, 0);
    channelLayout->addLayout(channelRow);
    channelLayout->addWidget(mHistogram, 1);
    mChannelBlock->setToolTip(tr("The block whose per-channel scores the histogram shows (or click its row on the map)"));
    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(mHeatmap);
    splitter->addWidget(mChannelPanel);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 2);
    layout->addWidget(splitter, 1);
    layout->addWidget(mPick);
    connect(mChannelBlock, &QComboBox::currentIndexChanged, this, &ImportanceView::showChannelHistogram);
    mHeatmap->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(mHeatmap, &QWidget::customContextMenuRequested, this, &ImportanceView::showContextMenu);

    connect(mKind, &QComboBox::currentTextChanged, this, &ImportanceView::showStored);
    connect(mKind, &QComboBox::currentTextChanged, this, &ImportanceView::refreshProbes);
    connect(mPick, &LayerPickBar::pickedChanged, this, &ImportanceView::markPicked);
    connect(mCompute, &QPushButton::clicked, this, &ImportanceView::compute);
    connect(mCancel, &QPushButton::clicked, this, &ImportanceView::cancel);
    connect(mHeatmap, &ImportanceHeatmap::cellClicked, this, [this](int r, int c, Qt::KeyboardModifiers modifiers) {
        pickCell(r, c, modifiers);
        if (mChannelPanel->isVisibleTo(this)) mChannelBlock->setCurrentIndex(r);
        const QString layer = layerForCell(r, c);
        if (!layer.isEmpty()) emit layerClicked(layer);
    });
    setDocument(nullptr);
}

ImportanceView::~ImportanceView() = default;

void ImportanceView::setDocument(ProjectDocument* document) {
    if (mJob) mJob.reset();   // cancels and waits: the job reads the old document's model
    if (mDocument) disconnect(mDocument, nullptr, this, nullptr);
    mDocument = document;
    setEnabled(document != nullptr);
    // Windows longer than the model's context were clipped to it without a word (GUI probe).
    if (document) mTokens->setMaximum(int(std::clamp<int64_t>(document->model()->spec.context, 2, 1 << 20)));
    if (document) {
        connect(document, &ProjectDocument::importanceChanged, this, &ImportanceView::showStored);
        connect(document, &ProjectDocument::settingsChanged, this, &ImportanceView::showStored);   // its text warning
        connect(document, &ProjectDocument::stepsChanged, this, &ImportanceView::refreshProbes);
        connect(document, &ProjectDocument::currentVariantChanged, this, &ImportanceView::refreshProbes);
    }
    mPick->setDocument(document);
    refreshProbes();
    showStored();
}

namespace {
bool isLayerSensitivityKind(const QString& kind) { return kind == "linears.sensitivity" || kind == "linears.delta_ppl"; }
} // namespace

void ImportanceView::refreshProbes() {
    const bool shown = isLayerSensitivityKind(kind());
    mProbe->setVisible(shown);
    mProbeLabel->setVisible(shown);
    const QString kept = mProbe->currentData().toString();
    const QSignalBlocker block(mProbe);
    mProbe->clear();
    const nlohmann::json fallback = defaultSensitivityStep();
    mProbe->addItem(tr("RTN int4 g32 (default)"), QString::fromStdString(fallback.dump()));
    mProbe->setItemData(0, QString::fromStdString(fallback.dump()), Qt::ToolTipRole);
    const nlohmann::json steps = mDocument ? mDocument->steps(mDocument->currentVariant()) : nlohmann::json::array();
    for (size_t i = 0; i < steps.size(); ++i) {
        std::vector<std::string> leftOut;
        const nlohmann::json probe = sensitivityProbe(steps[i], &leftOut);
        if (probe.is_null()) continue;
        const QString data = QString::fromStdString(probe.dump());
        if (mProbe->findData(data) >= 0) continue;
        mProbe->addItem(tr("step %1: %2 %3").arg(i + 1).arg(QString::fromStdString(probe["method"].get<std::string>()),
                                                          QString::fromStdString(probe["params"].dump())),
                        data);
        QString tip = data;
        if (!leftOut.empty()) {
            QStringList fields;
            for (const auto& f : leftOut) fields << QString::fromStdString(f);
            tip += tr("\n(without the step's %1: each layer is measured alone)").arg(fields.join(tr(", ")));
        }
        mProbe->setItemData(mProbe->count() - 1, tip, Qt::ToolTipRole);
    }
    const int again = mProbe->findData(kept);
    mProbe->setCurrentIndex(again >= 0 ? again : 0);
}

nlohmann::json ImportanceView::probeStep() const { return nlohmann::json::parse(mProbe->currentData().toString().toStdString()); }

bool ImportanceView::chooseProbe(const nlohmann::json& step) {
    const int index = mProbe->findData(QString::fromStdString(step.dump()));
    if (index < 0) return false;
    mProbe->setCurrentIndex(index);
    return true;
}

QString ImportanceView::kind() const { return mKind->currentText(); }
void ImportanceView::setKind(const QString& kind) { mKind->setCurrentText(kind); }
bool ImportanceView::isComputing() const { return mJob && mJob->isRunning(); }

void ImportanceView::setWindowSize(int samples, int tokens) {
    mSamples->setValue(samples);
    mTokens->setValue(tokens);
}

std::pair<int, int> ImportanceView::windowSize() const { return {mSamples->value(), mTokens->value()}; }

void ImportanceView::showStored() {
    const ImportanceMap* map = mDocument ? mDocument->project().importance(kind().toStdString()) : nullptr;
    const bool channels = map && kind().startsWith("channels.");
    mChannelPanel->setVisible(channels);
    {
        const QSignalBlocker block(mChannelBlock);
        const int previous = mChannelBlock->currentIndex();
        mChannelBlock->clear();
        if (channels)
            for (const auto& r : map->rowLabels) mChannelBlock->addItem(QString::fromStdString(r));
        if (mChannelBlock->count() > 0) mChannelBlock->setCurrentIndex(std::clamp(previous, 0, mChannelBlock->count() - 1));
    }
    showChannelHistogram(mChannelBlock->currentIndex());
    if (!map) {
        mHeatmap->clear();
        mHeatmap->setMarkedCells({});
        mStatus->setText(mDocument ? tr("Not measured yet: press Compute (F6).") : tr("Open a model or project."));
        return;
    }
    mHeatmap->setScores(heatmapData(*map));
    markPicked();
    // The boxes say what the map shown was measured with: after reopening they showed the defaults beside a map of
    // other windows, and Compute measured another (GUI probe).
    if (map->measuredWith.is_object() && map->measuredWith.contains("windows") && map->measuredWith.contains("tokens")) {
        const int64_t windows = map->measuredWith.value("windows", int64_t(0)), tokens = map->measuredWith.value("tokens", int64_t(0));
        if (windows >= mSamples->minimum() && windows <= mSamples->maximum() && tokens >= mTokens->minimum() && tokens <= mTokens->maximum())
            setWindowSize(int(windows), int(tokens));
    }
    if (map->measuredWith.is_object() && map->measuredWith.contains("step")) chooseProbe(map->measuredWith["step"]);
    const std::string measured = describeImportanceMeasurement(map->measuredWith);
    QString status = tr("%1: %2 × %3%4. Hover a cell for its value; click it to select the layer in the model tree.")
                         .arg(kind()).arg(map->rowLabels.size()).arg(map->columnLabels.size())
                         .arg(measured.empty() ? QString() : tr(", measured on %1").arg(QString::fromStdString(measured)));
    // Measured on the text perplexity is measured on: nothing said so but the file name (GUI probe).
    const ProjectSettings& s = mDocument->project().settings();
    const std::string text = map->measuredWith.is_object() ? map->measuredWith.value("text", std::string()) : std::string();
    const std::string textHash = map->measuredWith.is_object() ? map->measuredWith.value("text_hash", std::string()) : std::string();
    const bool onEvaluation = !text.empty() && (text == s.evaluation.path || (!textHash.empty() && textHash == s.evaluation.hash));
    if (onEvaluation)
        status += tr("\nMeasured on the evaluation text: layers picked from this map are fitted to the text perplexity is "
                     "measured on. %1")
                      .arg(evaluationStandInWarning(s).empty()
                               ? tr("The project has a calibration text of its own now: Compute again to measure on it.")
                               : tr("Set a calibration text of its own in Project ▸ Settings to keep the two apart."));
    mStatus->setStyleSheet(onEvaluation ? QStringLiteral("color: #8a5300") : QString());
    mStatus->setText(status);
}

bool ImportanceView::compute() {
    if (!mDocument || isComputing()) return false;
    const ProjectSettings& s = mDocument->project().settings();
    const std::string text = measurementText(s).path;
    std::shared_ptr<const Model> model = mDocument->model();
    if (text.empty() || !model->tokenizer) {
        QMessageBox::warning(this, tr("Cannot measure importance"),
                             text.empty() ? tr("The project has no calibration or evaluation text to measure on.\n\n"
                                               "Choose one in Project ▸ Settings (Ctrl+,), then press Compute again.")
                                          : tr("The model has no tokenizer, so no text can be turned into tokens. Give it one with Project ▸ Use Tokenizer File."));
        return false;
    }
    const std::string kindId = kind().toStdString();
    const CalibrationSpec spec{text, mSamples->value(), mTokens->value(), s.calibrationSeed};
    const std::string textHash = measurementText(s).hash;
    CalibrationCompute compute;
    try {   // Run ▸ Compute On picks the device; maps are measured in f32 on either
        compute = importanceCompute(guiComputeDevice() == ComputeDevice::Cuda ? "cuda" : "cpu", "", kindId);
    } catch (const std::exception& e) {
        QMessageBox::warning(this, tr("Cannot measure importance"), QString::fromUtf8(e.what()));
        return false;
    }
    const nlohmann::json probe = isLayerSensitivityKind(kind()) ? probeStep() : nlohmann::json();
    auto result = std::make_shared<ImportanceMap>();
    mJob = std::make_unique<BackgroundJob>(tr("Importance %1").arg(kind()), [model, spec, kindId, result, textHash, compute, probe](Feedback& feedback) {
        const at::Tensor windows = drawCalibration(model->tokenizer->encode(readTextFile(spec.textPath), model->tokenizer->addBosByDefault()),
                                                   model->tokenizer->textBos(), spec, model->spec.context);
        if (probe.is_null()) {
            *result = computeImportance(*model, kindId, windows, &feedback, compute);
        } else {
            LayerSensitivity sensitivity = computeLayerSensitivity(*model, probe, windows, &feedback, compute);
            *result = kindId == "linears.sensitivity" ? sensitivity.kl : sensitivity.deltaPerplexity;
        }
        result->measuredWith = importanceMeasurement(spec.textPath, textHash, windows, spec.seed, compute, result->kind, probe);
    });
    connect(mJob.get(), &BackgroundJob::progressChanged, this, [this](double f) { mProgress->setValue(int(std::lround(f * 1000))); });
    connect(mJob.get(), &BackgroundJob::finished, this, [this, result, kindId](bool cancelled, const QString& error) {
        mProgress->setVisible(false);
        mCancel->setEnabled(false);
        mCompute->setEnabled(true);
        emit jobFinished();
        if (cancelled) {
            mStatus->setText(tr("Cancelled; nothing was stored."));
        } else if (!error.isEmpty()) {
            mStatus->setText(tr("Failed: %1").arg(error));
            QMessageBox::critical(this, tr("Importance failed"),
                                  tr("Measuring %1 failed:\n%2")   // the error says what to change (generic advice contradicted it, GUI probe)
                                      .arg(QString::fromStdString(kindId), error));
        } else {
            mDocument->setImportance(*result);
            emit computed(QString::fromStdString(kindId));
        }
    });
    mProgress->setValue(0);
    mProgress->setVisible(true);
    mCancel->setEnabled(true);
    mCompute->setEnabled(false);
    mStatus->setText(tr("Measuring %1…").arg(kind()));
    emit jobStarted(mJob->title());
    mJob->start();
    return true;
}

QString ImportanceView::statusText() const { return mStatus->text(); }

void ImportanceView::cancel() {
    if (mJob) mJob->cancel();
}

QString ImportanceView::layerForCell(int row, int column) const {
    if (!mDocument) return {};
    const QString k = kind();
    const std::string blockTag = "." + std::to_string(row) + ".";
    const ImportanceMap* map = mDocument->project().importance(k.toStdString());
    const std::string columnLabel = map && column >= 0 && size_t(column) < map->columnLabels.size() ? map->columnLabels[size_t(column)] : "";
    for (const auto& layer : mDocument->model()->linearLayers()) {
        if (layer.find(blockTag) == std::string::npos) continue;
        if (k.startsWith("linears.")) {
            if (layer.size() >= columnLabel.size() + 1 && layer.compare(layer.size() - columnLabel.size(), columnLabel.size(), columnLabel) == 0 &&
                layer[layer.size() - columnLabel.size() - 1] == '.')
                return QString::fromStdString(layer);
            continue;
        }
        const char* group = k.startsWith("heads.") ? "attn" : "mlp";
        if (layer.find(group) != std::string::npos) return QString::fromStdString(layer.substr(0, layer.rfind('.')));
    }
    return {};
}

void ImportanceView::markPicked() {
    QVector<QRect> marks;
    const std::vector<std::string>& picked = mPick->picked();
    const auto isPicked = [&](const QString& layer) {
        return !layer.isEmpty() && std::find(picked.begin(), picked.end(), layer.toStdString()) != picked.end();
    };
    if (!picked.empty() && mDocument && mDocument->model()) {
        const bool perLayer = kind().startsWith("linears.");
        for (int row = 0; row < mHeatmap->rowCount(); ++row) {
            if (!perLayer) {   // every cell of a head or channel row stands for the row's group: one mark for the row
                if (isPicked(layerForCell(row, 0))) marks << QRect(0, row, mHeatmap->columnCount(), 1);
                continue;
            }
            for (int column = 0; column < mHeatmap->columnCount(); ++column)
                if (isPicked(layerForCell(row, column))) marks << QRect(column, row, 1, 1);
        }
    }
    mHeatmap->setMarkedCells(marks);
}

void ImportanceView::pickCell(int row, int column, Qt::KeyboardModifiers modifiers) {
    if (modifiers & Qt::ShiftModifier) {
        std::vector<std::string> rowLayers;
        for (int c = 0; c < mHeatmap->columnCount(); ++c) rowLayers.push_back(layerForCell(row, c).toStdString());
        mPick->addPicked(rowLayers);
        return;
    }
    const std::string layer = layerForCell(row, column).toStdString();
    if (layer.empty()) return;
    if (modifiers & Qt::ControlModifier) mPick->togglePicked(layer);
    else mPick->setPicked({layer});
}

void ImportanceView::showContextMenu(const QPoint& pos) {
    int row = -1, column = -1;
    mHeatmap->valueAt(pos, &row, &column);
    QMenu menu(this);
    if (row >= 0) {
        menu.addAction(tr("Pick This Layer"), this, [this, row, column] { pickCell(row, column); });
        menu.addAction(tr("Add This Layer"), this, [this, row, column] { pickCell(row, column, Qt::ControlModifier); });
        menu.addAction(tr("Add Whole Row"), this, [this, row, column] { pickCell(row, column, Qt::ShiftModifier); });
        menu.addSeparator();
    }
    QAction* targets = menu.addAction(tr("Use Picked Layers as Step Targets"), this, [this] { mPick->useAsTargets(); });
    QAction* bits = menu.addAction(tr("Override Bits for Picked Layers"), this, [this] { mPick->addBitsOverride(); });
    targets->setEnabled(!mPick->picked().empty());
    bits->setEnabled(!mPick->picked().empty());
    menu.exec(mHeatmap->mapToGlobal(pos));
}

void ImportanceView::showChannelHistogram(int row) {
    const ImportanceMap* map = mDocument ? mDocument->project().importance(kind().toStdString()) : nullptr;
    if (!map || !kind().startsWith("channels.") || row < 0 || size_t(row) >= map->rowLabels.size()) {
        mHistogram->clear();
        return;
    }
    if (mChannelBlock->currentIndex() != row) mChannelBlock->setCurrentIndex(row);   // comes back here once
    const size_t columns = map->columnLabels.size();
    const std::vector<double> scores(map->values.begin() + long(row * columns), map->values.begin() + long((row + 1) * columns));
    mHistogram->setScores(tr("%1: %2 per channel").arg(QString::fromStdString(map->rowLabels[size_t(row)]), kind()), unitOf(kind()), scores);
}

} // namespace cwb
