// StepLayersEditor in the Pipeline tab: a step's targets, ignore patterns and per-layer overrides are edited in place,
// each finished edit is one undo command, edits that make no valid step are kept in the fields but not applied (with
// the reason), and the counts of layers taken and overridden follow the model.
#include <QAction>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "app/commands/step_commands.h"
#include "app/gui/param_form.h"
#include "app/gui/pipeline_editor.h"
#include "app/gui/project_document.h"
#include "app/gui/step_layers_editor.h"
#include "core/compress/method.h"
#include "core/compress/pipeline.h"
#include "core/compress/recipe.h"
#include "core/model/model.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using nlohmann::json;

class TestStepLayersEditor : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void cleanup();
    void targetsAreOneUndoStepAndCounted();
    void invalidPatternIsKeptButNotApplied();
    void pendingEditsSurviveAParameterChange();
    void ignoreOnePatternPerLine();
    void overridesAddEditReorderRemove();
    void overrideParametersAreChecked();
    void patternThatNamesNoLayerWarns();
    void externalChangesReload();
    void headOnlyStep();
    void layerNamesPastARenamingStep();
    void newRowIsIncompleteNotWrong();
    void storedEmptyPatternDoesNotBlockOtherEdits();
    void overrideThatChangesNothingWarns();
    void eachStepIsCheckedOnItsOwn();
    void wholeBlockMethodsReadNoPatterns();
    void headAndChannelPruningCountBlocks();
    void revertDoesNotApplyWhatItReverts();
    void ignoreAppliesWhenFocusLeaves();
    void pendingEditsStayWithTheirStep();
    void editsNotAppliedAreKeptWithTheirStep();
    void pruningQuantizedLayersWarns();
    void pendingEditsAreAppliedBeforeSaving();
    void tabGoesPaneByPane();
    void escapeRevertsEditsNotApplied();

private:
    json step(int index = 0) const { return mDoc->steps(mDoc->currentVariant())[size_t(index)]; }
    void setOverrideRow(int row, const QString& pattern, const QString& params);
    StepLayersEditor* layers() const { return mEditor->layersEditor(); }
    QTemporaryDir mDir;
    QString mModelPath;
    std::unique_ptr<ProjectDocument> mDoc;
    std::unique_ptr<PipelineEditor> mEditor;
};

void TestStepLayersEditor::initTestCase() {
    QVERIFY(mDir.isValid());
    mModelPath = mDir.filePath("tiny.gguf");
    const ArchSpec spec = test::tinyLlamaSpec();
    test::writeGguf(mModelPath.toStdString(), spec, test::randomWeights(spec, 7), ggml::Type::F32);
}

void TestStepLayersEditor::init() {
    mDoc = ProjectDocument::openModel(mModelPath);
    mEditor = std::make_unique<PipelineEditor>();
    mEditor->setDocument(mDoc.get());
    QVERIFY(mEditor->addStep("quantize.rtn"));
    mEditor->selectStep(0);
    QCOMPARE(mDoc->model()->linearLayers().size(), size_t(14));   // 2 blocks x 7
}

void TestStepLayersEditor::cleanup() {
    mEditor.reset();
    mDoc.reset();
}

void TestStepLayersEditor::setOverrideRow(int row, const QString& pattern, const QString& params) {
    QTableWidget* table = layers()->overridesTable();
    // A cell edit commits at once, as a user's finished cell edit does: the parameters first, so the row is complete
    // when its pattern lands.
    table->item(row, 1)->setText(params);
    table->item(row, 0)->setText(pattern);
}

void TestStepLayersEditor::targetsAreOneUndoStepAndCounted() {
    QUndoStack* stack = mDoc->undoStack();
    QCOMPARE(layers()->summary(), QString("Takes 14 of 14 linear layers of the blocks."));
    const int before = stack->count();
    QLineEdit* targets = layers()->targetsEdit();
    targets->setFocus();
    QTest::keyClicks(targets, "layers\\.1\\.self_attn");
    QCOMPARE(stack->count(), before);   // nothing applied while typing
    QTest::keyClick(targets, Qt::Key_Return);
    QCOMPARE(stack->count(), before + 1);
    QCOMPARE(step()["targets"].get<std::string>(), std::string("layers\\.1\\.self_attn"));
    QCOMPARE(layers()->summary(), QString("Takes 4 of 14 linear layers of the blocks."));
    // The count is the core's: what a run would compress.
    const Recipe recipe = Recipe::fromJson({{"steps", json::array({step()})}}, "test");
    QCOMPARE(targetLayers(*mDoc->model(), recipe.steps[0]).size(), size_t(4));
    QVERIFY(!layers()->hasPendingEdits());
    // Enter again with the same text is no second command.
    QTest::keyClick(targets, Qt::Key_Return);
    QCOMPARE(stack->count(), before + 1);

    stack->undo();
    QVERIFY(!step().contains("targets"));
    QCOMPARE(targets->text(), QString());
    QCOMPARE(layers()->summary(), QString("Takes 14 of 14 linear layers of the blocks."));
    stack->redo();
    QCOMPARE(targets->text(), QString("layers\\.1\\.self_attn"));
}

