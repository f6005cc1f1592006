#pragma once
// A generic "set a value" undo command (after Tiled's ChangeValue): it stores the old and the new value and
// an apply function that writes one of them into the document. Consecutive commands with the same merge id
// and key (e.g. "variant/step 2/bits") merge, keeping the first old value and the last new one; a merge that
// returns to the old value makes the command obsolete, so it leaves the stack.
#include <QString>
#include <QUndoCommand>

#include <functional>
#include <utility>

#include "app/commands/command_ids.h"

namespace cwb {

template <typename Value>
class ChangeValue : public QUndoCommand {
public:
    using Apply = std::function<void(const Value&)>;

    ChangeValue(const QString& text, CommandId id, QString key, Value oldValue, Value newValue, Apply apply)
        : QUndoCommand(text), mId(id), mKey(std::move(key)), mOld(std::move(oldValue)), mNew(std::move(newValue)),
          mApply(std::move(apply)) {}

    void redo() override { mApply(mNew); }
    void undo() override { mApply(mOld); }
    int id() const override { return static_cast<int>(mId); }

    bool mergeWith(const QUndoCommand* other) override {
        const auto* next = dynamic_cast<const ChangeValue*>(other);
        if (!next || next->mKey != mKey) return false;
        mNew = next->mNew;
        setObsolete(mNew == mOld);
        return true;
    }

    const QString& key() const { return mKey; }

private:
    CommandId mId;
    QString mKey;
    Value mOld;
    Value mNew;
    Apply mApply;
};

} // namespace cwb
