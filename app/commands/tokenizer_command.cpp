#include "app/commands/tokenizer_command.h"

#include <QCoreApplication>
#include <QFileInfo>

#include "app/commands/command_ids.h"

namespace cwb {

ChangeTokenizer::ChangeTokenizer(ProjectDocument* document, const QString& path)
    : QUndoCommand(QCoreApplication::translate("TokenizerCommand", "Use tokenizer %1").arg(QFileInfo(path).fileName())),
      mDocument(document), mBefore(document->modelState()), mAfter(document->withTokenizer(path)) {}

void ChangeTokenizer::redo() { mDocument->setModelState(mAfter); }

void ChangeTokenizer::undo() { mDocument->setModelState(mBefore); }

int ChangeTokenizer::id() const { return static_cast<int>(CommandId::Tokenizer); }

} // namespace cwb
