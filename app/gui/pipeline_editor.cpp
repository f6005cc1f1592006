#include "app/gui/pipeline_editor.h"

#include <QAbstractItemModel>
#include <QAction>
#include <QComboBox>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QListWidget>
#include <QMessageBox>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QVBoxLayout>

#include "app/commands/step_commands.h"
#include "app/commands/variant_commands.h"
#include "app/gui/param_form.h"
#include "app/gui/project_document.h"
#include "app/gui/step_layers_editor.h"
#include "core/compress/method.h"

namespace cwb {

namespace {

QString stepLabel(const nlohmann::json& step, int index) {
    const std::string id = step.value("method", "");
    const CompressionMethod* method = MethodRegistry::instance().find(id);
    QString text = QStringLiteral("%1. %2").arg(index + 1).arg(QString::fromStdString(method ? method->displayName() : id + " (unknown)"));
    QStringList params;
    const nlohmann::json stepParams = step.value("params", nlohmann::json::object());
    for (auto it = stepParams.begin(); it != stepParams.end(); ++it)
        params << QString::fromStdString(it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump()));
    if (!params.isEmpty()) text += "  —  " + params.join(", ");
    // Which layers the step takes, and the layers given other parameters: a step narrowed to block 1's attention or
    // a budget's mixed widths once read like a step over every layer (GUI probe).
    QStringList scope;
    if (step.contains("targets") && step["targets"].is_string() && !step["targets"].get<std::string>().empty())
        scope << QStringLiteral("targets /%1/").arg(QString::fromStdString(step["targets"].get<std::string>()));
    if (step.contains("ignore") && step["ignore"].is_array() && !step["ignore"].empty())
        scope << QStringLiteral("ignores %1 pattern%2").arg(step["ignore"].size()).arg(step["ignore"].size() == 1 ? "" : "s");
    if (step.contains("overrides") && step["overrides"].is_array() && !step["overrides"].empty())
        scope << QStringLiteral("%1 per-layer override%2").arg(step["overrides"].size()).arg(step["overrides"].size() == 1 ? "" : "s");
    if (!scope.isEmpty()) text += "  —  " + scope.join(", ");
    return text;
}

// The step's layer patterns and overrides in full, for the item's tooltip ("" when it has none).
QString scopeDetail(const nlohmann::json& step) {
    QStringList lines;
    if (step.contains("targets") && step["targets"].is_string() && !step["targets"].get<std::string>().empty())
        lines << QStringLiteral("targets: %1").arg(QString::fromStdString(step["targets"].get<std::string>()));
    if (step.contains("ignore") && step["ignore"].is_array())
        for (const auto& pattern : step["ignore"]) lines << QStringLiteral("ignore: %1").arg(QString::fromStdString(pattern.dump()));
    if (step.contains("overrides") && step["overrides"].is_array())
        for (const auto& o : step["overrides"])
            lines << QStringLiteral("override %1: %2")
                         .arg(QString::fromStdString(o.value("pattern", std::string())))
                         .arg(QString::fromStdString(o.value("params", nlohmann::json::object()).dump()));
    return lines.join('\n');
}

QPushButton* button(const QString& text, const QString& tip, QWidget* parent) {
    auto* b = new QPushButton(text, parent);
    b->setToolTip(tip);
    return b;
}

} // namespace

