// Pipeline edits are undo commands: add, remove, reorder, enable, parameter changes (merged while dragging),
// variants (new, duplicate, remove with its results); undo and redo restore the project exactly.
#include <QComboBox>
#include <QListWidget>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QPushButton>
#include <QtTest/QtTest>

#include "app/commands/settings_commands.h"
#include "app/commands/step_commands.h"
#include "app/commands/variant_commands.h"
#include "app/gui/param_form.h"
#include "app/gui/pipeline_editor.h"
#include "app/gui/project_document.h"
#include "core/util/error.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using nlohmann::json;

class TestPipelineCommands : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void cleanup();
    void addRemoveUndoRedo();
    void reorderUndoRedo();
    void enableDisableUndoRedo();
    void dragInTheListIsOneMove();
    void parameterChangesMergeIntoOneStep();
    void spinBoxDragIsOneUndoStep();
    void mergeBackToOriginalLeavesNoCommand();
    void duplicateAndRemoveVariant();
    void undoShowsTheVariantItChanges();
    void saveMergesWhatAnotherProgramSaved();
    void recoveredAutosaveMerges();
    void settingsUndo();
    void dirtyFollowsTheStack();
    void renameVariantUndoRedo();
    void renameRefusesTakenAndReservedNames();
    void buttonsAreOnlyWhereTheyAct();

private:
    QString methods(const QString& variant) const;
    QTemporaryDir mDir;
    QString mModelPath;
    std::unique_ptr<ProjectDocument> mDoc;
    std::unique_ptr<PipelineEditor> mEditor;
};

QString TestPipelineCommands::methods(const QString& variant) const {
    QStringList list;
    for (const auto& s : mDoc->steps(variant)) list << QString::fromStdString(s.value("method", "")) + (s.value("enabled", true) ? "" : "(off)");
    return list.join(',');
}

void TestPipelineCommands::initTestCase() {
    QVERIFY(mDir.isValid());
    mModelPath = mDir.filePath("tiny.gguf");
    const ArchSpec spec = test::tinyLlamaSpec();
    test::writeGguf(mModelPath.toStdString(), spec, test::randomWeights(spec, 7), ggml::Type::F32);
}

void TestPipelineCommands::init() {
    mDoc = ProjectDocument::openModel(mModelPath);
    mEditor = std::make_unique<PipelineEditor>();
    mEditor->setDocument(mDoc.get());
}

void TestPipelineCommands::cleanup() {
    mEditor.reset();
    mDoc.reset();
}

void TestPipelineCommands::addRemoveUndoRedo() {
    QUndoStack* stack = mDoc->undoStack();
    QVERIFY(mEditor->addStep("quantize.rtn"));   // creates the first variant, then adds the step
    const QString v = mDoc->currentVariant();
    QVERIFY(!v.isEmpty());
    QVERIFY(mEditor->addStep("prune.magnitude"));
    QCOMPARE(methods(v), QString("quantize.rtn,prune.magnitude"));
    QCOMPARE(mEditor->stepCount(), 2);
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 4);   // the method's declared default

    mEditor->selectStep(0);
    QVERIFY(mEditor->removeSelectedStep());
    QCOMPARE(methods(v), QString("prune.magnitude"));
    stack->undo();
    QCOMPARE(methods(v), QString("quantize.rtn,prune.magnitude"));
    stack->undo();
    QCOMPARE(methods(v), QString("quantize.rtn"));
    stack->undo();
    QCOMPARE(methods(v), QString(""));
    stack->redo();
    stack->redo();
    QCOMPARE(methods(v), QString("quantize.rtn,prune.magnitude"));
    stack->redo();
    QCOMPARE(methods(v), QString("prune.magnitude"));
    QCOMPARE(mEditor->stepCount(), 1);   // the editor follows the document
}

