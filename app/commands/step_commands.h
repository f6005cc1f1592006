#pragma once
// Undo commands for the steps of a variant's recipe. Each takes the document, the variant and step indices;
// redo()/undo() write the steps array through ProjectDocument::setSteps, which emits stepsChanged.
#include <QString>
#include <QUndoCommand>

#include <nlohmann/json.hpp>

namespace cwb {

class ProjectDocument;

// A recipe step for `methodId` with the method's default parameters (from its ParamSpec declarations).
nlohmann::json defaultStep(const std::string& methodId);

class AddStep : public QUndoCommand {
public:
    // index -1 appends.
    AddStep(ProjectDocument* document, QString variant, nlohmann::json step, int index = -1);
    void redo() override;
    void undo() override;

private:
    ProjectDocument* mDocument;
    QString mVariant;
    nlohmann::json mStep;
    int mIndex;
};

class RemoveStep : public QUndoCommand {
public:
    RemoveStep(ProjectDocument* document, QString variant, int index);
    void redo() override;
    void undo() override;

private:
    ProjectDocument* mDocument;
    QString mVariant;
    int mIndex;
    nlohmann::json mRemoved;
};

class MoveStep : public QUndoCommand {
public:
    MoveStep(ProjectDocument* document, QString variant, int from, int to);
    void redo() override;
    void undo() override;

private:
    void move(int from, int to);
    ProjectDocument* mDocument;
    QString mVariant;
    int mFrom, mTo;
};

class SetStepEnabled : public QUndoCommand {
public:
    SetStepEnabled(ProjectDocument* document, QString variant, int index, bool enabled);
    void redo() override;
    void undo() override;

private:
    void apply(bool enabled);
    ProjectDocument* mDocument;
    QString mVariant;
    int mIndex;
    bool mEnabled;
};

// One parameter of one step; consecutive changes of the same parameter merge (a drag is one undo step).
QUndoCommand* changeStepParameter(ProjectDocument* document, const QString& variant, int index, const std::string& name,
                                  const nlohmann::json& value);

// Replaces one step's JSON as a whole (targets, overrides: edits that come from outside the parameter form).
class ReplaceStep : public QUndoCommand {
public:
    ReplaceStep(const QString& text, ProjectDocument* document, QString variant, int index, nlohmann::json step);
    void redo() override;
    void undo() override;

private:
    void write(const nlohmann::json& step);
    ProjectDocument* mDocument;
    QString mVariant;
    int mIndex;
    nlohmann::json mNew;
    nlohmann::json mOld;
};

// A regex that matches exactly `layers` (full linear names, or group prefixes such as "blk.2.attn" that match
// every linear below them): "^(?:blk\.2\.attn\.|blk\.3\.ffn_up$)". Empty for an empty list.
std::string layersPattern(const std::vector<std::string>& layers, const std::vector<std::string>& linearLayers);

// Sets the step's `targets` regex (empty: the default, every block linear). Throws cwb::Error for a bad index.
QUndoCommand* setStepTargets(ProjectDocument* document, const QString& variant, int index, const std::string& targets);
// Puts {"pattern": pattern, "params": params} first among the step's overrides (the first match applies, so it wins
// over earlier ones for the layers it names), replacing an override with the same pattern. Throws cwb::Error for a
// bad index or an empty pattern.
QUndoCommand* addStepOverride(ProjectDocument* document, const QString& variant, int index, const std::string& pattern,
                              const nlohmann::json& params);

} // namespace cwb