void TestStepLayersEditor::invalidPatternIsKeptButNotApplied() {
    QUndoStack* stack = mDoc->undoStack();
    const int before = stack->count();
    layers()->targetsEdit()->setText("layers\\.(1");
    QVERIFY(!layers()->commit());
    QCOMPARE(stack->count(), before);
    QVERIFY(!step().contains("targets"));
    QVERIFY2(layers()->problem().contains("regular expression"), qPrintable(layers()->problem()));
    QVERIFY(layers()->hasPendingEdits());
    QCOMPARE(layers()->targetsEdit()->text(), QString("layers\\.(1"));
    auto* status = layers()->findChild<QLabel*>("stepLayersStatus");
    QVERIFY(status->text().startsWith("Not applied: "));
    // Typing that fixes it clears the red at once, before it is applied (it stayed until Enter, GUI probe).
    layers()->targetsEdit()->selectAll();
    QTest::keyClicks(layers()->targetsEdit(), "mlp");
    QVERIFY2(!status->text().startsWith("Not applied: "), qPrintable(status->text()));
    QVERIFY(!step().contains("targets"));   // still not applied
    layers()->targetsEdit()->setText("layers\\.(1");
    QVERIFY(!layers()->commit());

    // A pattern std::regex would take exponential time on is refused as a recipe refuses it.
    layers()->targetsEdit()->setText("(a+)+b");
    QVERIFY(!layers()->commit());
    QVERIFY(!layers()->problem().isEmpty());
    QCOMPARE(stack->count(), before);

    layers()->revert();
    QCOMPARE(layers()->targetsEdit()->text(), QString());
    QVERIFY(!layers()->hasPendingEdits());
    QVERIFY(layers()->problem().isEmpty());
}

void TestStepLayersEditor::pendingEditsSurviveAParameterChange() {
    layers()->targetsEdit()->setText("layers\\.(1");
    QVERIFY(!layers()->commit());
    // A parameter edited in the form rewrites the steps (stepsChanged); the unapplied pattern stays.
    mDoc->undoStack()->push(changeStepParameter(mDoc.get(), mDoc->currentVariant(), 0, "bits", 8));
    QCOMPARE(step()["params"]["bits"].get<int>(), 8);
    QCOMPARE(layers()->targetsEdit()->text(), QString("layers\\.(1"));
    QVERIFY(layers()->hasPendingEdits());
    // Fixed, it applies with the new parameter kept.
    layers()->targetsEdit()->setText("layers\\.(1)");
    QVERIFY(layers()->commit());
    QCOMPARE(step()["targets"].get<std::string>(), std::string("layers\\.(1)"));
    QCOMPARE(step()["params"]["bits"].get<int>(), 8);
}

void TestStepLayersEditor::ignoreOnePatternPerLine() {
    layers()->ignoreEdit()->setPlainText("  down_proj \n\nlayers\\.0\\.self_attn\\.o_proj\n");
    QVERIFY(layers()->commit());
    QCOMPARE(step()["ignore"], json({"down_proj", "layers\\.0\\.self_attn\\.o_proj"}));
    QCOMPARE(layers()->summary(), QString("Takes 11 of 14 linear layers of the blocks."));
    layers()->ignoreEdit()->setPlainText("");
    QVERIFY(layers()->commit());
    QVERIFY(!step().contains("ignore"));
}

