#include "app/commands/step_commands.h"

#include <QCoreApplication>

#include <algorithm>

#include "app/commands/change_value.h"
#include "app/gui/project_document.h"
#include "core/compress/method.h"
#include "core/util/error.h"

namespace cwb {

namespace {

QString tr(const char* text) { return QCoreApplication::translate("StepCommands", text); }

void checkIndex(const nlohmann::json& steps, int index, const QString& variant) {
    if (index < 0 || index >= static_cast<int>(steps.size()))
        throw Error("variant " + variant.toStdString() + " has no step " + std::to_string(index + 1));
}

} // namespace

nlohmann::json defaultStep(const std::string& methodId) {
    const CompressionMethod* method = MethodRegistry::instance().find(methodId);
    if (!method) throw Error("unknown compression method '" + methodId + "'");
    nlohmann::json params = nlohmann::json::object();
    for (const auto& spec : method->params()) params[spec.name] = spec.defaultValue;
    return {{"method", methodId}, {"version", method->version()}, {"params", params}};
}

AddStep::AddStep(ProjectDocument* document, QString variant, nlohmann::json step, int index)
    : QUndoCommand(tr("Add step %1").arg(QString::fromStdString(step.value("method", "")))), mDocument(document),
      mVariant(std::move(variant)), mStep(std::move(step)), mIndex(index) {}

void AddStep::redo() {
    nlohmann::json steps = mDocument->steps(mVariant);
    if (mIndex < 0 || mIndex > static_cast<int>(steps.size())) mIndex = static_cast<int>(steps.size());
    steps.insert(steps.begin() + mIndex, mStep);
    mDocument->setSteps(mVariant, steps);
}

void AddStep::undo() {
    nlohmann::json steps = mDocument->steps(mVariant);
    steps.erase(steps.begin() + mIndex);
    mDocument->setSteps(mVariant, steps);
}

RemoveStep::RemoveStep(ProjectDocument* document, QString variant, int index)
    : QUndoCommand(tr("Remove step %1").arg(index + 1)), mDocument(document), mVariant(std::move(variant)), mIndex(index) {}

void RemoveStep::redo() {
    nlohmann::json steps = mDocument->steps(mVariant);
    checkIndex(steps, mIndex, mVariant);
    mRemoved = steps[static_cast<size_t>(mIndex)];
    steps.erase(steps.begin() + mIndex);
    mDocument->setSteps(mVariant, steps);
}

void RemoveStep::undo() {
    nlohmann::json steps = mDocument->steps(mVariant);
    steps.insert(steps.begin() + mIndex, mRemoved);
    mDocument->setSteps(mVariant, steps);
}

MoveStep::MoveStep(ProjectDocument* document, QString variant, int from, int to)
    : QUndoCommand(tr("Move step %1 to %2").arg(from + 1).arg(to + 1)), mDocument(document), mVariant(std::move(variant)),
      mFrom(from), mTo(to) {}

void MoveStep::move(int from, int to) {
    nlohmann::json steps = mDocument->steps(mVariant);
    checkIndex(steps, from, mVariant);
    checkIndex(steps, to, mVariant);
    nlohmann::json step = steps[static_cast<size_t>(from)];
    steps.erase(steps.begin() + from);
    steps.insert(steps.begin() + to, step);
    mDocument->setSteps(mVariant, steps);
}

void MoveStep::redo() { move(mFrom, mTo); }
void MoveStep::undo() { move(mTo, mFrom); }

SetStepEnabled::SetStepEnabled(ProjectDocument* document, QString variant, int index, bool enabled)
    : QUndoCommand(enabled ? tr("Enable step %1").arg(index + 1) : tr("Disable step %1").arg(index + 1)),
      mDocument(document), mVariant(std::move(variant)), mIndex(index), mEnabled(enabled) {}

void SetStepEnabled::apply(bool enabled) {
    nlohmann::json steps = mDocument->steps(mVariant);
    checkIndex(steps, mIndex, mVariant);
    auto& step = steps[static_cast<size_t>(mIndex)];
    if (enabled) step.erase("enabled");   // the recipe form omits "enabled" when true
    else step["enabled"] = false;
    mDocument->setSteps(mVariant, steps);
}

void SetStepEnabled::redo() { apply(mEnabled); }
void SetStepEnabled::undo() { apply(!mEnabled); }

QUndoCommand* changeStepParameter(ProjectDocument* document, const QString& variant, int index, const std::string& name,
                                  const nlohmann::json& value) {
    const nlohmann::json steps = document->steps(variant);
    checkIndex(steps, index, variant);
    const nlohmann::json old = steps[static_cast<size_t>(index)].value("params", nlohmann::json::object()).value(name, nlohmann::json());
    const QString key = variant + "/" + QString::number(index) + "/" + QString::fromStdString(name);
    auto apply = [document, variant, index, name](const nlohmann::json& v) {
        nlohmann::json current = document->steps(variant);
        auto& params = current[static_cast<size_t>(index)]["params"];
        if (v.is_null()) params.erase(name);
        else params[name] = v;
        document->setSteps(variant, current);
    };
    return new ChangeValue<nlohmann::json>(tr("Change %1").arg(QString::fromStdString(name)), CommandId::StepParameter, key,
                                           old, value, apply);
}

ReplaceStep::ReplaceStep(const QString& text, ProjectDocument* document, QString variant, int index, nlohmann::json step)
    : QUndoCommand(text), mDocument(document), mVariant(std::move(variant)), mIndex(index), mNew(std::move(step)) {
    const nlohmann::json steps = mDocument->steps(mVariant);
    checkIndex(steps, mIndex, mVariant);
    mOld = steps[static_cast<size_t>(mIndex)];
}

void ReplaceStep::write(const nlohmann::json& step) {
    nlohmann::json steps = mDocument->steps(mVariant);
    checkIndex(steps, mIndex, mVariant);
    steps[static_cast<size_t>(mIndex)] = step;
    mDocument->setSteps(mVariant, steps);
}

void ReplaceStep::redo() { write(mNew); }
void ReplaceStep::undo() { write(mOld); }

std::string layersPattern(const std::vector<std::string>& layers, const std::vector<std::string>& linearLayers) {
    std::string alternatives;
    for (const auto& layer : layers) {
        std::string escaped;
        for (char c : layer) {
            if (std::string(".^$|()[]{}*+?\\").find(c) != std::string::npos) escaped += '\\';
            escaped += c;
        }
        // A full linear name ends the match; a group prefix must be followed by a dot.
        const bool isLinear = std::find(linearLayers.begin(), linearLayers.end(), layer) != linearLayers.end();
        if (!alternatives.empty()) alternatives += '|';
        alternatives += escaped + (isLinear ? "$" : "\\.");
    }
    return alternatives.empty() ? std::string() : "^(?:" + alternatives + ")";
}

QUndoCommand* setStepTargets(ProjectDocument* document, const QString& variant, int index, const std::string& targets) {
    const nlohmann::json steps = document->steps(variant);
    checkIndex(steps, index, variant);
    nlohmann::json step = steps[static_cast<size_t>(index)];
    if (targets.empty()) step.erase("targets");
    else step["targets"] = targets;
    return new ReplaceStep(tr("Set targets of step %1").arg(index + 1), document, variant, index, step);
}

QUndoCommand* addStepOverride(ProjectDocument* document, const QString& variant, int index, const std::string& pattern,
                              const nlohmann::json& params) {
    if (pattern.empty()) throw Error("an override needs a layer pattern");
    const nlohmann::json steps = document->steps(variant);
    checkIndex(steps, index, variant);
    nlohmann::json step = steps[static_cast<size_t>(index)];
    // The newest first: a layer takes the first override whose pattern matches it, so what was just asked for wins
    // over an earlier, broader override (a budget plan's, say) instead of being shadowed by it.
    nlohmann::json overrides = nlohmann::json::array({{{"pattern", pattern}, {"params", params}}});
    for (const auto& o : step.value("overrides", nlohmann::json::array()))
        if (o.value("pattern", "") != pattern) overrides.push_back(o);
    step["overrides"] = overrides;
    return new ReplaceStep(tr("Override %1 for %2").arg(QString::fromStdString(params.dump()), QString::fromStdString(pattern)),
                           document, variant, index, step);
}

} // namespace cwb
