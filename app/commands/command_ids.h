#pragma once
// Merge ids of the undo commands (QUndoCommand::id): consecutive commands with the same id and the same
// target merge into one undo step, so dragging a slider or spinning a box is undone at once.
namespace cwb {

enum class CommandId : int {
    // Each its own undo step: a Settings dialog's OK (two OKs were undone by one Ctrl+Z; GUI probe).
    Unmerged = -1,
    StepParameter = 1,
    StepTargets,
    Tokenizer,   // not merged (mergeWith is not overridden); the window checks it before undo and redo
};

} // namespace cwb