void TestPipelineCommands::reorderUndoRedo() {
    mEditor->addStep("quantize.rtn");
    mEditor->addStep("prune.magnitude");
    mEditor->addStep("quantize.fp8");
    const QString v = mDoc->currentVariant();
    mEditor->selectStep(0);
    QVERIFY(mEditor->moveSelectedStep(+1));
    QCOMPARE(methods(v), QString("prune.magnitude,quantize.rtn,quantize.fp8"));
    QVERIFY(mEditor->moveSelectedStep(+1));
    QCOMPARE(methods(v), QString("prune.magnitude,quantize.fp8,quantize.rtn"));
    QVERIFY(!mEditor->moveSelectedStep(+1));   // already last
    mDoc->undoStack()->undo();
    mDoc->undoStack()->undo();
    QCOMPARE(methods(v), QString("quantize.rtn,prune.magnitude,quantize.fp8"));
    mDoc->undoStack()->redo();
    QCOMPARE(methods(v), QString("prune.magnitude,quantize.rtn,quantize.fp8"));
}

void TestPipelineCommands::dragInTheListIsOneMove() {
    mEditor->addStep("quantize.rtn");
    mEditor->addStep("prune.magnitude");
    mEditor->addStep("quantize.fp8");
    const QString v = mDoc->currentVariant();
    const int before = mDoc->undoStack()->count();
    // What an internal drag and drop does to the list's model: the first row dropped after the last.
    QVERIFY(mEditor->stepList()->model()->moveRow(QModelIndex(), 0, QModelIndex(), 3));
    QTRY_COMPARE(methods(v), QString("prune.magnitude,quantize.fp8,quantize.rtn"));
    QCOMPARE(mDoc->undoStack()->count(), before + 1);
    QCOMPARE(mEditor->selectedStep(), 2);
    mDoc->undoStack()->undo();
    QCOMPARE(methods(v), QString("quantize.rtn,prune.magnitude,quantize.fp8"));
}

void TestPipelineCommands::enableDisableUndoRedo() {
    mEditor->addStep("quantize.rtn");
    const QString v = mDoc->currentVariant();
    // Unchecking the item in the list is the user's gesture.
    mEditor->stepList()->item(0)->setCheckState(Qt::Unchecked);
    QCOMPARE(methods(v), QString("quantize.rtn(off)"));
    QCOMPARE(mDoc->project().variant(v.toStdString()).recipe["steps"][0]["enabled"].get<bool>(), false);
    mDoc->undoStack()->undo();
    QCOMPARE(methods(v), QString("quantize.rtn"));
    QVERIFY(!mDoc->steps(v)[0].contains("enabled"));
    mDoc->undoStack()->redo();
    QCOMPARE(methods(v), QString("quantize.rtn(off)"));
}

void TestPipelineCommands::parameterChangesMergeIntoOneStep() {
    mEditor->addStep("quantize.rtn");
    const QString v = mDoc->currentVariant();
    QUndoStack* stack = mDoc->undoStack();
    const int before = stack->count();
    for (int bits : {3, 5, 6}) stack->push(changeStepParameter(mDoc.get(), v, 0, "bits", bits));
    QCOMPARE(stack->count(), before + 1);
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 6);
    stack->push(changeStepParameter(mDoc.get(), v, 0, "group_size", 64));   // another parameter: its own step
    QCOMPARE(stack->count(), before + 2);
    stack->undo();
    QCOMPARE(mDoc->steps(v)[0]["params"]["group_size"].get<int>(), 128);
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 6);
    stack->undo();
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 4);
    stack->redo();
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 6);
}

void TestPipelineCommands::spinBoxDragIsOneUndoStep() {
    mEditor->addStep("quantize.rtn");
    const QString v = mDoc->currentVariant();
    mEditor->selectStep(0);
    auto* bits = qobject_cast<QSpinBox*>(mEditor->paramForm()->editor("bits"));
    QVERIFY(bits);
    QCOMPARE(bits->minimum(), 2);   // the declared range is the widget's range
    QCOMPARE(bits->maximum(), 8);
    QVERIFY(bits->toolTip().contains("bits per weight"));
    const int before = mDoc->undoStack()->count();
    for (int i = 0; i < 3; ++i) bits->stepUp();   // 4 -> 7, as a drag or held arrow key does
    bits->setValue(100);                          // clamped to the declared maximum
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 8);
    QCOMPARE(mDoc->undoStack()->count(), before + 1);
    QCOMPARE(bits, qobject_cast<QSpinBox*>(mEditor->paramForm()->editor("bits")));   // not rebuilt under the user
    mDoc->undoStack()->undo();
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 4);
    QCOMPARE(bits->value(), 4);   // the form shows the undone value
}

