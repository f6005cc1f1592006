#include "app/gui/budget_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTableWidget>
#include <QUndoStack>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "app/commands/variant_commands.h"
#include "app/gui/background_job.h"
#include "app/gui/compute_device.h"
#include "app/gui/project_document.h"
#include "core/analysis/budget.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/eval/perplexity.h"
#include "core/model/model.h"
#include "core/util/feedback.h"

namespace cwb {

BudgetDialog::BudgetDialog(ProjectDocument* document, QWidget* parent)
    : QDialog(parent), mDocument(document), mTarget(new QDoubleSpinBox(this)), mTargetMiB(new QDoubleSpinBox(this)), mBits(new QLineEdit(QStringLiteral("4,8"), this)),
      mGroupSize(new QSpinBox(this)), mMethod(new QComboBox(this)), mSamples(new QSpinBox(this)), mTokens(new QSpinBox(this)),
      mSolve(new QPushButton(tr("&Solve"), this)), mCancel(new QPushButton(tr("Cancel"), this)),
      mApply(new QPushButton(tr("&Apply as New Variant"), this)), mProgress(new QProgressBar(this)), mSummary(new QLabel(this)),
      mTable(new QTableWidget(0, 4, this)) {
    setWindowTitle(tr("Budget Solver"));
    mTarget->setRange(2.0, 16.0);
    mTarget->setSingleStep(0.25);
    mTarget->setDecimals(3);
    mTarget->setValue(5.0);   // 4.5 is below what 4-bit g32 layers store (4.667), so the defaults failed
    mTarget->setToolTip(tr("Average bits per weight over the quantized layers, scales and zeros included"));
    // Bits per weight and size are one budget: editing either updates the other.
    mTargetMiB->setDecimals(6);   // small models are a fraction of a MiB per bit
    mTargetMiB->setSuffix(tr(" MiB"));
    mTargetMiB->setToolTip(tr("The same budget as the size of the planned linear layers of the blocks (levels, scales and zeros); "
                              "embeddings, the output head and norms are not counted, so the whole model is larger"));
    mHead = new QCheckBox(tr("The output head too"), this);
    mHead->setToolTip(tr("Plans lm_head as one more layer, measured alone as the others (a tied head gets its own "
                         "quantized copy); the size target then counts it"));
    updateSizeScale();
    connect(mTarget, &QDoubleSpinBox::valueChanged, this, [this](double bits) {
        const QSignalBlocker block(mTargetMiB);
        mTargetMiB->setValue(bits * mMiBPerBit);
    });
    connect(mTargetMiB, &QDoubleSpinBox::valueChanged, this, [this](double mib) {
        if (mMiBPerBit <= 0) return;
        {
            const QSignalBlocker block(mTarget);
            mTarget->setValue(mib / mMiBPerBit);
        }
        inputsChanged();   // the target changed, though its own signal was held back (GUI probe: a stale plan stayed applicable)
    });
    mBits->setToolTip(tr("Candidate widths per layer, comma-separated (2..8), e.g. 4,8 or 3,4,8"));
    mGroupSize->setRange(8, 4096);
    mGroupSize->setValue(32);
    mGroupSize->setToolTip(tr("Group size of the quantizer used to measure each width"));
    mMethod->addItem(tr("RTN (round to nearest)"), QStringLiteral("quantize.rtn"));
    mMethod->addItem(tr("GPTQ"), QStringLiteral("quantize.gptq"));
    mMethod->addItem(tr("AWQ"), QStringLiteral("quantize.awq"));
    mMethod->setToolTip(tr("Each layer's sensitivity is measured with the quantizer the recipe will use"));
    mFused = new QCheckBox(tr("One width for q/k/v and for gate/up"), this);
    mFused->setToolTip(tr("Plans the layers that read the same input as one unit: vLLM runs them as one fused layer, "
                          "so a compressed-tensors export needs them alike"));
    mSamples->setRange(1, 1024);
    mSamples->setValue(8);
    mSamples->setToolTip(tr("Token windows drawn from the project's calibration text (or its evaluation text)"));
    // Windows past the model's context were clipped to it without a word.
    mTokens->setRange(2, document && document->model() ? int(std::clamp<int64_t>(document->model()->spec.context, 2, 1 << 20)) : 8192);
    mTokens->setValue(std::min(128, mTokens->maximum()));
    mProgress->setRange(0, 1000);
    mProgress->setVisible(false);
    mCancel->setEnabled(false);
    mApply->setEnabled(false);
    mTable->setHorizontalHeaderLabels({tr("Layer"), tr("Parameters"), tr("Bits"), tr("KL of the layer alone")});
    mTable->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int column = 1; column < 4; ++column)   // the headers whole ("KL of the layer alone" was cut short)
        mTable->horizontalHeader()->setSectionResizeMode(column, QHeaderView::ResizeToContents);
    mTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    mSummary->setWordWrap(true);
    mSummary->setText(tr("Choose a target and the candidate widths, then Solve."));