void TestStepLayersEditor::overridesAddEditReorderRemove() {
    QUndoStack* stack = mDoc->undoStack();
    const int before = stack->count();
    QTableWidget* table = layers()->overridesTable();
    layers()->addOverrideRow();
    QCOMPARE(table->rowCount(), 1);
    QCOMPARE(stack->count(), before);   // an empty row is nothing yet
    QVERIFY(layers()->problem().isEmpty());
    setOverrideRow(0, "layers\\.0\\.", R"({"bits": 8})");
    QCOMPARE(stack->count(), before + 1);
    QCOMPARE(step()["overrides"], json::parse(R"([{"pattern": "layers\\.0\\.", "params": {"bits": 8}}])"));
    QCOMPARE(layers()->summary(), QString("Takes 14 of 14 linear layers of the blocks. Overrides change 7 of them."));

    layers()->addOverrideRow();
    setOverrideRow(1, "mlp", R"({"bits": 3})");
    QCOMPARE(stack->count(), before + 2);
    // The first match applies: block 0's MLP keeps 8 bits, so 7 + 3 layers are overridden.
    QCOMPARE(layers()->summary(), QString("Takes 14 of 14 linear layers of the blocks. Overrides change 10 of them."));
    layers()->moveOverrideRow(1, -1);
    QCOMPARE(stack->count(), before + 3);
    QCOMPARE(step()["overrides"][0]["pattern"].get<std::string>(), std::string("mlp"));
    QCOMPARE(table->item(0, 0)->text(), QString("mlp"));

    // What a run resolves for a layer follows the order: block 0's gate takes the MLP override now.
    const Recipe recipe = Recipe::fromJson({{"steps", json::array({step()})}}, "test");
    QCOMPARE(recipe.steps[0].overrides.front().params["bits"].get<int>(), 3);

    layers()->removeOverrideRow(0);
    QCOMPARE(stack->count(), before + 4);
    QCOMPARE(step()["overrides"].size(), size_t(1));
    QCOMPARE(step()["overrides"][0]["pattern"].get<std::string>(), std::string("layers\\.0\\."));
    stack->undo();
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(table->item(0, 0)->text(), QString("mlp"));
}

void TestStepLayersEditor::overrideParametersAreChecked() {
    QUndoStack* stack = mDoc->undoStack();
    const int before = stack->count();
    layers()->addOverrideRow();
    setOverrideRow(0, "mlp", R"({"bitz": 8})");
    QCOMPARE(stack->count(), before);
    QVERIFY2(layers()->problem().contains("bitz"), qPrintable(layers()->problem()));
    setOverrideRow(0, "mlp", R"({"bits": 99})");
    QCOMPARE(stack->count(), before);
    QVERIFY2(layers()->problem().contains("bits"), qPrintable(layers()->problem()));
    setOverrideRow(0, "mlp", "bits=8");
    QVERIFY2(layers()->problem().contains("not JSON"), qPrintable(layers()->problem()));
    setOverrideRow(0, "mlp", "[8]");
    QVERIFY2(layers()->problem().contains("JSON object"), qPrintable(layers()->problem()));
    // "head" says which layers the step takes: not an override's business.
    setOverrideRow(0, "mlp", R"({"head": "also"})");
    QVERIFY2(layers()->problem().contains("head"), qPrintable(layers()->problem()));
    QCOMPARE(stack->count(), before);
    QVERIFY(!step().contains("overrides"));
    setOverrideRow(0, "mlp", R"({"bits": 8})");
    QCOMPARE(stack->count(), before + 1);
    QVERIFY(layers()->problem().isEmpty());
    // As the core reads them: an empty pattern matches every layer, and {} is an override that sets nothing (warned).
    layers()->overridesTable()->item(0, 0)->setText("");
    QCOMPARE(stack->count(), before + 2);
    QCOMPARE(layers()->summary(), QString("Takes 14 of 14 linear layers of the blocks. Overrides change 14 of them."));
    layers()->overridesTable()->item(0, 1)->setText("{}");
    QCOMPARE(stack->count(), before + 3);
    QVERIFY2(layers()->warning().contains("sets no parameter"), qPrintable(layers()->warning()));
}

void TestStepLayersEditor::patternThatNamesNoLayerWarns() {
    // Valid, so it is applied (the project may be for another model), but a run would stop: said before it runs.
    layers()->targetsEdit()->setText("q_prj");
    QVERIFY(layers()->commit());
    QCOMPARE(step()["targets"].get<std::string>(), std::string("q_prj"));
    QVERIFY2(layers()->warning().contains("leaves no layer"), qPrintable(layers()->warning()));
    QCOMPARE(layers()->summary(), QString("Takes 0 of 14 linear layers of the blocks."));
    layers()->targetsEdit()->setText("q_proj");
    QVERIFY(layers()->commit());
    QVERIFY(layers()->warning().isEmpty());

    layers()->addOverrideRow();
    setOverrideRow(0, "layers\\.7\\.", R"({"bits": 8})");
    QVERIFY2(layers()->warning().contains("matches no layer"), qPrintable(layers()->warning()));
}