PipelineEditor::PipelineEditor(QWidget* parent)
    : QWidget(parent), mVariants(new QComboBox(this)), mSteps(new QListWidget(this)), mPalette(new QListWidget(this)),
      mForm(new ParamForm(this)), mLayers(new StepLayersEditor(this)), mStepTitle(new QLabel(this)) {
    mVariants->setObjectName(QStringLiteral("variantChooser"));
    mVariants->setSizeAdjustPolicy(QComboBox::AdjustToContents);   // "budget-5…" was all it showed
    mVariants->setMinimumContentsLength(12);
    auto* variantRow = new QHBoxLayout;
    variantRow->addWidget(new QLabel(tr("Variant:"), this));
    variantRow->addWidget(mVariants, 1);
    auto* newButton = button(tr("New"), tr("Add an empty variant derived from the base model"), this);
    auto* duplicateButton = mDuplicateVariant = button(tr("Duplicate"), tr("Copy this variant's steps into a new variant (branch)"), this);
    mRemoveVariant = button(tr("Remove"), tr("Remove this variant and its results"), this);
    auto* renameButton = mRenameVariant = button(tr("Rename…"), tr("Give this variant another name (F2)"), this);
    // The variant's buttons under its name: in one row they made the Steps pane 550 px at least, and with the other
    // panes the window 1450 px, which pressed the Model dock to its minimum and ran off smaller screens (GUI probe).
    auto* variantButtons = new QHBoxLayout;
    variantButtons->addWidget(newButton);
    variantButtons->addWidget(duplicateButton);
    variantButtons->addWidget(renameButton);
    connect(renameButton, &QPushButton::clicked, this, [this] { renameVariant(); });
    variantButtons->addWidget(mRemoveVariant);
    variantButtons->addStretch();
    connect(newButton, &QPushButton::clicked, this, &PipelineEditor::newVariant);
    connect(duplicateButton, &QPushButton::clicked, this, &PipelineEditor::duplicateVariant);
    connect(mRemoveVariant, &QPushButton::clicked, this, &PipelineEditor::removeVariant);
    connect(mVariants, &QComboBox::currentTextChanged, this, [this](const QString& name) {
        if (!mRefreshing && mDocument) mDocument->setCurrentVariant(name);
    });

    // Steps: check box = enabled; internal drag and drop reorders (turned into a MoveStep command).
    mSteps->setDragDropMode(QAbstractItemView::InternalMove);
    mSteps->setToolTip(tr("Steps run top to bottom. Uncheck to disable; drag or Alt+Up/Down to reorder; Delete removes."));
    connect(mSteps, &QListWidget::currentRowChanged, this, &PipelineEditor::showSelectedStep);
    connect(mSteps, &QListWidget::currentRowChanged, this, &PipelineEditor::updateButtons);
    connect(mSteps, &QListWidget::itemChanged, this, [this](QListWidgetItem* item) {
        if (mRefreshing || !mDocument) return;
        const int row = mSteps->row(item);
        const bool enabled = item->checkState() == Qt::Checked;
        if (mDocument->steps(mDocument->currentVariant())[size_t(row)].value("enabled", true) == enabled) return;
        mDocument->undoStack()->push(new SetStepEnabled(mDocument, mDocument->currentVariant(), row, enabled));
    });
    connect(mSteps->model(), &QAbstractItemModel::rowsMoved, this,
            [this](const QModelIndex&, int from, int, const QModelIndex&, int to) { stepsReordered(from, to > from ? to - 1 : to); });
    auto addShortcut = [this](const QKeySequence& keys, auto slot) {
        auto* action = new QAction(this);
        action->setShortcut(keys);
        action->setShortcutContext(Qt::WidgetWithChildrenShortcut);
        connect(action, &QAction::triggered, this, slot);
        mSteps->addAction(action);
    };
    addShortcut(QKeySequence::Delete, [this] { removeSelectedStep(); });
    addShortcut(QKeySequence(Qt::ALT | Qt::Key_Up), [this] { moveSelectedStep(-1); });
    addShortcut(QKeySequence(Qt::ALT | Qt::Key_Down), [this] { moveSelectedStep(+1); });

    auto* stepButtons = new QHBoxLayout;
    auto* up = mStepUp = button(tr("Up"), tr("Move the step up (Alt+Up)"), this);
    auto* down = mStepDown = button(tr("Down"), tr("Move the step down (Alt+Down)"), this);
    auto* remove = mRemoveStep = button(tr("Remove"), tr("Remove the step (Delete)"), this);
    connect(up, &QPushButton::clicked, this, [this] { moveSelectedStep(-1); });
    connect(down, &QPushButton::clicked, this, [this] { moveSelectedStep(+1); });
    connect(remove, &QPushButton::clicked, this, &PipelineEditor::removeSelectedStep);
    stepButtons->addWidget(up);
    stepButtons->addWidget(down);
    stepButtons->addStretch();
    stepButtons->addWidget(remove);

    // Palette: every method the core registers; double click or Add appends it with its defaults.
    for (const CompressionMethod* method : MethodRegistry::instance().methods()) {
        auto* item = new QListWidgetItem(QString::fromStdString(method->displayName()), mPalette);
        item->setData(Qt::UserRole, QString::fromStdString(method->id()));
        item->setToolTip(QString::fromStdString(method->id() + ": " + method->summary()));
    }
    auto* addButton = button(tr("Add step"), tr("Append the chosen method with its default parameters"), this);
    connect(addButton, &QPushButton::clicked, this, [this] {
        if (auto* item = mPalette->currentItem()) addStep(item->data(Qt::UserRole).toString());
    });
    connect(mPalette, &QListWidget::itemDoubleClicked, this,
            [this](QListWidgetItem* item) { addStep(item->data(Qt::UserRole).toString()); });

    // Wide enough for the longest method name ("Round to nearest" was cut to "Round to nea").
    mPalette->setMinimumWidth(mPalette->sizeHintForColumn(0) + 2 * mPalette->frameWidth() + 8);
    auto* paletteBox = new QGroupBox(tr("Methods"), this);
    auto* paletteLayout = new QVBoxLayout(paletteBox);
    paletteLayout->addWidget(mPalette);
    paletteLayout->addWidget(addButton);

    auto* stepsBox = new QGroupBox(tr("Steps"), this);
    auto* stepsLayout = new QVBoxLayout(stepsBox);
    stepsLayout->addLayout(variantRow);
    stepsLayout->addLayout(variantButtons);
    stepsLayout->addWidget(mSteps);
    stepsLayout->addLayout(stepButtons);

    auto* formBox = new QGroupBox(tr("Parameters"), this);
    auto* formLayout = new QVBoxLayout(formBox);
    mStepTitle->setWordWrap(true);
    formLayout->addWidget(mStepTitle);
    auto* scroll = mScroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setWidget(mForm);
    formLayout->addWidget(scroll, 1);
    auto* layersBox = new QGroupBox(tr("Layers"), this);
    auto* layersLayout = new QVBoxLayout(layersBox);
    layersLayout->addWidget(mLayers);
    formLayout->addWidget(layersBox);
    connect(mLayers, &StepLayersEditor::keptEditsChanged, this, &PipelineEditor::relabelSteps);
    connect(mLayers, &StepLayersEditor::stepEdited, this, [this](const QString& variant, int index, const nlohmann::json& step) {
        if (!mDocument || !mDocument->project().hasVariant(variant.toStdString()) || index < 0 ||
            size_t(index) >= mDocument->steps(variant).size())
            return;
        mDocument->undoStack()->push(new ReplaceStep(tr("Change layers of step %1").arg(index + 1), mDocument, variant, index, step));
    });
    connect(mForm, &ParamForm::parameterEdited, this, [this](const QString& name, const QString& json) {
        const int row = selectedStep();
        if (!mDocument || row < 0) return;
        mDocument->undoStack()->push(changeStepParameter(mDocument, mDocument->currentVariant(), row, name.toStdString(),
                                                         nlohmann::json::parse(json.toStdString())));
    });

    auto* splitter = new QSplitter(this);
    splitter->addWidget(paletteBox);
    splitter->addWidget(stepsBox);
    splitter->addWidget(formBox);
    splitter->setStretchFactor(1, 2);
    splitter->setStretchFactor(2, 2);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(splitter);
    // Tab goes pane by pane, left to right as in reading order: the variant row, the steps and their buttons, the
    // methods, then the selected step's parameters and layers (it followed creation order and jumped, GUI probe).
    const QList<QWidget*> order = {mVariants, newButton, duplicateButton, renameButton, mRemoveVariant, mSteps, up, down,
                                   remove,    mPalette,  addButton,       scroll,       mLayers};
    for (int i = 1; i < order.size(); ++i) QWidget::setTabOrder(order[i - 1], order[i]);
    setDocument(nullptr);
}