    auto* form = new QFormLayout;
    form->addRow(tr("Target bits per weight:"), mTarget);
    // Says what is counted: the plan's MiB beside a whole model's size in Compare read as a wrong figure (GUI probe).
    form->addRow(tr("or size of the blocks' linear layers:"), mTargetMiB);
    form->addRow(tr("Candidate bits:"), mBits);
    form->addRow(tr("Quantizer:"), mMethod);
    form->addRow(tr("Group size:"), mGroupSize);
    form->addRow(QString(), mFused);
    form->addRow(QString(), mHead);
    auto* windows = new QHBoxLayout;
    windows->addWidget(mSamples);
    windows->addWidget(new QLabel(tr("× tokens:"), this));
    windows->addWidget(mTokens);
    form->addRow(tr("Windows:"), windows);
    auto* run = new QHBoxLayout;
    run->addWidget(mSolve);
    run->addWidget(mProgress, 1);
    run->addWidget(mCancel);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    buttons->addButton(mApply, QDialogButtonBox::AcceptRole);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addLayout(run);
    layout->addWidget(mSummary);
    layout->addWidget(mTable, 1);
    layout->addWidget(buttons);

    // A plan belongs to the inputs it was solved with: changing one keeps it on show but takes Apply away.
    connect(mTarget, &QDoubleSpinBox::valueChanged, this, &BudgetDialog::inputsChanged);
    connect(mBits, &QLineEdit::textChanged, this, &BudgetDialog::inputsChanged);
    connect(mGroupSize, &QSpinBox::valueChanged, this, &BudgetDialog::inputsChanged);
    connect(mMethod, &QComboBox::currentIndexChanged, this, &BudgetDialog::inputsChanged);
    connect(mFused, &QCheckBox::toggled, this, &BudgetDialog::inputsChanged);
    connect(mHead, &QCheckBox::toggled, this, [this] {
        updateSizeScale();
        inputsChanged();
    });
    connect(mSamples, &QSpinBox::valueChanged, this, &BudgetDialog::inputsChanged);
    connect(mTokens, &QSpinBox::valueChanged, this, &BudgetDialog::inputsChanged);
    connect(mSolve, &QPushButton::clicked, this, [this] { solve(); });
    connect(mCancel, &QPushButton::clicked, this, &BudgetDialog::cancel);
    connect(mApply, &QPushButton::clicked, this, [this] {
        if (!applyAsVariant().isEmpty()) accept();
        else QMessageBox::warning(this, tr("Cannot apply the plan"), mLastError);
    });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    resize(760, 560);
}

BudgetDialog::~BudgetDialog() = default;

void BudgetDialog::setTargetBitsPerWeight(double bits) { mTarget->setValue(bits); }
void BudgetDialog::setTargetMiB(double mib) { mTargetMiB->setValue(mib); }
double BudgetDialog::targetBitsPerWeight() const { return mTarget->value(); }
double BudgetDialog::targetMiB() const { return mTargetMiB->value(); }
void BudgetDialog::setMethod(const QString& methodId) {
    const int index = mMethod->findData(methodId);
    if (index >= 0) mMethod->setCurrentIndex(index);
}
void BudgetDialog::setCandidateBits(const QString& list) { mBits->setText(list); }
void BudgetDialog::setWindowSize(int samples, int tokens) {
    mSamples->setValue(samples);
    mTokens->setValue(tokens);
}

