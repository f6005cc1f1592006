#include "app/gui/step_layers_editor.h"

#include <QEvent>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QTableWidget>
#include <QVBoxLayout>

#include <regex>

#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/model/model.h"
#include "core/util/error.h"

namespace cwb {

namespace {

// Recipe messages start with the step they are about ("step 1 (quantize.rtn): "); here the step is the one shown.
QString withoutStepPrefix(const std::string& message) {
    static const QRegularExpression prefix(QStringLiteral("^step \\d+( \\([^)]*\\))?: "));
    return QString::fromStdString(message).remove(prefix);
}

// Methods after which the blocks' layer names are not the base model's (pipeline.cpp's recipeLayersProblem stops there).
bool changesLayerNames(const nlohmann::json& step) {
    const std::string method = step.value("method", "");
    return step.value("enabled", true) && (method == "prune.layers" || method == "distill.kd");
}

} // namespace

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
      mRemoveOverride(new QPushButton(tr("Remove"), this)), mUp(new QPushButton(tr("Up"), this)),
      mDown(new QPushButton(tr("Down"), this)), mRevert(new QPushButton(tr("Revert"), this)), mStatus(new QLabel(this)) {
    mTargets->setObjectName(QStringLiteral("stepTargets"));
    mTargets->setPlaceholderText(tr("every linear layer of the blocks"));
    mTargets->setToolTip(tr("A regular expression searched in each linear layer's name (e.g. blk\\.[0-3]\\. or attn_); "
                            "empty takes every linear layer of the blocks. Enter applies it."));
    connect(mTargets, &QLineEdit::editingFinished, this, [this] { commit(); });

    mIgnore->setObjectName(QStringLiteral("stepIgnore"));
    mIgnore->setPlaceholderText(tr("one regular expression per line"));
    mIgnore->setToolTip(tr("Layers whose names match any of these patterns are left out of the step (one per line). "
                           "Applied when the field loses focus."));
    mIgnore->setTabChangesFocus(true);
    mIgnore->setFixedHeight(mIgnore->fontMetrics().lineSpacing() * 3 + 12);
    mIgnore->installEventFilter(this);

    mOverrides->setObjectName(QStringLiteral("stepOverrides"));
    mOverrides->setHorizontalHeaderLabels({tr("Layers (regex)"), tr("Parameters (JSON)")});
    mOverrides->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    mOverrides->verticalHeader()->setVisible(true);
    mOverrides->setSelectionBehavior(QAbstractItemView::SelectRows);
    mOverrides->setSelectionMode(QAbstractItemView::SingleSelection);
    mOverrides->setToolTip(tr("Per-layer parameters: a layer takes the first override whose pattern matches its name, "
                              "merged over the step's parameters, e.g. {\"bits\": 8}."));
    mOverrides->setMinimumHeight(mOverrides->verticalHeader()->defaultSectionSize() * 4);
    connect(mOverrides, &QTableWidget::itemChanged, this, [this] {
        if (!mLoading) commit();
    });
    connect(mOverrides, &QTableWidget::currentCellChanged, this, [this] { showState(); });

    auto* add = new QPushButton(tr("Add"), this);
    add->setToolTip(tr("Add an override row; it takes effect once it has a pattern and parameters"));
    mRemoveOverride->setToolTip(tr("Remove the selected override"));
    mUp->setToolTip(tr("Move the selected override up: it is tried before the ones below it"));
    mDown->setToolTip(tr("Move the selected override down"));
    mRevert->setToolTip(tr("Put the fields back to the step as the project has it"));
    connect(add, &QPushButton::clicked, this, &StepLayersEditor::addOverrideRow);
    connect(mRemoveOverride, &QPushButton::clicked, this, [this] { removeOverrideRow(mOverrides->currentRow()); });
    connect(mUp, &QPushButton::clicked, this, [this] { moveOverrideRow(mOverrides->currentRow(), -1); });
    connect(mDown, &QPushButton::clicked, this, [this] { moveOverrideRow(mOverrides->currentRow(), +1); });
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
    mStatus->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto* form = new QFormLayout;
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
    clear();
}

bool StepLayersEditor::eventFilter(QObject* watched, QEvent* event) {
    if (watched == mIgnore && event->type() == QEvent::FocusOut) commit();
    return QWidget::eventFilter(watched, event);
}

void StepLayersEditor::clear() {
    mOwner.clear();
    mSteps = nlohmann::json::array();
    mIndex = -1;
    mModel.reset();
    mShown = stepLayerFields(nlohmann::json());
    mPending = false;
    load(mShown);
    mProblem.clear();
    mWarning.clear();
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
    const bool sameStep = owner == mOwner && index == mIndex && mIndex >= 0 && size_t(mIndex) < mSteps.size() &&
                          mSteps[size_t(mIndex)].value("method", "") == steps[size_t(index)].value("method", "");
    mOwner = owner;
    mSteps = steps;
    mIndex = index;
    mModel = std::move(model);
    setEnabled(true);
    QString unused;
    if (sameStep && mPending && fields == mShown) {
        // The project's layer fields did not move (a parameter changed): the edits not yet applied stay.
    } else if (sameStep && fields == fieldsFromWidgets(&unused) && unused.isEmpty()) {
        mShown = fields;   // what the fields say was just applied: leave the widgets (and an open cell editor) alone
        mPending = false;
    } else {
        mShown = fields;
        mPending = false;
        load(fields);
    }
    validate();
    showState();
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

nlohmann::json StepLayersEditor::fieldsFromWidgets(QString* problem) const {
    problem->clear();
    nlohmann::json fields = {{"targets", mTargets->text().trimmed().toStdString()},
                             {"ignore", nlohmann::json::array()},
                             {"overrides", nlohmann::json::array()}};
    for (const QString& line : mIgnore->toPlainText().split('\n')) {
        const QString pattern = line.trimmed();
        if (!pattern.isEmpty()) fields["ignore"].push_back(pattern.toStdString());
    }
    for (int row = 0; row < mOverrides->rowCount(); ++row) {
        const QString pattern = mOverrides->item(row, 0) ? mOverrides->item(row, 0)->text().trimmed() : QString();
        const QString paramsText = mOverrides->item(row, 1) ? mOverrides->item(row, 1)->text().trimmed() : QString();
        if (pattern.isEmpty() && (paramsText.isEmpty() || paramsText == QLatin1String("{}"))) continue;   // a row just added
        if (problem->isEmpty() && pattern.isEmpty())
            *problem = tr("override %1 needs a layer pattern").arg(row + 1);
        nlohmann::json params;
        try {
            params = nlohmann::json::parse(paramsText.toStdString());
        } catch (const nlohmann::json::exception& e) {
            if (problem->isEmpty())
                *problem = paramsText.isEmpty() ? tr("override %1 (%2) sets no parameter: give them as JSON, e.g. {\"bits\": 8}").arg(row + 1).arg(pattern)
                                                : tr("the parameters of override %1 are not JSON: %2").arg(row + 1).arg(QString::fromUtf8(e.what()));
            continue;
        }
        if (!params.is_object() || params.empty()) {
            if (problem->isEmpty())
                *problem = tr("the parameters of override %1 must be a JSON object with at least one parameter, e.g. {\"bits\": 8}").arg(row + 1);
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
    mSummary.clear();
    mLayerList.clear();
    if (mIndex < 0) return;
    fieldsFromWidgets(&mProblem);
    if (!mProblem.isEmpty()) return;
    const nlohmann::json step = editedStep();
    Recipe single;
    try {
        single = Recipe::fromJson({{"steps", nlohmann::json::array({step})}}, "");
    } catch (const Error& e) {
        mProblem = withoutStepPrefix(e.what());
        return;
    }
    if (!mModel) return;

    const RecipeStep& edited = single.steps.front();
    std::vector<std::string> taken;
    try {
        taken = targetLayers(*mModel, edited);
    } catch (const std::exception& e) {   // validated above; a regex the library still refuses
        mProblem = QString::fromStdString(errorText(e));
        return;
    }
    const std::vector<std::string> all = mModel->linearLayers();
    const bool head = std::find(taken.begin(), taken.end(), std::string(names::kHead)) != taken.end();
    const size_t blockLayers = taken.size() - (head ? 1 : 0);
    std::vector<std::regex> overridePatterns;
    for (const auto& o : edited.overrides) overridePatterns.emplace_back(o.pattern);
    size_t overridden = 0;
    QStringList lines;
    for (const auto& layer : taken) {
        QString line = QString::fromStdString(layer);
        for (size_t i = 0; i < overridePatterns.size(); ++i)
            if (std::regex_search(layer, overridePatterns[i])) {
                ++overridden;
                line += QStringLiteral("  ← override %1: %2").arg(i + 1).arg(QString::fromStdString(edited.overrides[i].params.dump()));
                break;
            }
        lines << line;
    }
    mLayerList = lines.join('\n');
    if (blockLayers == 0 && head) mSummary = tr("Takes the output head only.");
    else
        mSummary = tr("Takes %1 of %2 linear layers of the blocks%3.")
                       .arg(blockLayers)
                       .arg(all.size())
                       .arg(head ? tr(" and the output head") : QString());
    if (!edited.overrides.empty())
        mSummary += ' ' + (overridden == 1 ? tr("An override changes 1 of them.") : tr("Overrides change %1 of them.").arg(overridden));
    if (!edited.enabled) mSummary += ' ' + tr("(The step is disabled.)");

    // Whether the patterns name layers is judged as a run would: against the base model's names, up to a step that
    // renames them, with the steps before this one in place (a head or block they remove counts).
    int renamer = -1;
    for (int i = 0; i < mIndex; ++i)
        if (changesLayerNames(mSteps[size_t(i)])) renamer = i;
    if (renamer >= 0) {
        mSummary += ' ' + tr("Names are the base model's; step %1 (%2) changes the blocks, so the run checks the patterns.")
                              .arg(renamer + 1)
                              .arg(QString::fromStdString(mSteps[size_t(renamer)].value("method", "")));
        return;
    }
    nlohmann::json upTo = nlohmann::json::array();
    for (int i = 0; i < mIndex; ++i) upTo.push_back(mSteps[size_t(i)]);
    upTo.push_back(step);
    try {
        const Recipe recipe = Recipe::fromJson({{"steps", upTo}}, "");
        const std::string why = recipeLayersProblem(*mModel, recipe);
        const std::string mine = "step " + std::to_string(mIndex + 1);
        if (why.rfind(mine + ":", 0) == 0 || why.rfind(mine + " (", 0) == 0)
            mWarning = tr("Running this variant would stop at this step: %1").arg(withoutStepPrefix(why));
    } catch (const Error&) {
        // An earlier step is malformed: that step's own form says so; the run refuses the recipe.
    }
}

QString StepLayersEditor::summary() const { return mSummary; }

void StepLayersEditor::showState() {
    const int row = mOverrides->currentRow();
    mRemoveOverride->setEnabled(row >= 0);
    mUp->setEnabled(row > 0);
    mDown->setEnabled(row >= 0 && row + 1 < mOverrides->rowCount());
    mRevert->setEnabled(mPending);
    if (!mProblem.isEmpty()) {
        mStatus->setStyleSheet(QStringLiteral("color: #b00020"));
        mStatus->setText(tr("Not applied: %1").arg(mProblem));
        mStatus->setToolTip(QString());
    } else if (!mWarning.isEmpty()) {
        mStatus->setStyleSheet(QStringLiteral("color: #8a5300"));
        mStatus->setText(mSummary.isEmpty() ? mWarning : mSummary + '\n' + mWarning);
        mStatus->setToolTip(mLayerList);
    } else {
        mStatus->setStyleSheet(QString());
        mStatus->setText(mIndex < 0 ? tr("Select a step to choose its layers.") : mSummary);
        mStatus->setToolTip(mLayerList);
    }
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
    emit stepEdited(mIndex, editedStep());
    return true;
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
    mOverrides->setItem(row, 0, new QTableWidgetItem());
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