void TestPipelineCommands::mergeBackToOriginalLeavesNoCommand() {
    mEditor->addStep("quantize.rtn");
    const QString v = mDoc->currentVariant();
    QUndoStack* stack = mDoc->undoStack();
    const int before = stack->count();
    stack->push(changeStepParameter(mDoc.get(), v, 0, "bits", 5));
    stack->push(changeStepParameter(mDoc.get(), v, 0, "bits", 4));
    QCOMPARE(stack->count(), before);
    QCOMPARE(mDoc->steps(v)[0]["params"]["bits"].get<int>(), 4);
}

void TestPipelineCommands::duplicateAndRemoveVariant() {
    mEditor->addStep("quantize.rtn");
    const QString first = mDoc->currentVariant();
    QVERIFY(mEditor->duplicateVariant());
    const QString second = mDoc->currentVariant();
    QVERIFY(second != first);
    QCOMPARE(mDoc->project().variants().size(), size_t(2));
    QCOMPARE(methods(second), QString("quantize.rtn"));
    mEditor->addStep("prune.magnitude");   // the branch changes, the original does not
    QCOMPARE(methods(first), QString("quantize.rtn"));
    QCOMPARE(methods(second), QString("quantize.rtn,prune.magnitude"));

    ResultRow row;
    row.metric = "perplexity";
    row.value = 12.5;
    mDoc->setResults(second, {row});
    QVERIFY(mEditor->removeVariant());
    QVERIFY(!mDoc->project().hasVariant(second.toStdString()));
    QCOMPARE(mDoc->currentVariant(), first);
    mDoc->undoStack()->undo();
    QVERIFY(mDoc->project().hasVariant(second.toStdString()));
    QCOMPARE(mDoc->currentVariant(), second);
    QCOMPARE(mDoc->project().results(second.toStdString()).size(), size_t(1));   // results come back with it
    QCOMPARE(mDoc->project().results(second.toStdString())[0].value, 12.5);
    mDoc->undoStack()->undo();   // the added step
    mDoc->undoStack()->undo();   // the duplicate
    QCOMPARE(mDoc->project().variants().size(), size_t(1));
    QCOMPARE(mDoc->currentVariant(), first);
    // Regression: redoing the duplicate brought it back without the results measured on it.
    mDoc->undoStack()->redo();
    QCOMPARE(mDoc->project().results(second.toStdString()).size(), size_t(1));
    QCOMPARE(mDoc->project().results(second.toStdString())[0].value, 12.5);
}

// Regression: undoing an edit of a variant other than the one in view changed it out of sight.
void TestPipelineCommands::undoShowsTheVariantItChanges() {
    mEditor->addStep("quantize.rtn");
    const QString first = mDoc->currentVariant();
    mEditor->addStep("prune.magnitude");
    QVERIFY(mEditor->duplicateVariant());
    const QString second = mDoc->currentVariant();
    mDoc->setCurrentVariant(first);
    mDoc->setCurrentVariant(second);   // the user looks at the copy; the last edit was to `first`
    mDoc->undoStack()->undo();         // the duplicate goes: `first` in view
    QCOMPARE(mDoc->currentVariant(), first);
    mDoc->setCurrentVariant(first);
    mDoc->undoStack()->redo();         // the duplicate again, in view
    QCOMPARE(mDoc->currentVariant(), second);
    mDoc->undoStack()->undo();
    QCOMPARE(mDoc->currentVariant(), first);
    mDoc->undoStack()->redo();
    mEditor->addStep("quantize.gptq");   // an edit of `second`, then `first` is put in view
    mDoc->setCurrentVariant(first);
    QCOMPARE(mEditor->stepCount(), 2);
    mDoc->undoStack()->undo();
    QCOMPARE(mDoc->currentVariant(), second);
    QCOMPARE(methods(second), QString("quantize.rtn,prune.magnitude"));
    QCOMPARE(mEditor->stepCount(), 2);   // the editor shows the variant that changed
    mDoc->setCurrentVariant(first);
    mDoc->undoStack()->redo();
    QCOMPARE(mDoc->currentVariant(), second);
    QCOMPARE(mEditor->stepCount(), 3);
}