void BudgetDialog::setFusedSharedInputs(bool fused) { mFused->setChecked(fused); }
void BudgetDialog::setIncludeHead(bool head) { mHead->setChecked(head); }

// The size that one bit per weight of the planned layers takes; the bits-per-weight target stays as it is.
void BudgetDialog::updateSizeScale() {
    BudgetOptions planned;
    planned.includeHead = mHead->isChecked();
    const double parameters = mDocument && mDocument->model() ? plannedParameters(*mDocument->model(), planned) : 0.0;
    mMiBPerBit = parameters / 8.0 / (1024.0 * 1024.0);
    const QSignalBlocker block(mTargetMiB);
    mTargetMiB->setRange(2.0 * mMiBPerBit, 16.0 * mMiBPerBit);
    mTargetMiB->setSingleStep(std::max(0.001, 0.25 * mMiBPerBit));
    mTargetMiB->setValue(mTarget->value() * mMiBPerBit);
    mTargetMiB->setEnabled(mMiBPerBit > 0);
}
bool BudgetDialog::isSolving() const { return mJob && mJob->isRunning(); }

void BudgetDialog::inputsChanged() {
    if (!mPlan || mPlanStale) return;
    mPlanStale = true;
    mApply->setEnabled(false);
    mSummary->setText(mSummary->text() + tr("\nThe inputs changed since this plan was solved: Solve again to apply them."));
}
void BudgetDialog::cancel() {
    if (mJob) mJob->cancel();
}
QString BudgetDialog::summary() const { return mSummary->text(); }

std::vector<int> BudgetDialog::parseBits(const QString& list, QString* error) {
    std::vector<int> bits;
    for (const QString& part : list.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int b = part.trimmed().toInt(&ok);
        if (!ok || b < 2 || b > 8) {
            if (error) *error = tr("Candidate bits: \"%1\" is not a width from 2 to 8.").arg(part.trimmed());
            return {};
        }
        if (std::find(bits.begin(), bits.end(), b) == bits.end()) bits.push_back(b);
    }
    if (bits.empty() && error) *error = tr("Candidate bits: give at least one width, e.g. 4,8.");
    std::sort(bits.begin(), bits.end());
    return bits;
}

bool BudgetDialog::solve(bool interactive) {
    auto refuse = [&](const QString& why) {
        mLastError = why;
        if (interactive) QMessageBox::warning(this, tr("Cannot solve"), why);
        return false;
    };
    if (!mDocument || isSolving()) return false;
    BudgetOptions options;
    options.targetBitsPerWeight = mTarget->value();
    options.groupSize = mGroupSize->value();
    options.method = mMethod->currentData().toString().toStdString();
    options.fuseSharedInputs = mFused->isChecked();
    options.includeHead = mHead->isChecked();
    QString error;
    options.bits = parseBits(mBits->text(), &error);
    if (options.bits.empty()) return refuse(error);
    try {   // a target no width can meet is said now, not after measuring every layer
        checkBudgetOptions(options);
    } catch (const std::exception& e) {
        return refuse(QString::fromUtf8(e.what()));
    }
    const ProjectSettings& s = mDocument->project().settings();
    const std::string text = measurementText(s).path;
    std::shared_ptr<const Model> model = mDocument->model();
    if (text.empty()) return refuse(tr("The project has no calibration or evaluation text to measure on. Choose one in Project ▸ Settings."));
    if (!model->tokenizer) return refuse(tr("The model has no tokenizer, so no text can be turned into tokens. Give it one with Project ▸ Use Tokenizer File."));
    const CalibrationSpec spec{text, mSamples->value(), mTokens->value(), s.calibrationSeed};
    try {   // Run ▸ Compute On picks the device; f32 as `cwb budget` measures
        options.compute = importanceCompute(guiComputeDevice() == ComputeDevice::Cuda ? "cuda" : "cpu", "", "linears.sensitivity");
    } catch (const std::exception& e) {
        return refuse(QString::fromUtf8(e.what()));
    }
    auto plan = std::make_shared<BudgetPlan>();
    mJob = std::make_unique<BackgroundJob>(tr("Budget solver"), [model, spec, options, plan](Feedback& feedback) {
        const at::Tensor windows = drawCalibration(model->tokenizer->encode(readTextFile(spec.textPath), model->tokenizer->addBosByDefault()),
                                                   model->tokenizer->textBos(), spec, model->spec.context);
        *plan = solveBitBudget(*model, windows, options, &feedback);
    });
    connect(mJob.get(), &BackgroundJob::progressChanged, this, [this](double f) { mProgress->setValue(int(std::lround(f * 1000))); });
    connect(mJob.get(), &BackgroundJob::finished, this, [this, plan, interactive](bool cancelled, const QString& failure) {
        mProgress->setVisible(false);
        mCancel->setEnabled(false);
        mSolve->setEnabled(true);
        const bool ok = !cancelled && failure.isEmpty();
        if (ok) {
            mPlan = std::make_unique<BudgetPlan>(*plan);
            mPlanTarget = mSolvingTarget;
            mPlanStale = false;
            showPlan();
            emit solved();
        } else {
            mLastError = cancelled ? tr("Cancelled; no plan.") : tr("The solver failed: %1").arg(failure);
            mSummary->setText(mLastError);
            if (!cancelled && interactive)
                QMessageBox::critical(this, tr("Budget solver failed"),
                                      mLastError + tr("\n\nA target below the smallest width's bits per weight cannot be met: raise it or add a smaller width."));
        }
        emit solveFinished(ok);
    });
    mPlan.reset();
    mSolvingTarget = mTarget->value();
    mTable->setRowCount(0);
    mApply->setEnabled(false);
    mProgress->setValue(0);
    mProgress->setVisible(true);
    mCancel->setEnabled(true);
    mSolve->setEnabled(false);
    mSummary->setText(tr("Measuring every layer at %1 bits…").arg(mBits->text()));
    emit solveStarted(mJob->title());
    mJob->start();
    return true;
}