void PipelineEditor::setDocument(ProjectDocument* document) {
    if (mDocument) disconnect(mDocument, nullptr, this, nullptr);
    mDocument = document;
    setEnabled(document != nullptr);
    if (document) {
        connect(document, &ProjectDocument::variantsChanged, this, &PipelineEditor::refreshVariants);
        connect(document, &ProjectDocument::currentVariantChanged, this, [this] {
            refreshVariants();
            refreshSteps();
        });
        connect(document, &ProjectDocument::modelChanged, this, &PipelineEditor::showSelectedStep);   // the layers' counts
        connect(document, &ProjectDocument::stepsChanged, this, [this](const QString& variant) {
            if (variant == mDocument->currentVariant()) refreshSteps();
        });
    }
    refreshVariants();
    refreshSteps();
    mLayers->forgetKeptEdits();   // another project's
}

bool PipelineEditor::requireVariant() {
    if (mDocument && !mDocument->currentVariant().isEmpty()) return true;
    if (mDocument && newVariant()) return true;
    return false;
}

void PipelineEditor::refreshVariants() {
    mRefreshing = true;
    mVariants->clear();
    if (mDocument)
        for (const auto& v : mDocument->project().variants()) mVariants->addItem(QString::fromStdString(v.name));
    if (mDocument) mVariants->setCurrentText(mDocument->currentVariant());
    mRefreshing = false;
    updateButtons();
}