void TestStepLayersEditor::externalChangesReload() {
    layers()->targetsEdit()->setText("layers\\.(1");
    QVERIFY(!layers()->commit());
    // The Importance tab sets the targets of the same step: its change wins over the unapplied text.
    mDoc->undoStack()->push(setStepTargets(mDoc.get(), mDoc->currentVariant(), 0, "^(?:model\\.layers\\.0\\.mlp\\.)"));
    QCOMPARE(layers()->targetsEdit()->text(), QString("^(?:model\\.layers\\.0\\.mlp\\.)"));
    QVERIFY(!layers()->hasPendingEdits());
    QCOMPARE(layers()->summary(), QString("Takes 3 of 14 linear layers of the blocks."));

    // Another step shows its own fields; pending text of the first does not leak into it.
    layers()->targetsEdit()->setText("layers\\.(1");
    QVERIFY(!layers()->commit());
    QVERIFY(mEditor->addStep("prune.magnitude"));
    mEditor->selectStep(1);
    QCOMPARE(layers()->targetsEdit()->text(), QString());
    QVERIFY(!layers()->hasPendingEdits());
    // No step selected: the box is off.
    mEditor->selectStep(-1);
    QVERIFY(!layers()->isEnabled());
}

void TestStepLayersEditor::headOnlyStep() {
    mDoc->undoStack()->push(changeStepParameter(mDoc.get(), mDoc->currentVariant(), 0, "head", "only"));
    QCOMPARE(layers()->summary(), QString("Takes the output head only."));
    layers()->targetsEdit()->setText("mlp");
    QVERIFY(layers()->commit());
    QVERIFY2(layers()->warning().contains("\"only\""), qPrintable(layers()->warning()));
}

void TestStepLayersEditor::layerNamesPastARenamingStep() {
    mDoc->undoStack()->push(new AddStep(mDoc.get(), mDoc->currentVariant(), defaultStep("prune.layers"), 0));
    mEditor->selectStep(1);
    QCOMPARE(step(1).value("method", ""), std::string("quantize.rtn"));
    layers()->targetsEdit()->setText("layers\\.9\\.");
    QVERIFY(layers()->commit());
    QVERIFY(layers()->warning().isEmpty());   // block numbers after the removal are checked by the run
    QVERIFY2(layers()->summary().contains("step 1 (prune.layers)"), qPrintable(layers()->summary()));
}

void TestStepLayersEditor::newRowIsIncompleteNotWrong() {
    QUndoStack* stack = mDoc->undoStack();
    const int before = stack->count();
    layers()->addOverrideRow();
    // Filled in column order: the pattern first. Not applied, not an error either.
    layers()->overridesTable()->item(0, 0)->setText("mlp");
    QCOMPARE(stack->count(), before);
    QVERIFY(layers()->problem().isEmpty());
    QVERIFY2(layers()->note().contains("not complete"), qPrintable(layers()->note()));
    QPushButton* revert = nullptr;
    for (QPushButton* b : layers()->findChildren<QPushButton*>())
        if (b->text() == "Revert") revert = b;
    QVERIFY(revert);
    QVERIFY2(revert->isEnabled(), "an incomplete row is an edit Revert takes back (GUI probe)");
    auto* status = layers()->findChild<QLabel*>("stepLayersStatus");
    QVERIFY(!status->text().startsWith("Not applied"));
    layers()->overridesTable()->item(0, 1)->setText(R"({"bits": 8})");
    QCOMPARE(stack->count(), before + 1);
    QVERIFY(layers()->note().isEmpty());
    // Complete once, it is an override like any other: clearing its pattern now means "every layer".
    layers()->overridesTable()->item(0, 0)->setText("");
    QCOMPARE(stack->count(), before + 2);
    QCOMPARE(step()["overrides"][0]["pattern"].get<std::string>(), std::string());
}

void TestStepLayersEditor::storedEmptyPatternDoesNotBlockOtherEdits() {
    json edited = step();
    edited["overrides"] = json::parse(R"([{"pattern": "", "params": {"bits": 8}}])");
    mDoc->undoStack()->push(new ReplaceStep("test", mDoc.get(), mDoc->currentVariant(), 0, edited));
    QVERIFY(layers()->problem().isEmpty());
    QCOMPARE(layers()->summary(), QString("Takes 14 of 14 linear layers of the blocks. Overrides change 14 of them."));
    layers()->targetsEdit()->setText("mlp");
    QVERIFY(layers()->commit());
    QCOMPARE(step()["targets"].get<std::string>(), std::string("mlp"));
    QCOMPARE(step()["overrides"], edited["overrides"]);
}

