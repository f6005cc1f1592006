#pragma once
// Undo commands for a project's variants: add (empty, or a duplicate of another to branch), remove.
// Removing drops the variant's results; undo puts them back.
#include <QString>
#include <QUndoCommand>

#include <vector>

#include "core/project/project.h"

namespace cwb {

class ProjectDocument;

class AddVariant : public QUndoCommand {
public:
    // Makes `variant` current on redo and restores the previous current variant on undo.
    AddVariant(ProjectDocument* document, Variant variant);
    void redo() override;
    void undo() override;

private:
    ProjectDocument* mDocument;
    Variant mVariant;
    QString mPreviousCurrent;
    std::vector<ResultRow> mResults;   // measured while it existed: kept through undo, back on redo
    nlohmann::json mBasis;             // what they were measured from (Project::resultBasis)
};

// A copy of `source` (same parent and recipe) named `name`.
AddVariant* duplicateVariant(ProjectDocument* document, const QString& source, const QString& name);
// A name not used by any variant: base + "-2", "-3", ...
QString uniqueVariantName(const Project& project, const QString& base);

// Why `name` cannot be the new name of variant `current` ("" when it can): empty, reserved, taken, or
// spaces at either end. The message is meant for the user.
QString variantNameProblem(const Project& project, const QString& name, const QString& current = {});

class RenameVariant : public QUndoCommand {
public:
    RenameVariant(ProjectDocument* document, QString from, QString to);
    void redo() override;
    void undo() override;

private:
    ProjectDocument* mDocument;
    QString mFrom, mTo;
};

class RemoveVariant : public QUndoCommand {
public:
    RemoveVariant(ProjectDocument* document, QString name);
    void redo() override;
    void undo() override;

private:
    ProjectDocument* mDocument;
    QString mName;
    Variant mRemoved;
    std::vector<ResultRow> mResults;
    nlohmann::json mBasis;
    bool mWasCurrent = false;
};

} // namespace cwb