void PipelineEditor::updateButtons() {
    const bool variant = mVariants->count() > 0;
    for (QPushButton* b : {mRemoveVariant, mDuplicateVariant, mRenameVariant}) b->setEnabled(variant);
    const int row = selectedStep();
    mStepUp->setEnabled(row > 0);
    mStepDown->setEnabled(row >= 0 && row + 1 < mSteps->count());
    mRemoveStep->setEnabled(row >= 0);
}

void PipelineEditor::refreshSteps() {
    const int keep = selectedStep();
    mRefreshing = true;
    mSteps->clear();
    if (mDocument) {
        const nlohmann::json steps = mDocument->steps(mDocument->currentVariant());
        for (size_t i = 0; i < steps.size(); ++i) {
            auto* item = new QListWidgetItem(stepLabel(steps[i], int(i)), mSteps);
            const QString detail = scopeDetail(steps[i]);
            if (!detail.isEmpty()) item->setToolTip(detail + tr("\n(edited in the Layers box below the parameters; also set by the Budget "
                                                                  "Solver and the Importance tab's picked layers)"));
            item->setFlags(item->flags() | Qt::ItemIsUserCheckable | Qt::ItemIsDragEnabled);
            item->setCheckState(steps[i].value("enabled", true) ? Qt::Checked : Qt::Unchecked);
        }
    }
    mRefreshing = false;
    if (mSteps->count() > 0) mSteps->setCurrentRow(std::clamp(keep, 0, mSteps->count() - 1));
    showSelectedStep();
    if (mDocument) mLayers->dropStaleEdits([this](const QString& variant) { return mDocument->steps(variant); });
    relabelSteps();
    updateButtons();
}

void PipelineEditor::showSelectedStep() {
    if (mRefreshing) return;
    const int row = selectedStep();
    if (!mDocument || row < 0) {
        mLayers->clear();
        mForm->setSpecs({}, nlohmann::json::object());
        mStepTitle->setText(mDocument && mDocument->currentVariant().isEmpty() ? tr("Add a variant, then add steps from the methods list.")
                                                                                : tr("Select a step to edit its parameters."));
        return;
    }
    const nlohmann::json steps = mDocument->steps(mDocument->currentVariant());
    const nlohmann::json step = steps[size_t(row)];
    mLayers->setStep(mDocument->currentVariant(), steps, row, mDocument->model());
    const CompressionMethod* method = MethodRegistry::instance().find(step.value("method", ""));
    if (!method) {
        mForm->setSpecs({}, nlohmann::json::object());
        mStepTitle->setText(tr("This build has no method '%1'; remove the step or use a build that has it.")
                                .arg(QString::fromStdString(step.value("method", ""))));
        return;
    }
    const QString title = QString::fromStdString(method->displayName() + " (" + method->id() + ")");
    const nlohmann::json params = step.value("params", nlohmann::json::object());
    if (mStepTitle->text().startsWith(title) && mForm->property("step").toInt() == row) {
        mForm->setValues(params);   // same step: keep the widgets (and the focus of a spin box being dragged)
    } else {
        mForm->setSpecs(method->params(), params);
        mForm->setProperty("step", row);
        // A new form's fields would come last in the focus chain, after the Layers box: between the two instead.
        QWidget* previous = mScroll;
        for (QWidget* field : mForm->editorsInOrder()) {
            QWidget::setTabOrder(previous, field);
            previous = field;
        }
        QWidget::setTabOrder(previous, mLayers->targetsEdit());
    }
    mStepTitle->setText(title + "\n" + QString::fromStdString(method->summary()));
}

bool PipelineEditor::commitPendingEdits() {
    if (mLayers->isEnabled()) mLayers->commit();
    return !mLayers->hasPendingEdits();
}

QStringList PipelineEditor::unappliedEdits() {
    QStringList lines;
    if (!mDocument) return lines;
    mLayers->dropStaleEdits([this](const QString& variant) { return mDocument->steps(variant); });
    if (mLayers->hasPendingEdits())
        lines << tr("variant '%1', step %2: %3").arg(mDocument->currentVariant()).arg(selectedStep() + 1).arg(mLayers->problem());
    for (const auto& kept : mLayers->keptEdits())
        lines << tr("variant '%1', step %2: %3").arg(kept.owner).arg(kept.index + 1).arg(kept.problem);
    return lines;
}