void TestStepLayersEditor::overrideThatChangesNothingWarns() {
    layers()->targetsEdit()->setText("self_attn");
    QVERIFY(layers()->commit());
    layers()->addOverrideRow();
    setOverrideRow(0, "mlp\\.down_proj", R"({"bits": 8})");   // names layers, none of them this step's
    QVERIFY2(layers()->warning().contains("Override 1 (mlp\\.down_proj) changes none"), qPrintable(layers()->warning()));
    layers()->addOverrideRow();
    setOverrideRow(1, "layers\\.0\\.self_attn\\.q_proj", R"({"bits": 3})");
    layers()->addOverrideRow();
    setOverrideRow(2, "q_proj", R"({"bits": 2})");
    // Override 2 takes block 0's q_proj first, so override 3 still has block 1's: only override 1 is warned of.
    QCOMPARE(layers()->summary(), QString("Takes 8 of 14 linear layers of the blocks. Overrides change 2 of them."));
    QVERIFY(!layers()->warning().contains("Override 2"));
    QVERIFY(!layers()->warning().contains("Override 3"));
    layers()->moveOverrideRow(2, -1);   // q_proj first: it takes both, the exact one below it changes nothing
    QVERIFY2(layers()->warning().contains("Override 3 (layers\\.0\\.self_attn\\.q_proj) changes none"), qPrintable(layers()->warning()));
}

void TestStepLayersEditor::eachStepIsCheckedOnItsOwn() {
    QVERIFY(mEditor->addStep("quantize.rtn"));
    mEditor->selectStep(0);
    layers()->targetsEdit()->setText("blk\\.0\\.");   // another format's names: matches nothing here
    QVERIFY(layers()->commit());
    QVERIFY(layers()->warning().contains("leaves no layer"));
    mEditor->selectStep(1);
    layers()->targetsEdit()->setText("zzz");
    QVERIFY(layers()->commit());
    // Step 1's problem no longer hides step 2's.
    QVERIFY2(layers()->warning().contains("'zzz' leaves no layer"), qPrintable(layers()->warning()));
}

void TestStepLayersEditor::wholeBlockMethodsReadNoPatterns() {
    QVERIFY(mEditor->addStep("prune.layers"));
    mEditor->selectStep(1);
    QVERIFY2(layers()->summary().contains("does not read targets"), qPrintable(layers()->summary()));
    QVERIFY(layers()->warning().isEmpty());
    layers()->targetsEdit()->setText("mlp");
    QVERIFY(layers()->commit());
    QVERIFY2(layers()->warning().contains("does not read"), qPrintable(layers()->warning()));
    // The core agrees: no layers are checked past it.
    QVERIFY(!MethodRegistry::instance().find("prune.layers")->readsLayerPatterns());
    QVERIFY(!MethodRegistry::instance().find("distill.kd")->readsLayerPatterns());
    QVERIFY(MethodRegistry::instance().find("prune.heads")->readsLayerPatterns());
}

void TestStepLayersEditor::headAndChannelPruningCountBlocks() {
    QVERIFY(mEditor->addStep("prune.heads"));
    mEditor->selectStep(1);
    QCOMPARE(layers()->summary(), QString("Takes 2 of 2 blocks (those whose self_attn.q_proj the patterns take)."));
    layers()->targetsEdit()->setText("layers\\.1\\.");
    QVERIFY(layers()->commit());
    QCOMPARE(layers()->summary(), QString("Takes 1 of 2 blocks (those whose self_attn.q_proj the patterns take)."));
    // An override is read at the block's q_proj: one for its k_proj changes no block (the run would ignore it).
    layers()->targetsEdit()->setText("");
    QVERIFY(layers()->commit());
    layers()->addOverrideRow();
    setOverrideRow(0, "layers\\.0\\.self_attn\\.k_proj", R"({"ratio": 0.5})");
    QVERIFY2(layers()->warning().contains("changes none of the blocks"), qPrintable(layers()->warning()));
    setOverrideRow(0, "layers\\.0\\.", R"({"ratio": 0.5})");
    QCOMPARE(layers()->summary(),
             QString("Takes 2 of 2 blocks (those whose self_attn.q_proj the patterns take). An override changes 1 of them."));

    QVERIFY(mEditor->addStep("prune.channels"));
    mEditor->selectStep(2);
    QCOMPARE(layers()->summary(), QString("Takes 2 of 2 blocks (those whose mlp.down_proj the patterns take)."));
}

