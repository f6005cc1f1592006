#include "app/commands/variant_commands.h"

#include <QCoreApplication>

#include "app/gui/project_document.h"
#include "core/util/error.h"

namespace cwb {

namespace {
QString tr(const char* text) { return QCoreApplication::translate("VariantCommands", text); }
} // namespace

AddVariant::AddVariant(ProjectDocument* document, Variant variant)
    : QUndoCommand(tr("Add variant %1").arg(QString::fromStdString(variant.name))), mDocument(document),
      mVariant(std::move(variant)) {}

void AddVariant::redo() {
    mPreviousCurrent = mDocument->currentVariant();
    mDocument->addVariant(mVariant, mResults, mBasis);
    mVariant = mDocument->project().variant(mVariant.name);   // keeps the creation time stamped on first add
    mDocument->setCurrentVariant(QString::fromStdString(mVariant.name));
}

void AddVariant::undo() {
    mResults = mDocument->project().results(mVariant.name);   // measured since the add (a run of hours, say)
    mBasis = mDocument->project().resultBasis(mVariant.name);
    mDocument->removeVariant(QString::fromStdString(mVariant.name));
    mDocument->setCurrentVariant(mPreviousCurrent);
}

AddVariant* duplicateVariant(ProjectDocument* document, const QString& source, const QString& name) {
    Variant copy = document->project().variant(source.toStdString());
    copy.name = name.toStdString();
    copy.created.clear();
    copy.exports = nlohmann::json::array();
    auto* command = new AddVariant(document, copy);
    command->setText(tr("Duplicate variant %1 as %2").arg(source, name));
    return command;
}

QString uniqueVariantName(const Project& project, const QString& base) {
    if (!project.hasVariant(base.toStdString()) && base != Project::kBaseName) return base;
    for (int n = 2;; ++n) {
        const QString candidate = base + "-" + QString::number(n);
        if (!project.hasVariant(candidate.toStdString())) return candidate;
    }
}

QString variantNameProblem(const Project& project, const QString& name, const QString& current) {
    if (name.trimmed().isEmpty()) return tr("A variant needs a name.");
    if (name.trimmed() != name) return tr("The name \"%1\" starts or ends with a space; remove it.").arg(name);
    if (name == Project::kBaseName) return tr("\"base\" is reserved for the base model; choose another name.");
    if (name.contains(QLatin1Char(','))) return tr("A comma separates names in lists such as cwb --batch --variants; remove it.");
    const std::string problem = Project::newNameProblem(name.toStdString());   // control characters too
    if (!problem.empty()) return QString::fromStdString(problem) + QStringLiteral(".");
    if (name != current && project.hasVariant(name.toStdString()))
        return tr("A variant named \"%1\" already exists; choose another name.").arg(name);
    return {};
}

RenameVariant::RenameVariant(ProjectDocument* document, QString from, QString to)
    : QUndoCommand(tr("Rename variant %1 to %2").arg(from, to)), mDocument(document), mFrom(std::move(from)), mTo(std::move(to)) {}

void RenameVariant::redo() { mDocument->renameVariant(mFrom, mTo); }
void RenameVariant::undo() { mDocument->renameVariant(mTo, mFrom); }

RemoveVariant::RemoveVariant(ProjectDocument* document, QString name)
    : QUndoCommand(tr("Remove variant %1").arg(name)), mDocument(document), mName(std::move(name)) {}

void RemoveVariant::redo() {
    mRemoved = mDocument->project().variant(mName.toStdString());
    mResults = mDocument->project().results(mName.toStdString());
    mBasis = mDocument->project().resultBasis(mName.toStdString());
    mWasCurrent = mDocument->currentVariant() == mName;
    mDocument->removeVariant(mName);
}

void RemoveVariant::undo() {
    mDocument->addVariant(mRemoved, mResults, mBasis);
    if (mWasCurrent) mDocument->setCurrentVariant(mName);
}

} // namespace cwb
