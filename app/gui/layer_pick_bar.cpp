#include "app/gui/layer_pick_bar.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSpinBox>
#include <QUndoStack>

#include <algorithm>

#include "app/commands/step_commands.h"
#include "app/gui/project_document.h"
#include "core/model/model.h"

namespace cwb {

LayerPickBar::LayerPickBar(QWidget* parent)
    : QWidget(parent), mLabel(new QLabel(this)), mStepLabel(new QLabel(this)), mStep(new QComboBox(this)),
      mTargets(new QPushButton(tr("Use as Targets"), this)), mBits(new QSpinBox(this)),
      mOverride(new QPushButton(tr("Override Bits"), this)), mClear(new QPushButton(tr("Clear"), this)) {
    mStep->setToolTip(tr("The step of the current variant (chosen in the Pipeline tab) that the picked layers edit"));
    mStep->setSizeAdjustPolicy(QComboBox::AdjustToContents);   // "1. quanti" was all it showed
    // Kept at its contents' width: the picked-layers text beside it wraps instead (at 1366 px the combo still shrank
    // to "1. prune.magnitu", GUI probe).
    mStep->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
    mTargets->setToolTip(tr("Set the step's targets regex to exactly the picked layers (undoable)"));
    mBits->setRange(2, 8);
    mBits->setValue(8);
    mBits->setToolTip(tr("Bit width of the override"));
    mOverride->setToolTip(tr("Add a per-layer override of the step's bits for the picked layers (undoable)"));
    mLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    mLabel->setWordWrap(true);
    auto* row = new QHBoxLayout(this);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(mLabel, 1);
    row->addWidget(mStepLabel);
    row->addWidget(mStep);
    row->addWidget(mTargets);
    row->addWidget(mBits);
    row->addWidget(mOverride);
    row->addWidget(mClear);
    connect(mTargets, &QPushButton::clicked, this, [this] { useAsTargets(); });
    connect(mOverride, &QPushButton::clicked, this, [this] { addBitsOverride(); });
    connect(mClear, &QPushButton::clicked, this, [this] { setPicked({}); });
    refreshLabel();
}

void LayerPickBar::setDocument(ProjectDocument* document) {
    if (mDocument) disconnect(mDocument, nullptr, this, nullptr);
    mDocument = document;
    mPicked.clear();
    if (document) {
        connect(document, &ProjectDocument::stepsChanged, this, &LayerPickBar::refreshSteps);
        connect(document, &ProjectDocument::currentVariantChanged, this, &LayerPickBar::refreshSteps);
        connect(document, &ProjectDocument::variantsChanged, this, &LayerPickBar::refreshSteps);
    }
    refreshSteps();
    refreshLabel();
}

void LayerPickBar::setPicked(const std::vector<std::string>& layers) {
    mPicked.clear();
    addPicked(layers);
    refreshLabel();
}

void LayerPickBar::addPicked(const std::vector<std::string>& layers) {
    for (const auto& l : layers)
        if (!l.empty() && std::find(mPicked.begin(), mPicked.end(), l) == mPicked.end()) mPicked.push_back(l);
    refreshLabel();
}

void LayerPickBar::togglePicked(const std::string& layer) {
    auto it = std::find(mPicked.begin(), mPicked.end(), layer);
    if (it != mPicked.end()) mPicked.erase(it);
    else if (!layer.empty()) mPicked.push_back(layer);
    refreshLabel();
}

int LayerPickBar::stepIndex() const { return mStep->currentIndex(); }
void LayerPickBar::setStepIndex(int index) { mStep->setCurrentIndex(index); }
void LayerPickBar::setOverrideBits(int bits) { mBits->setValue(bits); }

QString LayerPickBar::stepCaption() const { return mStepLabel->text(); }

void LayerPickBar::refreshSteps() {
    const int previous = mStep->currentIndex();
    const QString variant = mDocument ? mDocument->currentVariant() : QString();
    mStepLabel->setText(variant.isEmpty() ? tr("Step:") : tr("Step of %1:").arg(variant));
    mStep->clear();
    if (mDocument) {
        int n = 0;
        for (const auto& s : mDocument->steps(mDocument->currentVariant()))
            mStep->addItem(QStringLiteral("%1. %2").arg(++n).arg(QString::fromStdString(s.value("method", ""))));
    }
    if (mStep->count() > 0) mStep->setCurrentIndex(std::clamp(previous, 0, mStep->count() - 1));
    refreshLabel();
}

void LayerPickBar::refreshLabel() {
    QStringList names;
    for (const auto& l : mPicked) names << QString::fromStdString(l);
    mLabel->setText(mPicked.empty() ? tr("Picked: none (click a cell; Ctrl+click adds, Shift+click adds its row)")
                                    : tr("Picked %n layer(s): %1", nullptr, int(mPicked.size())).arg(names.join(", ")));
    mLabel->setToolTip(names.join('\n'));
    const bool usable = !mPicked.empty() && mStep->count() > 0;
    mTargets->setEnabled(usable);
    mOverride->setEnabled(usable);
    mClear->setEnabled(!mPicked.empty());
    emit pickedChanged();
}

bool LayerPickBar::refuse(const QString& why, bool interactive) {
    mLastError = why;
    if (interactive) QMessageBox::information(this, tr("Cannot edit the step"), why);
    return false;
}

bool LayerPickBar::useAsTargets(bool interactive) {
    if (!mDocument) return false;
    if (mPicked.empty()) return refuse(tr("Pick layers on the heatmap first."), interactive);
    if (stepIndex() < 0) return refuse(tr("The current variant has no step: add one in the Pipeline tab."), interactive);
    const std::string pattern = layersPattern(mPicked, mDocument->model()->linearLayers());
    mDocument->undoStack()->push(setStepTargets(mDocument, mDocument->currentVariant(), stepIndex(), pattern));
    mLastError.clear();
    emit stepEdited(tr("%1, step %2: targets set to the %3 picked %4 (Ctrl+Z undoes)")
                        .arg(mDocument->currentVariant()).arg(stepIndex() + 1).arg(mPicked.size())
                        .arg(mPicked.size() == 1 ? tr("layer") : tr("layers")));
    return true;
}

bool LayerPickBar::addBitsOverride(bool interactive) { return addOverride({{"bits", mBits->value()}}, interactive); }

bool LayerPickBar::addOverride(const nlohmann::json& params, bool interactive) {
    if (!mDocument) return false;
    if (mPicked.empty()) return refuse(tr("Pick layers on the heatmap first."), interactive);
    if (stepIndex() < 0) return refuse(tr("The current variant has no step: add one in the Pipeline tab."), interactive);
    const nlohmann::json step = mDocument->steps(mDocument->currentVariant())[size_t(stepIndex())];
    for (const auto& [name, value] : params.items())
        if (!step.value("params", nlohmann::json::object()).contains(name))
            return refuse(tr("Step %1 (%2) has no parameter \"%3\"; choose a step that has it.")
                              .arg(stepIndex() + 1)
                              .arg(QString::fromStdString(step.value("method", "")), QString::fromStdString(name)),
                          interactive);
    const std::string pattern = layersPattern(mPicked, mDocument->model()->linearLayers());
    mDocument->undoStack()->push(addStepOverride(mDocument, mDocument->currentVariant(), stepIndex(), pattern, params));
    mLastError.clear();
    emit stepEdited(tr("%1, step %2: override %3 added for the %4 picked %5 (Ctrl+Z undoes)")
                        .arg(mDocument->currentVariant()).arg(stepIndex() + 1).arg(QString::fromStdString(params.dump()))
                        .arg(mPicked.size()).arg(mPicked.size() == 1 ? tr("layer") : tr("layers")));
    return true;
}

} // namespace cwb