// Regression: a document whose file another program saved meanwhile (cwb project run) could only Save As.
void TestPipelineCommands::saveMergesWhatAnotherProgramSaved() {
    mEditor->addStep("quantize.rtn");
    const QString first = mDoc->currentVariant();
    const QString path = mDir.filePath("merged.cwbproj");
    mDoc->saveAs(path);
    {   // another program stores results and adds a variant
        Project other = Project::open(path.toStdString());
        ResultRow row;
        row.metric = "perplexity";
        row.value = 9.5;
        other.setResults(first.toStdString(), {row}, other.measurementBasis(first.toStdString()));
        other.addVariant({"from-cli", "", {{"steps", nlohmann::json::array()}}, "", nlohmann::json::array()});
        other.save();
    }
    mEditor->addStep("prune.magnitude");   // meanwhile, here
    QVERIFY_THROWS_EXCEPTION(ChangedOnDisk, mDoc->save());
    QStringList problems;
    QVERIFY2(mDoc->mergeChangesOnDisk(&problems), qPrintable(problems.join("; ")));
    QVERIFY(mDoc->isDirty());
    // The history was recorded against the project before the merge: undoing the added variant's parent, say, would
    // fail or revert the other program's change (review finding), so it is cleared.
    QVERIFY(!mDoc->undoStack()->canUndo());
    QVERIFY(mDoc->resultsCurrent("base"));
    QVERIFY(!mDoc->resultsCurrent(first));   // measured before this window added a step
    mDoc->save();
    const Project saved = Project::open(path.toStdString());
    QVERIFY(saved.hasVariant("from-cli"));
    QCOMPARE(saved.results(first.toStdString()).size(), size_t(1));
    QCOMPARE(saved.variant(first.toStdString()).recipe["steps"].size(), size_t(2));

    // Both sides change the same variant: nothing is merged, and the reason is given.
    {
        Project other = Project::open(path.toStdString());
        other.setRecipe(first.toStdString(), {{"steps", nlohmann::json::array()}});
        other.save();
    }
    mEditor->selectStep(1);
    QVERIFY(mEditor->removeSelectedStep());   // the prune step goes here
    QVERIFY_THROWS_EXCEPTION(ChangedOnDisk, mDoc->save());
    QVERIFY(!mDoc->mergeChangesOnDisk(&problems));
    QCOMPARE(problems, QStringList{"variant '" + first + "' (changed or removed on both sides)"});
    QCOMPARE(methods(first), QString("quantize.rtn"));   // unchanged
}

// A project recovered from its autosave could not be merged with what another program saved since, so its work could
// only be saved under another name. The autosave now keeps the file as the window read it, and the merge works.
void TestPipelineCommands::recoveredAutosaveMerges() {
    const QString path = mDir.filePath("recovered.cwbproj");
    {   // a stale autosave at the target, of a session on a file of that name: Save As drops it (review finding)
        QFile stale(path + ".autosave");
        QVERIFY(stale.open(QIODevice::WriteOnly));
        stale.write("stale");
    }
    mDoc->saveAs(path);
    QVERIFY(!QFileInfo::exists(path + ".autosave"));
    mEditor->addStep("quantize.rtn");   // unsaved work, autosaved; then the app stops
    const QString first = mDoc->currentVariant();
    mDoc->autosave();
    QVERIFY(QFileInfo::exists(path + ".autosave.base"));
    Project::discardAutosave(path.toStdString());   // dropped behind the open document's back: written again
    mDoc->autosave();
    QVERIFY(QFileInfo::exists(path + ".autosave.base"));
    mEditor.reset();
    mDoc.reset();
    {   // another program adds a variant meanwhile
        Project other = Project::open(path.toStdString());
        other.addVariant({"from-cli", "", {{"steps", nlohmann::json::array()}}, "", nlohmann::json::array()});
        other.save();
    }
    mDoc = ProjectDocument::openProject(path, /*recoverAutosave=*/true);
    mEditor = std::make_unique<PipelineEditor>();
    mEditor->setDocument(mDoc.get());
    QVERIFY(mDoc->isDirty());
    QVERIFY(!mDoc->project().hasVariant("from-cli"));
    QVERIFY_THROWS_EXCEPTION(ChangedOnDisk, mDoc->save());
    QStringList problems;
    QVERIFY2(mDoc->mergeChangesOnDisk(&problems), qPrintable(problems.join("; ")));
    mDoc->save();
    QVERIFY(!QFileInfo::exists(path + ".autosave"));        // saved: the autosave and its base go
    QVERIFY(!QFileInfo::exists(path + ".autosave.base"));
    const Project saved = Project::open(path.toStdString());
    QVERIFY(saved.hasVariant("from-cli"));
    QCOMPARE(saved.variant(first.toStdString()).recipe["steps"].size(), size_t(1));

    // An autosave without its base (an older build's): recovered, but the merge is refused with the reason.
    mEditor->addStep("prune.magnitude");
    mDoc->autosave();
    QFile::remove(path + ".autosave.base");
    mEditor.reset();
    mDoc.reset();
    {
        Project other = Project::open(path.toStdString());
        other.removeVariant("from-cli");
        other.save();
    }
    mDoc = ProjectDocument::openProject(path, true);
    QVERIFY_THROWS_EXCEPTION(ChangedOnDisk, mDoc->save());
    QVERIFY(!mDoc->mergeChangesOnDisk(&problems));
    QCOMPARE(problems.size(), 1);
    QVERIFY2(problems.front().contains("does not record the file as it was read"), qPrintable(problems.front()));
}

