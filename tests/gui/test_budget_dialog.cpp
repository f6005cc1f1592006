// Budget solver dialog: solves on a worker thread (waits on its signal), shows one row per layer with a chosen
// width from the candidates, meets the target, and Apply adds the proposed recipe as a variant (one undo step).
#include <QTableWidget>
#include <QtTest/QtTest>

#include <set>

#include "app/commands/settings_commands.h"
#include "app/gui/budget_dialog.h"
#include "app/gui/project_document.h"
#include "app/gui/settings_dialog.h"
#include "core/analysis/budget.h"
#include "core/model/model.h"
#include "tests/support/test_paths.h"

using namespace cwb;

class TestBudgetDialog : public QObject {
    Q_OBJECT
private slots:
    void init();
    void cleanup();
    void parsesCandidateBits();
    void sizeAndBitsAreOneBudget();
    void measuresWithTheChosenQuantizer();
    void solvesAndAppliesAsVariant();
    void fusedPlanFromTheDialog();
    void headPlannedFromTheDialog();
    void cancelLeavesNoPlan();
    void unreachableTargetFailsWithAMessage();
    void sizeTargetMarksThePlanStale();

private:
    std::unique_ptr<ProjectDocument> mDoc;
};

void TestBudgetDialog::init() {
    const QString model = test::fixture("models/stories260K.gguf");
    const QString text = test::fixture("text/tinystories_v2_valid_first100.txt");
    if (model.isEmpty() || text.isEmpty()) {
        if (test::fixturesRequired()) QFAIL("fixtures models/stories260K.gguf and text/tinystories_v2_valid_first100.txt needed (CWB_REQUIRE_FIXTURES=1)");
        QSKIP("fixtures models/stories260K.gguf and text/tinystories_v2_valid_first100.txt needed");
    }
    mDoc = ProjectDocument::openModel(model);
    ProjectSettings s = mDoc->project().settings();
    s.calibration = SettingsDialog::reference(text);
    mDoc->undoStack()->push(changeSettings(mDoc.get(), s));
}

void TestBudgetDialog::cleanup() { mDoc.reset(); }

void TestBudgetDialog::parsesCandidateBits() {
    QString error;
    QCOMPARE(BudgetDialog::parseBits("8, 4,4", &error), (std::vector<int>{4, 8}));
    QCOMPARE(BudgetDialog::parseBits("3,4,8", &error), (std::vector<int>{3, 4, 8}));
    QVERIFY(BudgetDialog::parseBits("4,9", &error).empty());
    QVERIFY2(error.contains("\"9\""), qPrintable(error));
    QVERIFY(BudgetDialog::parseBits("", &error).empty());
    QVERIFY(!error.isEmpty());
}

void TestBudgetDialog::sizeAndBitsAreOneBudget() {
    BudgetDialog dialog(mDoc.get());
    double parameters = 0;
    for (const auto& layer : mDoc->model()->linearLayers()) parameters += double(mDoc->model()->tensor(layer + ".weight").elementCount());
    const double mibPerBit = parameters / 8.0 / (1024.0 * 1024.0);
    dialog.setTargetBitsPerWeight(6.0);
    QVERIFY(std::abs(dialog.targetMiB() - 6.0 * mibPerBit) < 1e-3);
    dialog.setTargetMiB(5.0 * mibPerBit);
    QVERIFY(std::abs(dialog.targetBitsPerWeight() - 5.0) < 1e-3);
}

void TestBudgetDialog::measuresWithTheChosenQuantizer() {
    BudgetDialog dialog(mDoc.get());
    dialog.setTargetBitsPerWeight(6.0);
    dialog.setCandidateBits("4,8");
    dialog.setWindowSize(2, 32);
    dialog.setMethod("quantize.gptq");
    QSignalSpy finished(&dialog, &BudgetDialog::solveFinished);
    QSignalSpy started(&dialog, &BudgetDialog::solveStarted);   // the window's status bar shows it (it said "idle")
    QVERIFY(dialog.solve(false));
    QCOMPARE(started.size(), 1);
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    QVERIFY(dialog.plan());
    QCOMPARE(QString::fromStdString(dialog.plan()->recipe.steps.at(0).method), QStringLiteral("quantize.gptq"));
}

