#include "app/gui/step_layers_editor.h"

#include <QEvent>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QTableWidget>
#include <QToolButton>
#include <QTextDocument>
#include <QVBoxLayout>

#include <algorithm>
#include <map>
#include <regex>

#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/model/model.h"
#include "core/util/error.h"

namespace cwb {

namespace {

QString targetsHelp(const QString& example = QStringLiteral("model.layers.0.self_attn.q_proj")) {
    return QObject::tr("A regular expression searched in each linear layer's name, e.g. layers\\.[0-3]\\. for blocks 0 to 3, or "
                       "self_attn; empty takes every linear layer of the blocks. Enter applies it.\nThis model's layer names "
                       "look like %1.").arg(example);
}

// Recipe messages start with the step they are about ("step 1 (quantize.rtn): "); here the step is the one shown.
QString withoutStepPrefix(const std::string& message) {
    static const QRegularExpression prefix(QStringLiteral("^step \\d+( \\([^)]*\\))?: "));
    return QString::fromStdString(message).remove(prefix);
}

// Marks an override row added with Add and not yet filled in: it is not part of the step until it has both a pattern
// and parameters (rows read from the project are taken as they are, an empty pattern matching every layer).
constexpr int kNewRowRole = Qt::UserRole + 1;

} // namespace

bool sameStepOf(const nlohmann::json& before, const nlohmann::json& steps, int index) {
    if (!before.is_array() || !steps.is_array() || before.size() != steps.size() || index < 0 || size_t(index) >= steps.size())
        return false;
    for (size_t i = 0; i < steps.size(); ++i)
        if (i != size_t(index) && before[i] != steps[i]) return false;
    return before[size_t(index)].value("method", "") == steps[size_t(index)].value("method", "");
}

nlohmann::json stepLayerFields(const nlohmann::json& step) {
    nlohmann::json fields = {{"targets", ""}, {"ignore", nlohmann::json::array()}, {"overrides", nlohmann::json::array()}};
    if (!step.is_object()) return fields;
    if (step.contains("targets") && step["targets"].is_string()) fields["targets"] = step["targets"];
    if (step.contains("ignore") && step["ignore"].is_array()) fields["ignore"] = step["ignore"];
    if (step.contains("overrides") && step["overrides"].is_array()) fields["overrides"] = step["overrides"];
    return fields;
}

StepLayersEditor::StepLayersEditor(QWidget* parent)
    : QWidget(parent), mTargets(new QLineEdit(this)), mIgnore(new QPlainTextEdit(this)), mOverrides(new QTableWidget(0, 2, this)),
      mRemoveOverride(new QPushButton(tr("Remove"), this)), mUp(new QToolButton(this)),
      mDown(new QToolButton(this)), mRevert(new QPushButton(tr("Revert"), this)), mStatus(new QLabel(this)) {
    mTargets->setObjectName(QStringLiteral("stepTargets"));
    mTargets->setPlaceholderText(tr("every linear layer of the blocks"));
    mTargets->setToolTip(targetsHelp());
    connect(mTargets, &QLineEdit::editingFinished, this, [this] { commit(); });
    connect(mTargets, &QLineEdit::textEdited, this, [this] {
        // A red "not applied" goes as soon as the typing fixes it (it stayed until Enter, GUI probe).
        if (!mProblem.isEmpty()) {
            validate();
            showState();
        }
        updateRevert();
    });

    mIgnore->setObjectName(QStringLiteral("stepIgnore"));
    mIgnore->setPlaceholderText(tr("one regular expression per line"));
    mIgnore->setToolTip(tr("Layers whose names match any of these patterns are left out of the step (one per line). "
                           "Applied when the field loses focus."));
    mIgnore->setTabChangesFocus(true);
    mIgnore->setFixedHeight(mIgnore->fontMetrics().lineSpacing() * 3 + 12);
    mIgnore->installEventFilter(this);
    mTargets->installEventFilter(this);
    mOverrides->installEventFilter(this);
    connect(mIgnore, &QPlainTextEdit::textChanged, this, [this] {
        if (!mLoading) updateRevert();
    });

    mOverrides->setObjectName(QStringLiteral("stepOverrides"));
    mOverrides->setHorizontalHeaderLabels({tr("Layers (regex)"), tr("Parameters (JSON)")});
    mOverrides->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    mOverrides->verticalHeader()->setVisible(true);
    mOverrides->setSelectionBehavior(QAbstractItemView::SelectRows);
    mOverrides->setSelectionMode(QAbstractItemView::SingleSelection);
    mOverrides->setToolTip(tr("Per-layer parameters: a layer takes the first override whose pattern matches its name, "
                              "merged over the step's parameters, e.g. {\"bits\": 8}."));
    mOverrides->setMinimumHeight(mOverrides->verticalHeader()->defaultSectionSize() * 4);
    connect(mOverrides, &QTableWidget::itemChanged, this, [this](QTableWidgetItem* item) {
        if (mLoading) return;
        const int row = item->row();
        QTableWidgetItem* pattern = mOverrides->item(row, 0);
        QTableWidgetItem* params = mOverrides->item(row, 1);
        if (pattern && params && pattern->data(kNewRowRole).toBool() && !pattern->text().trimmed().isEmpty() &&
            !params->text().trimmed().isEmpty()) {
            mLoading = true;   // setData emits itemChanged again
            pattern->setData(kNewRowRole, false);
            mLoading = false;
        }
        commit();
    });
    connect(mOverrides, &QTableWidget::currentCellChanged, this, [this] { showState(); });

    auto* add = new QPushButton(tr("Add"), this);
    add->setToolTip(tr("Add an override row; it takes effect once it has a pattern and parameters"));
    mRemoveOverride->setToolTip(tr("Remove the selected override"));
    mUp->setArrowType(Qt::UpArrow);
    mDown->setArrowType(Qt::DownArrow);
    mUp->setToolTip(tr("Move the selected override up: it is tried before the ones below it"));
    mDown->setToolTip(tr("Move the selected override down"));
    mRevert->setToolTip(tr("Put the fields back to the step as the project has it"));
    // Clicking must not take the focus: that would apply the text being reverted (editingFinished, focus-out).
    mRevert->setFocusPolicy(Qt::NoFocus);
    connect(add, &QPushButton::clicked, this, &StepLayersEditor::addOverrideRow);
    connect(mRemoveOverride, &QPushButton::clicked, this, [this] { removeOverrideRow(mOverrides->currentRow()); });
    connect(mUp, &QToolButton::clicked, this, [this] { moveOverrideRow(mOverrides->currentRow(), -1); });
    connect(mDown, &QToolButton::clicked, this, [this] { moveOverrideRow(mOverrides->currentRow(), +1); });
    connect(mRevert, &QPushButton::clicked, this, &StepLayersEditor::revert);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(add);
    buttons->addWidget(mRemoveOverride);
    buttons->addWidget(mUp);
    buttons->addWidget(mDown);
    buttons->addStretch();
    buttons->addWidget(mRevert);

    mStatus->setObjectName(QStringLiteral("stepLayersStatus"));
    mStatus->setWordWrap(true);
    // Two lines kept for it: growing from one to two moved the overrides table under the pointer (GUI probe).
    mStatus->setMinimumHeight(mStatus->fontMetrics().lineSpacing() * 2);
    mStatus->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto* form = new QFormLayout;
    form->setRowWrapPolicy(QFormLayout::WrapLongRows);   // labels above the fields where the pane is narrow
    form->addRow(tr("Targets:"), mTargets);
    form->addRow(tr("Ignore:"), mIgnore);
    auto* overrides = new QVBoxLayout;
    overrides->addWidget(mOverrides);
    overrides->addLayout(buttons);
    form->addRow(tr("Overrides:"), overrides);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(form);
    layout->addWidget(mStatus);
    for (auto [from, to] : {std::pair<QWidget*, QWidget*>{mTargets, mIgnore}, {mIgnore, mOverrides}, {mOverrides, add},
                            {add, mRemoveOverride}, {mRemoveOverride, mUp}, {mUp, mDown}})
        QWidget::setTabOrder(from, to);
    clear();
}

bool StepLayersEditor::eventFilter(QObject* watched, QEvent* event) {
    if (watched == mIgnore && event->type() == QEvent::FocusOut) commit();
    // Escape puts the fields back while they differ from the project's step; otherwise it is the window's (it stops the
    // job in view). The window's Escape took it before, and edits had to be reverted with the mouse (GUI probe).
    if (event->type() == QEvent::ShortcutOverride || event->type() == QEvent::KeyPress) {
        auto* key = static_cast<QKeyEvent*>(event);
        if (key->key() == Qt::Key_Escape && key->modifiers() == Qt::NoModifier && mRevert->isEnabled()) {
            if (event->type() == QEvent::KeyPress) revert();
            event->accept();
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

void StepLayersEditor::clear() {
    keepEdits();
    mOwner.clear();
    mSteps = nlohmann::json::array();
    mIndex = -1;
    mModel.reset();
    mShown = stepLayerFields(nlohmann::json());
    mPending = false;
    load(mShown);
    mProblem.clear();
    mWarning.clear();
    mNote.clear();
    mSummary.clear();
    mLayerList.clear();
    setEnabled(false);
    showState();
}

void StepLayersEditor::setStep(const QString& owner, const nlohmann::json& steps, int index, std::shared_ptr<const Model> model) {
    if (!steps.is_array() || index < 0 || size_t(index) >= steps.size()) {
        clear();
        return;
    }
    const nlohmann::json fields = stepLayerFields(steps[size_t(index)]);
    // The same step of the same variant, with nothing around it moved or removed: edits not yet applied belong to it.
    const bool sameStep = owner == mOwner && index == mIndex && sameStepOf(mSteps, steps, index);
    if (!sameStep) keepEdits();
    mOwner = owner;
    mSteps = steps;
    mIndex = index;
    mModel = std::move(model);
    setEnabled(true);
    const std::vector<std::string> names = mModel ? mModel->linearLayers() : std::vector<std::string>();
    mTargets->setToolTip(names.empty() ? targetsHelp() : targetsHelp(QString::fromStdString(names.front())));
    QString unused;
    bool restored = false;
    if (sameStep && mPending && fields == mShown) {
        // The project's layer fields did not move (a parameter changed): the edits not yet applied stay.
    } else if (sameStep && fields == fieldsFromWidgets(&unused) && unused.isEmpty()) {
        mShown = fields;   // what the fields say was just applied: leave the widgets (and an open cell editor) alone
        mPending = false;
    } else {
        mShown = fields;
        mPending = false;
        restored = !sameStep && restoreKeptEdits(fields);
        if (!restored) load(fields);
    }
    validate();
    if (restored) mPending = !mProblem.isEmpty();
    showState();
}

// Whether kept edits still belong to step d.index of `steps`: the same number of steps, the same method there. Other
// steps may have changed meanwhile (a parameter of the next step, edited before coming back).
bool StepLayersEditor::draftFits(const Draft& d, const nlohmann::json& steps) {
    return steps.is_array() && steps.size() == d.steps.size() && d.index >= 0 && size_t(d.index) < steps.size() &&
           steps[size_t(d.index)].value("method", "") == d.steps[size_t(d.index)].value("method", "");
}

void StepLayersEditor::keepEdits() {
    if (mIndex < 0) return;
    QString problem, incomplete;
    // The fields as the project has them (a stored pattern that does not compile, focused and left) are not edits.
    if (fieldsFromWidgets(&problem, &incomplete) == mShown && problem.isEmpty() && incomplete.isEmpty()) return;
    validate();   // why, as of the fields now (typing without Enter did not check them)
    const QString why = !mProblem.isEmpty() ? mProblem : !mNote.isEmpty() ? mNote : tr("typed, not applied (Enter applies it)");
    Draft draft{mOwner, mIndex, mSteps, mShown, mTargets->text(), mIgnore->toPlainText(), why, {}, {}};
    for (int row = 0; row < mOverrides->rowCount(); ++row) {
        const QTableWidgetItem* pattern = mOverrides->item(row, 0);
        const QTableWidgetItem* params = mOverrides->item(row, 1);
        draft.rows.emplace_back(pattern ? pattern->text() : QString(), params ? params->text() : QString());
        draft.newRows.push_back(pattern && pattern->data(kNewRowRole).toBool());
    }
    mDrafts.erase(std::remove_if(mDrafts.begin(), mDrafts.end(),
                                 [&](const Draft& d) { return d.owner == mOwner && d.index == mIndex; }),
                  mDrafts.end());
    mDrafts.push_back(std::move(draft));
    mPending = false;
    emit keptEditsChanged();
}

bool StepLayersEditor::restoreKeptEdits(const nlohmann::json& fields) {
    const auto found = std::find_if(mDrafts.begin(), mDrafts.end(), [&](const Draft& d) {
        return d.owner == mOwner && d.index == mIndex && d.shown == fields && draftFits(d, mSteps);
    });
    if (found == mDrafts.end()) return false;
    mLoading = true;
    mTargets->setText(found->targets);
    mIgnore->setPlainText(found->ignore);
    mOverrides->setRowCount(0);
    for (size_t i = 0; i < found->rows.size(); ++i) {
        const int row = mOverrides->rowCount();
        mOverrides->insertRow(row);
        auto* pattern = new QTableWidgetItem(found->rows[i].first);
        if (found->newRows[i]) pattern->setData(kNewRowRole, true);
        mOverrides->setItem(row, 0, pattern);
        mOverrides->setItem(row, 1, new QTableWidgetItem(found->rows[i].second));
    }
    mLoading = false;
    mDrafts.erase(found);
    emit keptEditsChanged();
    return true;
}

std::vector<StepLayersEditor::KeptEdits> StepLayersEditor::keptEdits() const {
    std::vector<KeptEdits> kept;
    for (const Draft& d : mDrafts) kept.push_back({d.owner, d.index, d.problem});
    return kept;
}

bool StepLayersEditor::keepsEditsFor(const QString& owner, int index) const {
    return std::any_of(mDrafts.begin(), mDrafts.end(), [&](const Draft& d) { return d.owner == owner && d.index == index; });
}

void StepLayersEditor::dropStaleEdits(const std::function<nlohmann::json(const QString&)>& stepsOf) {
    const size_t before = mDrafts.size();
    mDrafts.erase(std::remove_if(mDrafts.begin(), mDrafts.end(),
                                 [&](const Draft& d) {
                                     const nlohmann::json steps = stepsOf(d.owner);
                                     return !draftFits(d, steps) || stepLayerFields(steps[size_t(d.index)]) != d.shown;
                                 }),
                  mDrafts.end());
    if (mDrafts.size() != before) emit keptEditsChanged();
}

void StepLayersEditor::forgetKeptEdits() {
    if (mDrafts.empty()) return;
    mDrafts.clear();
    emit keptEditsChanged();
}

void StepLayersEditor::load(const nlohmann::json& fields) {
    mLoading = true;
    mTargets->setText(QString::fromStdString(fields.value("targets", "")));
    QStringList ignore;
    for (const auto& pattern : fields.value("ignore", nlohmann::json::array()))
        ignore << QString::fromStdString(pattern.is_string() ? pattern.get<std::string>() : pattern.dump());
    mIgnore->setPlainText(ignore.join('\n'));
    const nlohmann::json overrides = fields.value("overrides", nlohmann::json::array());
    mOverrides->setRowCount(0);
    for (const auto& o : overrides) {
        const int row = mOverrides->rowCount();
        mOverrides->insertRow(row);
        const nlohmann::json pattern = o.is_object() ? o.value("pattern", nlohmann::json("")) : nlohmann::json("");
        const nlohmann::json params = o.is_object() ? o.value("params", nlohmann::json::object()) : nlohmann::json::object();
        mOverrides->setItem(row, 0, new QTableWidgetItem(QString::fromStdString(pattern.is_string() ? pattern.get<std::string>() : pattern.dump())));
        mOverrides->setItem(row, 1, new QTableWidgetItem(QString::fromStdString(params.dump())));
    }
    mLoading = false;
}

nlohmann::json StepLayersEditor::fieldsFromWidgets(QString* problem, QString* incomplete) const {
    problem->clear();
    if (incomplete) incomplete->clear();
    nlohmann::json fields = {{"targets", mTargets->text().trimmed().toStdString()},
                             {"ignore", nlohmann::json::array()},
                             {"overrides", nlohmann::json::array()}};
    // Layer names hold no spaces: whitespace around a pattern is never meant, so it is cut.
    for (const QString& line : mIgnore->toPlainText().split('\n')) {
        const QString pattern = line.trimmed();
        if (!pattern.isEmpty()) fields["ignore"].push_back(pattern.toStdString());
    }
    for (int row = 0; row < mOverrides->rowCount(); ++row) {
        const QTableWidgetItem* patternItem = mOverrides->item(row, 0);
        const QString pattern = patternItem ? patternItem->text().trimmed() : QString();
        const QString paramsText = mOverrides->item(row, 1) ? mOverrides->item(row, 1)->text().trimmed() : QString();
        if (pattern.isEmpty() && paramsText.isEmpty()) continue;   // an empty row is no override
        if (patternItem && patternItem->data(kNewRowRole).toBool() && (pattern.isEmpty() || paramsText.isEmpty())) {
            if (incomplete && incomplete->isEmpty())
                *incomplete = pattern.isEmpty() ? tr("Override %1 is not complete: give the layers it is for (a regex; "
                                                     "empty matches every layer once its parameters are in).").arg(row + 1)
                                                : tr("Override %1 is not complete: give its parameters as JSON, e.g. {\"bits\": 8}.").arg(row + 1);
            continue;
        }
        nlohmann::json params;
        try {
            params = nlohmann::json::parse(paramsText.toStdString());
        } catch (const nlohmann::json::exception& e) {
            if (problem->isEmpty())
                *problem = paramsText.isEmpty() ? tr("override %1 (%2) has no parameters: give them as JSON, e.g. {\"bits\": 8}").arg(row + 1).arg(pattern)
                                                : tr("the parameters of override %1 are not JSON: %2").arg(row + 1).arg(QString::fromUtf8(e.what()));
            continue;
        }
        if (!params.is_object()) {
            if (problem->isEmpty())
                *problem = tr("the parameters of override %1 must be a JSON object, e.g. {\"bits\": 8}").arg(row + 1);
            continue;
        }
        fields["overrides"].push_back({{"pattern", pattern.toStdString()}, {"params", params}});
    }
    return fields;
}

nlohmann::json StepLayersEditor::editedStep() const {
    if (mIndex < 0 || size_t(mIndex) >= mSteps.size()) return nlohmann::json();
    nlohmann::json step = mSteps[size_t(mIndex)];
    QString unused;
    const nlohmann::json fields = fieldsFromWidgets(&unused);
    if (fields["targets"].get<std::string>().empty()) step.erase("targets");
    else step["targets"] = fields["targets"];
    if (fields["ignore"].empty()) step.erase("ignore");
    else step["ignore"] = fields["ignore"];
    if (fields["overrides"].empty()) step.erase("overrides");
    else step["overrides"] = fields["overrides"];
    return step;
}

void StepLayersEditor::validate() {
    mProblem.clear();
    mWarning.clear();
    mNote.clear();
    mSummary.clear();
    mLayerList.clear();
    if (mIndex < 0) return;
    fieldsFromWidgets(&mProblem, &mNote);
    if (!mProblem.isEmpty()) return;
    const nlohmann::json step = editedStep();
    Recipe single;
    try {
        single = Recipe::fromJson({{"steps", nlohmann::json::array({step})}}, "");
    } catch (const Error& e) {
        mProblem = withoutStepPrefix(e.what());
        return;
    }
    if (mModel) describeLayers(single.steps.front());
}

void StepLayersEditor::describeLayers(const RecipeStep& edited) {
    const CompressionMethod* method = MethodRegistry::instance().find(edited.method);
    if (!method) return;   // fromJson refused it
    QStringList warnings;
    const bool hasFields = !edited.targets.empty() || !edited.ignore.empty() || !edited.overrides.empty();
    if (!method->readsLayerPatterns()) {
        mSummary = tr("%1 acts on whole blocks or the whole model: it does not read targets, ignore patterns or overrides.")
                       .arg(QString::fromStdString(method->displayName()));
        if (hasFields) mWarning = tr("This step has layer fields its method does not read; clear them to avoid confusion.");
        return;
    }
    std::vector<std::string> taken;
    try {
        taken = targetLayers(*mModel, edited);
    } catch (const std::exception& e) {   // validated above; a regex the library still refuses
        mProblem = QString::fromStdString(errorText(e));
        return;
    }
    // What the step acts on: each layer it takes, or for heads and channels the blocks whose selector layer it takes
    // (the overrides are read at that layer).
    const std::string selector = method->blockSelector(mModel->spec.family);
    auto isUnit = [&](const std::string& layer) {
        return selector.empty() || (layer.size() > selector.size() && layer.compare(layer.size() - selector.size(), selector.size(), selector) == 0);
    };
    std::vector<std::string> units;
    for (const auto& layer : taken)
        if (isUnit(layer)) units.push_back(layer);
    const std::vector<std::string> all = mModel->linearLayers();
    const size_t allUnits = size_t(std::count_if(all.begin(), all.end(), isUnit));

    std::vector<std::regex> overridePatterns;
    for (const auto& o : edited.overrides) overridePatterns.emplace_back(o.pattern);
    std::vector<size_t> perOverride(overridePatterns.size(), 0);
    size_t overridden = 0;
    QStringList lines;
    for (const auto& layer : units) {
        QString line = QString::fromStdString(layer);
        for (size_t i = 0; i < overridePatterns.size(); ++i)
            if (std::regex_search(layer, overridePatterns[i])) {   // the first match applies
                ++overridden;
                ++perOverride[i];
                line += QStringLiteral("  ← override %1: %2").arg(i + 1).arg(QString::fromStdString(edited.overrides[i].params.dump()));
                break;
            }
        lines << line;
    }
    mLayerList = lines.join('\n');
    const bool head = std::find(taken.begin(), taken.end(), std::string(names::kHead)) != taken.end();
    if (!selector.empty())
        mSummary = tr("Takes %1 of %2 blocks (those whose %3 the patterns take).").arg(units.size()).arg(allUnits).arg(QString::fromStdString(selector));
    else if (taken.size() == 1 && head)
        mSummary = tr("Takes the output head only.");
    else
        mSummary = tr("Takes %1 of %2 linear layers of the blocks%3.")
                       .arg(units.size() - (head ? 1 : 0))
                       .arg(all.size())
                       .arg(head ? tr(" and the output head") : QString());
    if (!edited.overrides.empty())
        mSummary += ' ' + (overridden == 1 ? tr("An override changes 1 of them.") : tr("Overrides change %1 of them.").arg(overridden));
    if (!edited.enabled) mSummary += ' ' + tr("(The step is disabled.)");

    // Whether the patterns name layers is judged as a run would: against the base model's names, unless a step before
    // this one changes the blocks (the run checks the patterns when it gets there).
    int renamer = -1;
    for (int i = 0; i < mIndex; ++i) {
        const nlohmann::json& s = mSteps[size_t(i)];
        const CompressionMethod* m = MethodRegistry::instance().find(s.value("method", ""));
        if (m && !m->readsLayerPatterns() && s.value("enabled", true)) renamer = i;
    }
    if (renamer >= 0) {
        mSummary += ' ' + tr("Names are the base model's; step %1 (%2) changes the blocks, so the run checks the patterns.")
                              .arg(renamer + 1)
                              .arg(QString::fromStdString(mSteps[size_t(renamer)].value("method", "")));
    } else {
        const std::string why = stepPatternsProblem(*mModel, edited);
        if (!why.empty()) warnings << tr("Running this variant would stop at this step: %1").arg(QString::fromStdString(why));
    }
    for (size_t i = 0; i < edited.overrides.size(); ++i) {
        const QString pattern = QString::fromStdString(edited.overrides[i].pattern);
        if (edited.overrides[i].params.empty()) warnings << tr("Override %1 (%2) sets no parameter.").arg(i + 1).arg(pattern);
        else if (perOverride[i] == 0 && renamer < 0)
            warnings << tr("Override %1 (%2) changes none of the %3 this step takes%4.")
                            .arg(i + 1)
                            .arg(pattern)
                            .arg(selector.empty() ? tr("layers") : tr("blocks"))
                            .arg(i > 0 ? tr(" (or an override above it takes them first)") : QString());
    }
    if (renamer < 0 && edited.enabled) {
        const QString lost = quantizationLostBy(edited, taken);
        if (!lost.isEmpty()) warnings << lost;
    }
    mWarning = warnings.join('\n');
}

// Unstructured pruning of a layer an earlier step (or the checkpoint) quantized writes dense weights over it: the
// quantization is gone. The run notes it; here it is said before a run (GUI probe).
QString StepLayersEditor::quantizationLostBy(const RecipeStep& edited, const std::vector<std::string>& taken) const {
    const CompressionMethod* method = MethodRegistry::instance().find(edited.method);
    if (!method || edited.method.rfind("prune.", 0) != 0 || !method->blockSelector(mModel->spec.family).empty() ||
        !method->readsLayerPatterns())
        return {};
    std::map<std::string, QString> quantizedBy;   // layer -> what quantized it first
    for (const auto& entry : mModel->compressedLayers()) quantizedBy.emplace(entry.first, tr("in the checkpoint read"));
    for (int i = 0; i < mIndex; ++i) {
        const nlohmann::json& step = mSteps[size_t(i)];
        if (!step.value("enabled", true) || step.value("method", "").rfind("quantize.", 0) != 0) continue;
        try {
            const Recipe earlier = Recipe::fromJson({{"steps", nlohmann::json::array({step})}}, "");
            for (const auto& layer : targetLayers(*mModel, earlier.steps.front())) quantizedBy.emplace(layer, tr("by step %1").arg(i + 1));
        } catch (const std::exception&) {   // that step's own box says what is wrong with it
        }
    }
    QStringList sources;
    size_t count = 0;
    for (const auto& layer : taken)
        if (const auto found = quantizedBy.find(layer); found != quantizedBy.end()) {
            ++count;
            if (!sources.contains(found->second)) sources << found->second;
        }
    if (count == 0) return {};
    return tr("%1 of the layers this step takes are quantized before it (%2): pruning writes dense weights over them, so "
              "their quantization is lost and they count at full size. Put this step before the quantization to keep both.")
        .arg(count)
        .arg(sources.join(tr(", ")));
}

QString StepLayersEditor::summary() const { return mSummary; }

void StepLayersEditor::showState() {
    const int row = mOverrides->currentRow();
    mRemoveOverride->setEnabled(row >= 0);
    mUp->setEnabled(row > 0);
    mDown->setEnabled(row >= 0 && row + 1 < mOverrides->rowCount());
    updateRevert();
    if (!mProblem.isEmpty()) {
        mStatus->setStyleSheet(QStringLiteral("color: #b00020"));
        mStatus->setText(tr("Not applied: %1").arg(mProblem));
        mStatus->setToolTip(QString());
    } else {
        QStringList lines;
        if (mIndex < 0) lines << tr("Select a step to choose its layers.");
        if (!mSummary.isEmpty()) lines << mSummary;
        if (!mNote.isEmpty()) lines << mNote;
        if (!mWarning.isEmpty()) lines << mWarning;
        mStatus->setStyleSheet(mWarning.isEmpty() ? QString() : QStringLiteral("color: #8a5300"));
        mStatus->setText(lines.join('\n'));
        mStatus->setToolTip(mLayerList);
    }
}

void StepLayersEditor::updateRevert() {
    QString problem, incomplete;   // an added override row not filled in is an edit too (Revert stayed off, GUI probe)
    mRevert->setEnabled(mIndex >= 0 && (mPending || fieldsFromWidgets(&problem, &incomplete) != mShown || !incomplete.isEmpty()));
}

bool StepLayersEditor::commit() {
    if (mIndex < 0 || mLoading) return false;
    validate();
    QString problem;
    const nlohmann::json fields = fieldsFromWidgets(&problem);
    if (!mProblem.isEmpty()) {
        mPending = true;
        showState();
        return false;
    }
    mPending = false;
    showState();
    if (fields == mShown) return false;
    emit stepEdited(mOwner, mIndex, editedStep());
    forgetTyping();
    return true;
}

void StepLayersEditor::forgetTyping() {
    // Applied: Ctrl+Z now undoes the edit in the project, not the fields' text alone (see MainWindow::eventFilter).
    const QSignalBlocker blockTargets(mTargets);
    const int cursor = mTargets->cursorPosition();
    mTargets->setText(mTargets->text());   // setText clears the undo history
    mTargets->setCursorPosition(cursor);
    mIgnore->document()->clearUndoRedoStacks();
}

void StepLayersEditor::revert() {
    load(mShown);
    mPending = false;
    validate();
    showState();
}

void StepLayersEditor::addOverrideRow() {
    if (mIndex < 0) return;
    const int row = mOverrides->rowCount();
    mLoading = true;
    mOverrides->insertRow(row);
    auto* pattern = new QTableWidgetItem();
    pattern->setData(kNewRowRole, true);
    mOverrides->setItem(row, 0, pattern);
    mOverrides->setItem(row, 1, new QTableWidgetItem());
    mLoading = false;
    mOverrides->setCurrentCell(row, 0);
    if (isVisible()) mOverrides->editItem(mOverrides->item(row, 0));
    showState();
}

void StepLayersEditor::removeOverrideRow(int row) {
    if (row < 0 || row >= mOverrides->rowCount()) return;
    mOverrides->removeRow(row);
    commit();
}

void StepLayersEditor::moveOverrideRow(int row, int delta) {
    const int to = row + delta;
    if (row < 0 || to < 0 || row >= mOverrides->rowCount() || to >= mOverrides->rowCount()) return;
    mLoading = true;
    for (int column = 0; column < 2; ++column) {
        QTableWidgetItem* a = mOverrides->takeItem(row, column);
        QTableWidgetItem* b = mOverrides->takeItem(to, column);
        mOverrides->setItem(row, column, b);
        mOverrides->setItem(to, column, a);
    }
    mLoading = false;
    mOverrides->setCurrentCell(to, mOverrides->currentColumn() < 0 ? 0 : mOverrides->currentColumn());
    commit();
}

} // namespace cwb