void TestStepLayersEditor::revertDoesNotApplyWhatItReverts() {
    mEditor->show();
    QVERIFY(QTest::qWaitForWindowExposed(mEditor.get()));
    QUndoStack* stack = mDoc->undoStack();
    const int before = stack->count();
    QLineEdit* targets = layers()->targetsEdit();
    targets->setFocus();
    QTest::keyClicks(targets, "mlp");   // typed, no Enter
    QPushButton* revert = nullptr;
    for (auto* b : layers()->findChildren<QPushButton*>())
        if (b->text() == "Revert") revert = b;
    QVERIFY(revert && revert->text() == "Revert");
    QVERIFY(revert->isEnabled());   // typed text differs from the step
    QTest::mouseClick(revert, Qt::LeftButton);
    QCOMPARE(stack->count(), before);
    QVERIFY(!step().contains("targets"));
    QCOMPARE(targets->text(), QString());
    QVERIFY(!revert->isEnabled());
}

void TestStepLayersEditor::ignoreAppliesWhenFocusLeaves() {
    mEditor->show();
    QVERIFY(QTest::qWaitForWindowActive(mEditor.get()));
    QPlainTextEdit* ignore = layers()->ignoreEdit();
    ignore->setFocus();
    QTRY_VERIFY(ignore->hasFocus());
    QTest::keyClicks(ignore, "down_proj");
    QVERIFY(!step().contains("ignore"));
    layers()->targetsEdit()->setFocus();   // as Tab or a click elsewhere moves it
    QTRY_VERIFY(step().contains("ignore"));
    QCOMPARE(step()["ignore"], json({"down_proj"}));
}

void TestStepLayersEditor::pendingEditsStayWithTheirStep() {
    QVERIFY(mEditor->addStep("quantize.rtn"));   // two identical steps
    mEditor->selectStep(0);
    layers()->targetsEdit()->setText("x(");
    QVERIFY(!layers()->commit());
    QVERIFY(layers()->hasPendingEdits());
    // Step 1 removed: the step now shown at row 0 is the other one, and shows its own (empty) fields.
    QVERIFY(mEditor->removeSelectedStep());
    QCOMPARE(mEditor->stepCount(), 1);
    QCOMPARE(layers()->targetsEdit()->text(), QString());
    QVERIFY(!layers()->hasPendingEdits());
    // And a move: the edit does not travel to the step that takes its row.
    QVERIFY(mEditor->addStep("prune.magnitude"));
    mEditor->selectStep(0);
    layers()->targetsEdit()->setText("x(");
    QVERIFY(!layers()->commit());
    QVERIFY(mEditor->moveSelectedStep(+1));
    mEditor->selectStep(0);
    QCOMPARE(QString::fromStdString(step(0).value("method", "")), QString("prune.magnitude"));
    QCOMPARE(layers()->targetsEdit()->text(), QString());
    // A variant switch: the other variant's step shows its own fields.
    layers()->targetsEdit()->setText("x(");
    QVERIFY(!layers()->commit());
    QVERIFY(mEditor->newVariant());
    QVERIFY(mEditor->addStep("prune.magnitude"));
    mEditor->selectStep(0);
    QCOMPARE(layers()->targetsEdit()->text(), QString());
}