void BudgetDialog::showPlan() {
    mTable->setRowCount(int(mPlan->layers.size()));
    int row = 0;
    for (const auto& layer : mPlan->layers) {
        const int chosen = mPlan->bits.at(layer.name);
        double cost = std::nan("");
        for (const auto& o : layer.options)
            if (o.bits == chosen) cost = o.cost;
        auto* bits = new QTableWidgetItem(QString::number(chosen));
        bits->setTextAlignment(Qt::AlignCenter);
        mTable->setItem(row, 0, new QTableWidgetItem(QString::fromStdString(layer.name)));
        mTable->setItem(row, 1, new QTableWidgetItem(QString::number(layer.parameters)));
        mTable->setItem(row, 2, bits);
        mTable->setItem(row, 3, new QTableWidgetItem(QString::number(cost, 'g', 4)));
        ++row;
    }
    const std::string standIn = evaluationStandInWarning(mDocument->project().settings());
    mSummary->setText(tr("Plan: %1 bits per weight (target %2); summed single-layer KL %3.")
                          .arg(mPlan->bitsPerWeight, 0, 'f', 3)
                          .arg(mPlanTarget, 0, 'f', 3)
                          .arg(mPlan->predictedCost, 0, 'g', 4) +
                      (standIn.empty() ? QString() : tr("\nWarning: the layers' KL was %1.").arg(QString::fromStdString(standIn))));
    mApply->setEnabled(true);
}

QString BudgetDialog::applyAsVariant(const QString& name) {
    if (!mPlan) {
        mLastError = tr("Solve first: there is no plan to apply.");
        return {};
    }
    if (mPlanStale) {
        mLastError = tr("The inputs changed since the plan was solved: Solve again first.");
        return {};
    }
    // Named after the target the plan was solved for, not the field's value now.
    const QString chosen = name.isEmpty()
                               ? uniqueVariantName(mDocument->project(), QStringLiteral("budget-%1bpw").arg(mPlanTarget, 0, 'g', 4))
                               : name;
    mLastError = variantNameProblem(mDocument->project(), chosen);
    if (!mLastError.isEmpty()) return {};
    Variant variant;
    variant.name = chosen.toStdString();
    variant.recipe = mPlan->recipe.toJson();
    mDocument->undoStack()->push(new AddVariant(mDocument, variant));
    return chosen;
}

} // namespace cwb