void PipelineEditor::relabelSteps() {
    if (!mDocument) return;
    const nlohmann::json steps = mDocument->steps(mDocument->currentVariant());
    for (int i = 0; i < mSteps->count() && size_t(i) < steps.size(); ++i) {
        // First, where a long step summary cannot push it out of sight (GUI probe).
        const bool kept = mLayers->keepsEditsFor(mDocument->currentVariant(), i);
        mSteps->item(i)->setText((kept ? tr("⚠ Layers edits not applied · ") : QString()) + stepLabel(steps[size_t(i)], i));
    }
}

int PipelineEditor::stepCount() const { return mSteps->count(); }
int PipelineEditor::selectedStep() const { return mSteps->currentRow(); }
void PipelineEditor::selectStep(int index) { mSteps->setCurrentRow(index); }

bool PipelineEditor::addStep(const QString& methodId) {
    if (!requireVariant()) return false;
    mDocument->undoStack()->push(new AddStep(mDocument, mDocument->currentVariant(), defaultStep(methodId.toStdString())));
    selectStep(stepCount() - 1);
    return true;
}

bool PipelineEditor::removeSelectedStep() {
    const int row = selectedStep();
    if (!mDocument || row < 0) return false;
    mDocument->undoStack()->push(new RemoveStep(mDocument, mDocument->currentVariant(), row));
    return true;
}

bool PipelineEditor::moveSelectedStep(int delta) {
    const int row = selectedStep();
    const int to = row + delta;
    if (!mDocument || row < 0 || to < 0 || to >= stepCount()) return false;
    mDocument->undoStack()->push(new MoveStep(mDocument, mDocument->currentVariant(), row, to));
    selectStep(to);
    return true;
}

void PipelineEditor::stepsReordered(int from, int to) {
    if (mRefreshing || !mDocument || from == to) return;
    // The list already shows the new order; the command rebuilds it from the project.
    QMetaObject::invokeMethod(this, [this, from, to] {
        mDocument->undoStack()->push(new MoveStep(mDocument, mDocument->currentVariant(), from, to));
        selectStep(to);
    }, Qt::QueuedConnection);
}

bool PipelineEditor::newVariant() {
    if (!mDocument) return false;
    Variant v;
    v.name = uniqueVariantName(mDocument->project(), QStringLiteral("variant")).toStdString();
    mDocument->undoStack()->push(new AddVariant(mDocument, v));
    return true;
}

bool PipelineEditor::duplicateVariant() {
    if (!mDocument || mDocument->currentVariant().isEmpty()) return false;
    const QString source = mDocument->currentVariant();
    mDocument->undoStack()->push(cwb::duplicateVariant(mDocument, source, uniqueVariantName(mDocument->project(), source)));
    return true;
}

bool PipelineEditor::removeVariant() {
    if (!mDocument || mDocument->currentVariant().isEmpty()) return false;
    const QString name = mDocument->currentVariant();
    for (const auto& v : mDocument->project().variants())
        if (QString::fromStdString(v.parent) == name) {
            QMessageBox::warning(this, tr("Cannot remove variant"),
                                 tr("Variant %1 is the parent of %2. Remove %2 first.").arg(name, QString::fromStdString(v.name)));
            return false;
        }
    mDocument->undoStack()->push(new RemoveVariant(mDocument, name));
    return true;
}

bool PipelineEditor::renameVariant(const QString& name, bool interactive) {
    if (!mDocument || mDocument->currentVariant().isEmpty()) return false;
    const QString current = mDocument->currentVariant();
    QString chosen = name;
    if (chosen.isEmpty() && interactive) {
        bool ok = false;
        chosen = QInputDialog::getText(this, tr("Rename Variant"), tr("New name for %1:").arg(current), QLineEdit::Normal, current, &ok);
        if (!ok || chosen == current) return false;
    }
    mLastError = variantNameProblem(mDocument->project(), chosen, current);
    if (!mLastError.isEmpty()) {
        if (interactive) QMessageBox::warning(this, tr("Cannot rename variant"), mLastError);
        return false;
    }
    if (chosen == current) return false;
    mDocument->undoStack()->push(new RenameVariant(mDocument, current, chosen));
    return true;
}

} // namespace cwb
