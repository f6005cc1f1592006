#pragma once
// Undo command for the tokenizer the project's model is read with (Project > Use Tokenizer File). It keeps the
// model before and after (copies sharing their tensors), so undo and redo swap them without reading any file.
#include <QString>
#include <QUndoCommand>

#include "app/gui/project_document.h"

namespace cwb {

class ChangeTokenizer : public QUndoCommand {
public:
    // Reads the tokenizer at `path` for the document's model; throws cwb::Error naming the file when the model cannot
    // use it (nothing is pushed then). The first redo (on push) applies it.
    ChangeTokenizer(ProjectDocument* document, const QString& path);
    void redo() override;
    void undo() override;
    int id() const override;   // CommandId::Tokenizer: never merges, but lets the window find it on the stack

private:
    ProjectDocument* mDocument;
    ProjectDocument::ModelState mBefore;
    ProjectDocument::ModelState mAfter;
};

} // namespace cwb