void TestPipelineCommands::settingsUndo() {
    ProjectSettings s = mDoc->project().settings();
    const int64_t original = s.evalCtx;
    s.evalCtx = 32;
    mDoc->undoStack()->push(changeSettings(mDoc.get(), s));
    s.evalChunks = 3;
    // Each change (a Settings dialog's OK) is its own undo step: two were undone by one Ctrl+Z (GUI probe).
    mDoc->undoStack()->push(changeSettings(mDoc.get(), s));
    QCOMPARE(mDoc->undoStack()->count(), 2);
    QCOMPARE(mDoc->project().settings().evalChunks, int64_t(3));
    mDoc->undoStack()->undo();
    QCOMPARE(mDoc->project().settings().evalCtx, int64_t(32));
    QCOMPARE(mDoc->project().settings().evalChunks, int64_t(-1));
    mDoc->undoStack()->undo();
    QCOMPARE(mDoc->project().settings().evalCtx, original);
}

void TestPipelineCommands::dirtyFollowsTheStack() {
    QVERIFY(!mDoc->isDirty());
    QSignalSpy dirty(mDoc.get(), &ProjectDocument::dirtyChanged);
    mEditor->addStep("quantize.rtn");
    QVERIFY(mDoc->isDirty());
    while (mDoc->undoStack()->canUndo()) mDoc->undoStack()->undo();
    QVERIFY(!mDoc->isDirty());
    QVERIFY(dirty.count() >= 2);
    QCOMPARE(dirty.last().at(0).toBool(), false);
}

// Renaming keeps the steps, moves the results, re-points a derived variant, and undoes in one step.
void TestPipelineCommands::renameVariantUndoRedo() {
    mEditor->addStep("quantize.rtn");
    const QString first = mDoc->currentVariant();
    QVERIFY(mEditor->duplicateVariant());
    const QString child = mDoc->currentVariant();
    // Make the copy derive from the first one, as a branch does in a saved project.
    Variant derived = mDoc->project().variant(child.toStdString());
    mDoc->removeVariant(child);
    derived.parent = first.toStdString();
    mDoc->addVariant(derived);
    mDoc->setCurrentVariant(first);
    ResultRow row;
    row.metric = "perplexity";
    row.value = 7.5;
    mDoc->setResults(first, {row});
    const json stepsBefore = mDoc->steps(first);

    QSignalSpy variants(mDoc.get(), &ProjectDocument::variantsChanged);
    QVERIFY(mEditor->renameVariant("w4-rtn", false));
    QCOMPARE(mDoc->currentVariant(), QString("w4-rtn"));
    QVERIFY(!mDoc->project().hasVariant(first.toStdString()));
    QCOMPARE(mDoc->steps("w4-rtn"), stepsBefore);
    QCOMPARE(mDoc->project().variant(child.toStdString()).parent, std::string("w4-rtn"));
    QCOMPARE(mDoc->project().results("w4-rtn").size(), size_t(1));
    QCOMPARE(mDoc->project().results("w4-rtn")[0].value, 7.5);
    QVERIFY(mDoc->project().results(first.toStdString()).empty());
    QVERIFY(variants.count() >= 1);
    auto* combo = mEditor->findChild<QComboBox*>("variantChooser");
    QVERIFY(combo);
    QCOMPARE(combo->currentText(), QString("w4-rtn"));   // the chooser follows

    mDoc->undoStack()->undo();
    QCOMPARE(mDoc->currentVariant(), first);
    QCOMPARE(mDoc->project().variant(child.toStdString()).parent, first.toStdString());
    QCOMPARE(mDoc->project().results(first.toStdString()).size(), size_t(1));
    QVERIFY(!mDoc->project().hasVariant("w4-rtn"));
    mDoc->undoStack()->redo();
    QCOMPARE(mDoc->currentVariant(), QString("w4-rtn"));
    QCOMPARE(mDoc->steps("w4-rtn"), stepsBefore);
}