// Regression (GUI probe): edits that could not be applied were lost when another step was selected. They are kept with
// their step, marked in the list, come back with it, and are listed before saving or closing.
void TestStepLayersEditor::editsNotAppliedAreKeptWithTheirStep() {
    QVERIFY(mEditor->addStep("prune.magnitude"));
    mEditor->selectStep(0);
    layers()->targetsEdit()->setText("x(");
    layers()->ignoreEdit()->setPlainText("lm_head");
    layers()->addOverrideRow();
    layers()->overridesTable()->item(0, 0)->setText("mlp");   // no parameters yet: incomplete
    QVERIFY(!layers()->commit());
    mEditor->selectStep(1);
    QCOMPARE(layers()->targetsEdit()->text(), QString());
    QVERIFY(!layers()->hasPendingEdits());
    QVERIFY(layers()->keepsEditsFor(mDoc->currentVariant(), 0));
    QVERIFY2(mEditor->stepList()->item(0)->text().startsWith("⚠ Layers edits not applied"), qPrintable(mEditor->stepList()->item(0)->text()));
    QVERIFY(!mEditor->stepList()->item(1)->text().contains("not applied"));
    // Another step's parameter changed meanwhile: the kept edits still belong to step 1.
    mDoc->undoStack()->push(new ReplaceStep("p", mDoc.get(), mDoc->currentVariant(), 1,
                                            json{{"method", "prune.magnitude"}, {"params", {{"sparsity", 0.25}}}}));
    QCOMPARE(mEditor->unappliedEdits().size(), qsizetype(1));
    QVERIFY2(mEditor->unappliedEdits().front().contains("step 1:"), qPrintable(mEditor->unappliedEdits().front()));
    mEditor->selectStep(0);
    QCOMPARE(layers()->targetsEdit()->text(), QString("x("));
    QCOMPARE(layers()->ignoreEdit()->toPlainText(), QString("lm_head"));
    QCOMPARE(layers()->overridesTable()->rowCount(), 1);
    QCOMPARE(layers()->overridesTable()->item(0, 0)->text(), QString("mlp"));
    QVERIFY(layers()->hasPendingEdits());
    QVERIFY(!layers()->problem().isEmpty());
    QVERIFY(!layers()->keepsEditsFor(mDoc->currentVariant(), 0));
    QVERIFY(!mEditor->stepList()->item(0)->text().contains("not applied"));
    QVERIFY(!step(0).contains("targets"));   // never applied
    // Fixed and applied once back: what was kept is what is applied.
    layers()->overridesTable()->item(0, 1)->setText("{\"bits\": 8}");
    layers()->targetsEdit()->setText("layers");
    QVERIFY(layers()->commit());
    QCOMPARE(step(0)["targets"].get<std::string>(), std::string("layers"));
    QCOMPARE(step(0)["ignore"], json({"lm_head"}));
    QCOMPARE(step(0)["overrides"].size(), size_t(1));
    QVERIFY(mEditor->unappliedEdits().isEmpty());
    // Kept edits whose step was changed from elsewhere (its layers set by undo or the budget) no longer apply.
    layers()->targetsEdit()->setText("y(");
    QVERIFY(!layers()->commit());
    mEditor->selectStep(1);
    QVERIFY(layers()->keepsEditsFor(mDoc->currentVariant(), 0));
    mDoc->undoStack()->undo();   // the layers of step 1 back to none
    QVERIFY(!layers()->keepsEditsFor(mDoc->currentVariant(), 0));
    QVERIFY(!mEditor->stepList()->item(0)->text().contains("not applied"));
    QVERIFY(mEditor->unappliedEdits().isEmpty());
    // Another project: nothing of this one is kept.
    layers()->targetsEdit()->setText("z(");
    QVERIFY(!layers()->commit());
    auto other = ProjectDocument::openModel(mModelPath);
    mEditor->setDocument(other.get());
    QVERIFY(layers()->keptEdits().empty());
    mEditor->setDocument(mDoc.get());
}

// Regression (GUI probe): pruning after quantizing the same layers (their quantization lost) was said only by a run.
void TestStepLayersEditor::pruningQuantizedLayersWarns() {
    QVERIFY(mEditor->addStep("prune.magnitude"));   // after step 1's RTN over every layer
    mEditor->selectStep(1);
    QVERIFY2(layers()->warning().contains("14 of the layers this step takes are quantized before it (by step 1)"),
             qPrintable(layers()->warning()));
    layers()->targetsEdit()->setText("mlp");
    QVERIFY(layers()->commit());
    QVERIFY2(layers()->warning().contains("6 of the layers"), qPrintable(layers()->warning()));
    // Apart, nothing is lost.
    mDoc->undoStack()->push(new ReplaceStep("t", mDoc.get(), mDoc->currentVariant(), 0,
                                            json{{"method", "quantize.rtn"}, {"targets", "self_attn"}}));
    mEditor->selectStep(1);
    QVERIFY2(!layers()->warning().contains("quantiz"), qPrintable(layers()->warning()));
    // Pruning first, then quantizing: nothing is lost either.
    QVERIFY(mEditor->moveSelectedStep(-1));
    for (int i : {0, 1}) {
        mEditor->selectStep(i);
        QVERIFY2(!layers()->warning().contains("quantiz"), qPrintable(layers()->warning()));
    }
}