void TestBudgetDialog::fusedPlanFromTheDialog() {
    BudgetDialog dialog(mDoc.get());
    dialog.setTargetBitsPerWeight(6.0);
    dialog.setCandidateBits("4,8");
    dialog.setWindowSize(2, 32);
    dialog.setFusedSharedInputs(true);
    QSignalSpy finished(&dialog, &BudgetDialog::solveFinished);
    QVERIFY(dialog.solve(false));
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    const BudgetPlan* plan = dialog.plan();
    QVERIFY(plan);
    for (int64_t b = 0; b < mDoc->model()->spec.layers; ++b) {
        const auto width = [&](const char* n) { return plan->bits.at(names::llamaLayer(b, n)); };
        QCOMPARE(width("self_attn.k_proj"), width("self_attn.q_proj"));
        QCOMPARE(width("self_attn.v_proj"), width("self_attn.q_proj"));
        QCOMPARE(width("mlp.up_proj"), width("mlp.gate_proj"));
    }
    // The same solve without the constraint splits some projection: the checkbox did take effect.
    const BudgetPlan fused = *plan;
    dialog.setFusedSharedInputs(false);
    QVERIFY(dialog.solve(false));
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    QVERIFY(dialog.plan());
    bool split = false;
    for (int64_t b = 0; b < mDoc->model()->spec.layers; ++b) {
        const auto width = [&](const char* n) { return dialog.plan()->bits.at(names::llamaLayer(b, n)); };
        split = split || width("self_attn.k_proj") != width("self_attn.q_proj") ||
                width("self_attn.v_proj") != width("self_attn.q_proj") || width("mlp.up_proj") != width("mlp.gate_proj");
    }
    QVERIFY2(split, "without the constraint the plan keeps every shared input at one width: the test proves nothing");
    QVERIFY(dialog.plan()->bits != fused.bits);
}

// "The output head too": the size target counts the head, and the plan and its recipe take it.
void TestBudgetDialog::headPlannedFromTheDialog() {
    BudgetDialog dialog(mDoc.get());
    dialog.setTargetBitsPerWeight(6.0);
    const double withoutHead = dialog.targetMiB();
    dialog.setIncludeHead(true);
    const Model& model = *mDoc->model();
    const double headMiBPerBit = double(model.spec.vocab * model.spec.hidden) / 8.0 / (1024.0 * 1024.0);
    QVERIFY(std::abs(dialog.targetMiB() - (withoutHead + 6.0 * headMiBPerBit)) < 1e-5);
    QVERIFY(std::abs(dialog.targetBitsPerWeight() - 6.0) < 1e-9);   // the bits target stays; the size follows it
    dialog.setCandidateBits("4,8");
    dialog.setWindowSize(2, 32);
    QSignalSpy finished(&dialog, &BudgetDialog::solveFinished);
    QVERIFY(dialog.solve(false));
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    QVERIFY(dialog.plan());
    QCOMPARE(dialog.plan()->bits.count(names::kHead), size_t(1));
    QCOMPARE(QString::fromStdString(dialog.plan()->recipe.steps.at(0).params.value("head", "")), QStringLiteral("also"));
}