void TestPipelineCommands::renameRefusesTakenAndReservedNames() {
    mEditor->addStep("quantize.rtn");
    const QString first = mDoc->currentVariant();
    QVERIFY(mEditor->newVariant());
    const QString second = mDoc->currentVariant();
    QVERIFY(first != second);
    const int count = mDoc->undoStack()->count();
    const QStringList bad = {first, "base", "", " padded"};
    for (const QString& name : bad) {
        QVERIFY2(!mEditor->renameVariant(name, false), qPrintable(name));
        QVERIFY2(!mEditor->lastError().isEmpty(), qPrintable(name));
    }
    QVERIFY2(mEditor->lastError().contains("space"), qPrintable(mEditor->lastError()));
    QVERIFY(!mEditor->renameVariant(first, false));
    QVERIFY2(mEditor->lastError().contains("already exists") && mEditor->lastError().contains(first), qPrintable(mEditor->lastError()));
    QCOMPARE(mDoc->undoStack()->count(), count);   // nothing pushed
    QCOMPARE(mDoc->currentVariant(), second);
    // The core refuses a taken name too (the command cannot be fooled into a duplicate).
    QVERIFY_THROWS_EXCEPTION(cwb::Error, mDoc->renameVariant(second, first));
}

// Regression (GUI probe): with no variant, Duplicate and Rename were enabled and did nothing; Up, Down and Remove were
// enabled over an empty step list.
void TestPipelineCommands::buttonsAreOnlyWhereTheyAct() {
    const auto buttonNamed = [&](const QString& text, const QString& tip) -> QPushButton* {   // the Layers box has an Up too
        for (QPushButton* b : mEditor->findChildren<QPushButton*>())
            if (b->text() == text && b->toolTip().startsWith(tip)) return b;
        return nullptr;
    };
    QPushButton *duplicate = buttonNamed("Duplicate", "Copy this variant"), *rename = buttonNamed("Rename…", "Give this variant"),
                *up = buttonNamed("Up", "Move the step up"), *down = buttonNamed("Down", "Move the step down");
    QVERIFY(duplicate && rename && up && down);
    QVERIFY(mDoc->project().variants().empty());
    QVERIFY(!duplicate->isEnabled() && !rename->isEnabled() && !up->isEnabled() && !down->isEnabled());
    QVERIFY(!buttonNamed("Remove", "Remove this variant")->isEnabled() && !buttonNamed("Remove", "Remove the step")->isEnabled());
    QVERIFY(mEditor->addStep("quantize.rtn"));
    QVERIFY(duplicate->isEnabled() && rename->isEnabled());
    QVERIFY(!up->isEnabled() && !down->isEnabled());   // one step: nowhere to move it
    QVERIFY(mEditor->addStep("prune.magnitude"));
    mEditor->selectStep(1);
    QVERIFY(up->isEnabled() && !down->isEnabled());
    mEditor->selectStep(0);
    QVERIFY(!up->isEnabled() && down->isEnabled());
}

QTEST_MAIN(TestPipelineCommands)
#include "test_pipeline_commands.moc"