void TestStepLayersEditor::pendingEditsAreAppliedBeforeSaving() {
    layers()->targetsEdit()->setText("mlp");   // typed, no Enter
    QVERIFY(!step().contains("targets"));
    QVERIFY(mEditor->commitPendingEdits());
    QCOMPARE(step()["targets"].get<std::string>(), std::string("mlp"));
    layers()->targetsEdit()->setText("x(");
    QVERIFY(!mEditor->commitPendingEdits());   // the caller asks before dropping it
    QCOMPARE(step()["targets"].get<std::string>(), std::string("mlp"));
}

// Regression (GUI probe): Tab followed the order widgets were made in, so it jumped from the steps to the variant row,
// the methods, the Layers box and back, and reached the parameters only after some 19 presses.
void TestStepLayersEditor::tabGoesPaneByPane() {
    mEditor->show();
    QVERIFY(QTest::qWaitForWindowActive(mEditor.get()));
    QWidget* start = mEditor->findChild<QComboBox*>("variantChooser");
    QVERIFY(start);
    start->setFocus();
    QTRY_VERIFY(start->hasFocus());
    QList<QWidget*> visited{start};
    for (int i = 0; i < 40; ++i) {
        QTest::keyClick(QApplication::focusWidget(), Qt::Key_Tab);
        QWidget* now = QApplication::focusWidget();
        if (!now || now == start) break;
        visited << now;
    }
    const auto at = [&](QWidget* w) { return visited.indexOf(w); };
    QWidget* bits = mEditor->paramForm()->editor("bits");
    QVERIFY(bits);
    const auto within = [&](QWidget* parent) {
        for (int i = 0; i < visited.size(); ++i)
            if (visited[i] == parent || parent->isAncestorOf(visited[i])) return i;
        return -1;
    };
    QVERIFY(at(mEditor->stepList()) > 0);
    QVERIFY2(at(mEditor->stepList()) < within(bits), "the steps come before the parameters");
    QVERIFY2(within(bits) >= 0 && within(bits) < at(layers()->targetsEdit()), "the parameters come before the layers");
    QVERIFY2(at(layers()->targetsEdit()) < at(layers()->ignoreEdit()), "targets, then ignore");
    // The methods pane, then straight into the parameters (the layers box came between them).
    QVERIFY2(at(mEditor->findChild<QScrollArea*>()) + 1 == within(bits), "the first parameter follows the form's pane");
}

// Regression (GUI probe): Escape in the Layers box was the window's (Run ▸ Cancel) and typed edits stayed, to be
// reverted with the mouse. It reverts the fields while they differ from the step, and is the window's otherwise.
void TestStepLayersEditor::escapeRevertsEditsNotApplied() {
    auto* cancel = new QAction(mEditor.get());   // as the main window's Run ▸ Cancel
    cancel->setShortcut(QKeySequence(Qt::Key_Escape));
    mEditor->addAction(cancel);
    QSignalSpy cancelled(cancel, &QAction::triggered);
    QSignalSpy edited(layers(), &StepLayersEditor::stepEdited);
    mEditor->show();
    QVERIFY(QTest::qWaitForWindowActive(mEditor.get()));
    QLineEdit* targets = layers()->targetsEdit();
    targets->setFocus();
    QTRY_VERIFY(targets->hasFocus());
    QTest::keyClicks(targets, "mlp");
    QTest::keyClick(targets, Qt::Key_Escape);
    QCOMPARE(targets->text(), QString());
    QVERIFY(!layers()->hasPendingEdits());
    QCOMPARE(cancelled.size(), 0);
    targets->clearFocus();   // nothing is applied on leaving: the text is the step's again
    QCOMPARE(edited.size(), 0);
    QVERIFY(!step().contains("targets"));

    layers()->ignoreEdit()->setFocus();
    QTRY_VERIFY(layers()->ignoreEdit()->hasFocus());
    QTest::keyClicks(layers()->ignoreEdit(), "(");   // not a valid pattern: pending, shown in red
    QTest::keyClick(layers()->ignoreEdit(), Qt::Key_Escape);
    QCOMPARE(layers()->ignoreEdit()->toPlainText(), QString());
    QCOMPARE(cancelled.size(), 0);

    QTest::keyClick(layers()->ignoreEdit(), Qt::Key_Escape);   // nothing to revert: the window's Escape
    QCOMPARE(cancelled.size(), 1);
    QCOMPARE(edited.size(), 0);
}

QTEST_MAIN(TestStepLayersEditor)
#include "test_step_layers_editor.moc"