void TestBudgetDialog::solvesAndAppliesAsVariant() {
    BudgetDialog dialog(mDoc.get());
    dialog.setTargetBitsPerWeight(6.0);
    dialog.setCandidateBits("4,8");
    dialog.setWindowSize(2, 32);
    QSignalSpy finished(&dialog, &BudgetDialog::solveFinished);
    QVERIFY(dialog.solve(false));
    QVERIFY(dialog.isSolving());
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    const BudgetPlan* plan = dialog.plan();
    QVERIFY(plan);

    // One row per block linear, each at one of the candidate widths; the table shows the plan.
    const std::vector<std::string> linears = mDoc->model()->linearLayers();
    QCOMPARE(dialog.table()->rowCount(), int(plan->layers.size()));
    QVERIFY(plan->layers.size() >= 7);
    std::set<int> used;
    double bits = 0, params = 0;
    for (int row = 0; row < dialog.table()->rowCount(); ++row) {
        const std::string layer = dialog.table()->item(row, 0)->text().toStdString();
        const int chosen = dialog.table()->item(row, 2)->text().toInt();
        QCOMPARE(chosen, plan->bits.at(layer));
        QVERIFY(chosen == 4 || chosen == 8);
        used.insert(chosen);
        const BudgetLayer& l = plan->layers[size_t(row)];
        for (const auto& o : l.options)
            if (o.bits == chosen) bits += o.bitsPerWeight * double(l.parameters);
        params += double(l.parameters);
    }
    // A target between the two widths mixes them, and the plan's bits per weight is what its rows add up to.
    QCOMPARE(used, (std::set<int>{4, 8}));
    QVERIFY(plan->bitsPerWeight <= 6.0 + 1e-9);
    QVERIFY(std::abs(bits / params - plan->bitsPerWeight) < 1e-9);
    QVERIFY2(dialog.summary().contains(QString::number(plan->bitsPerWeight, 'f', 3)), qPrintable(dialog.summary()));

    // Apply: a new current variant holding exactly the proposed recipe; undo removes it.
    const int variantsBefore = int(mDoc->project().variants().size());
    const QString name = dialog.applyAsVariant();
    QVERIFY2(!name.isEmpty(), qPrintable(dialog.lastError()));
    QCOMPARE(mDoc->currentVariant(), name);
    QCOMPARE(mDoc->project().variant(name.toStdString()).recipe, plan->recipe.toJson());
    QVERIFY(!plan->recipe.steps.empty() && !plan->recipe.steps[0].overrides.empty());
    QVERIFY(dialog.applyAsVariant(name).isEmpty());   // the same name again is refused
    QVERIFY(dialog.lastError().contains("already exists"));
    mDoc->undoStack()->undo();
    QCOMPARE(int(mDoc->project().variants().size()), variantsBefore);
    QVERIFY(!mDoc->project().hasVariant(name.toStdString()));
    QVERIFY2(name.startsWith("budget-6bpw"), qPrintable(name));

    // Regression: after the target changed, Apply still applied the old plan, named after the new target.
    dialog.setTargetBitsPerWeight(3.0);
    QVERIFY(dialog.applyAsVariant().isEmpty());
    QVERIFY2(dialog.lastError().contains("Solve again"), qPrintable(dialog.lastError()));
    QVERIFY(!mDoc->project().hasVariant("budget-3bpw"));
}

// Regression (GUI probe): a size typed into the MiB box changed the target without marking the plan out of date, and
// Apply added the old plan.
void TestBudgetDialog::sizeTargetMarksThePlanStale() {
    BudgetDialog dialog(mDoc.get());
    dialog.setTargetBitsPerWeight(6.0);
    dialog.setCandidateBits("4,8");
    dialog.setWindowSize(2, 32);
    QSignalSpy finished(&dialog, &BudgetDialog::solveFinished);
    QVERIFY(dialog.solve(false));
    QVERIFY(finished.wait(120000));
    QVERIFY(dialog.plan());
    dialog.setTargetMiB(dialog.targetMiB() * 0.9);
    QVERIFY(dialog.applyAsVariant().isEmpty());
    QVERIFY2(dialog.lastError().contains("Solve again"), qPrintable(dialog.lastError()));
    QVERIFY(mDoc->project().variants().empty());
}

void TestBudgetDialog::cancelLeavesNoPlan() {
    BudgetDialog dialog(mDoc.get());
    dialog.setCandidateBits("3,4,8");
    dialog.setWindowSize(4, 64);
    QSignalSpy finished(&dialog, &BudgetDialog::solveFinished);
    QVERIFY(dialog.solve(false));
    dialog.cancel();
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), false);
    QVERIFY(!dialog.plan());
    QVERIFY(dialog.applyAsVariant().isEmpty());
    QVERIFY(mDoc->project().variants().empty());
}

void TestBudgetDialog::unreachableTargetFailsWithAMessage() {
    BudgetDialog dialog(mDoc.get());
    dialog.setTargetBitsPerWeight(2.0);   // below what 4 bits with group scales can reach
    dialog.setCandidateBits("4,8");
    dialog.setWindowSize(2, 32);
    // Said before any layer is measured (it used to fail after the whole measuring pass).
    QSignalSpy finished(&dialog, &BudgetDialog::solveFinished);
    QVERIFY(!dialog.solve(false));
    QVERIFY(!dialog.isSolving());
    QVERIFY(!dialog.plan());
    QVERIFY2(dialog.lastError().contains("below what"), qPrintable(dialog.lastError()));
    // The dialog's own defaults are a target that can be met (4.5 bpw was below 4-bit g32's 4.667).
    BudgetDialog defaults(mDoc.get());
    QVERIFY(defaults.targetBitsPerWeight() >= 4.667);
    // Invalid candidates are refused before any work starts.
    dialog.setCandidateBits("4,12");
    QVERIFY(!dialog.solve(false));
    QVERIFY(dialog.lastError().contains("12"));
}

QTEST_MAIN(TestBudgetDialog)
#include "test_budget_dialog.moc"
