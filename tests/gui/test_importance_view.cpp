// ImportanceView. Heatmap pick → pipeline: clicking cells of the importance map picks layers (Ctrl toggles, Shift
// adds the row), and the picked layers become a step's `targets` or a per-layer bits override, each one undo step.
// Per-channel kinds show a histogram of one block's channel scores.
#include <QComboBox>
#include <QListWidget>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <regex>
#include <set>

#include "app/commands/step_commands.h"
#include "app/gui/importance_view.h"
#include "app/gui/layer_pick_bar.h"
#include "app/gui/pipeline_editor.h"
#include "app/gui/project_document.h"
#include "core/analysis/importance.h"
#include "core/compress/pipeline.h"
#include "core/model/model.h"
#include "tests/support/synthetic_models.h"
#include "widgets/importance_heatmap.h"
#include "widgets/score_histogram.h"

using namespace cwb;
using nlohmann::json;

namespace {

ImportanceMap sensitivityMap(const Model& model) {
    ImportanceMap map;
    map.kind = "linears.sensitivity";
    for (int64_t l = 0; l < model.spec.layers; ++l) map.rowLabels.push_back("block " + std::to_string(l));
    for (const auto& layer : model.linearLayers()) {
        const std::string label = layer.substr(layer.rfind('.') + 1);
        if (std::find(map.columnLabels.begin(), map.columnLabels.end(), label) == map.columnLabels.end()) map.columnLabels.push_back(label);
    }
    for (size_t i = 0; i < map.rowLabels.size() * map.columnLabels.size(); ++i) map.values.push_back(double(i));
    return map;
}

std::set<std::string> matching(const std::string& pattern, const std::vector<std::string>& layers) {
    std::set<std::string> out;
    const std::regex re(pattern);
    for (const auto& l : layers)
        if (std::regex_search(l, re)) out.insert(l);
    return out;
}

} // namespace

class TestImportanceView : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void cleanup();
    void clicksPickLayers();
    void pickedLayersBecomeStepTargets();
    void pickedLayersGetABitsOverride();
    void headCellsPickTheAttentionGroup();
    void channelKindsShowAHistogram();
    void windowBoxesShowTheStoredMapsWindows();
    void sensitivityProbesOfferTheVariantsSteps();

private:
    void click(int row, int column, Qt::KeyboardModifiers modifiers);
    QTemporaryDir mDir;
    QString mModelPath;
    std::unique_ptr<ProjectDocument> mDoc;
    std::unique_ptr<ImportanceView> mView;
    std::unique_ptr<PipelineEditor> mEditor;
};

void TestImportanceView::initTestCase() {
    QVERIFY(mDir.isValid());
    mModelPath = mDir.filePath("tiny.gguf");
    const ArchSpec spec = test::tinyLlamaSpec();
    test::writeGguf(mModelPath.toStdString(), spec, test::randomWeights(spec, 3), ggml::Type::F32);
}

void TestImportanceView::init() {
    mDoc = ProjectDocument::openModel(mModelPath);
    mEditor = std::make_unique<PipelineEditor>();
    mEditor->setDocument(mDoc.get());
    QVERIFY(mEditor->addStep("quantize.rtn"));
    QVERIFY(mEditor->addStep("prune.magnitude"));
    mDoc->setImportance(sensitivityMap(*mDoc->model()));
    mView = std::make_unique<ImportanceView>();
    mView->setDocument(mDoc.get());
    mView->setKind("linears.sensitivity");
    mView->resize(900, 500);
    mView->show();
    QVERIFY(QTest::qWaitForWindowExposed(mView.get()));
}

void TestImportanceView::cleanup() {
    mView.reset();
    mEditor.reset();
    mDoc.reset();
}

void TestImportanceView::click(int row, int column, Qt::KeyboardModifiers modifiers) {
    ImportanceHeatmap* heatmap = mView->heatmap();
    const QPoint center = heatmap->cellCenter(row, column);
    QWidget* target = heatmap->childAt(center);
    QVERIFY(target);
    QTest::mouseClick(target, Qt::LeftButton, modifiers, target->mapFrom(heatmap, center));
}

void TestImportanceView::clicksPickLayers() {
    LayerPickBar* bar = mView->pickBar();
    const ImportanceMap* map = mDoc->project().importance("linears.sensitivity");
    const std::string col0 = map->columnLabels[0], col1 = map->columnLabels[1];
    click(0, 0, Qt::NoModifier);
    QCOMPARE(bar->picked().size(), size_t(1));
    QCOMPARE(mView->heatmap()->markedCount(), 1);   // picked cells are outlined on the map (they had no mark, GUI probe)
    QVERIFY(bar->picked()[0].find(".0.") != std::string::npos);
    QVERIFY(bar->picked()[0].size() > col0.size() && bar->picked()[0].compare(bar->picked()[0].size() - col0.size(), col0.size(), col0) == 0);
    click(1, 1, Qt::ControlModifier);
    QCOMPARE(bar->picked().size(), size_t(2));
    click(1, 1, Qt::ControlModifier);   // toggles it off again
    QCOMPARE(bar->picked().size(), size_t(1));
    click(1, 1, Qt::ShiftModifier);     // the whole of block 1
    QCOMPARE(bar->picked().size(), size_t(1 + map->columnLabels.size()));
    QCOMPARE(mView->heatmap()->markedCount(), int(1 + map->columnLabels.size()));
    click(1, 0, Qt::NoModifier);        // a plain click starts over
    QCOMPARE(bar->picked().size(), size_t(1));
    QCOMPARE(mView->heatmap()->markedCount(), 1);
    bar->setPicked({});
    QCOMPARE(mView->heatmap()->markedCount(), 0);
    QVERIFY(bar->picked()[0].find(".1.") != std::string::npos);
}

void TestImportanceView::pickedLayersBecomeStepTargets() {
    LayerPickBar* bar = mView->pickBar();
    const std::vector<std::string> linears = mDoc->model()->linearLayers();
    const QString variant = mDoc->currentVariant();
    // One linear of block 0 (a cell) plus block 1's MLP group (what a channels.* cell stands for).
    mView->pickCell(0, 0);
    const std::string single = bar->picked()[0];
    mView->setKind("channels.wanda");
    ImportanceMap channels;
    channels.kind = "channels.wanda";
    channels.rowLabels = {"block 0", "block 1"};
    channels.columnLabels = {"0", "1"};
    channels.values = {1, 2, 3, 4};
    mDoc->setImportance(channels);
    mView->pickCell(1, 0, Qt::ControlModifier);
    QCOMPARE(bar->picked().size(), size_t(2));
    const std::string group = bar->picked()[1];
    QVERIFY2(group.find("mlp") != std::string::npos, group.c_str());

    bar->setStepIndex(0);
    const int before = mDoc->undoStack()->count();
    // Regression (GUI probe): the bar named no variant, and the edit went silently into the one the Pipeline tab had.
    QCOMPARE(bar->stepCaption(), "Step of " + variant + ":");
    QSignalSpy said(bar, &LayerPickBar::stepEdited);
    QVERIFY(bar->useAsTargets(false));
    QCOMPARE(mDoc->undoStack()->count(), before + 1);
    QCOMPARE(said.size(), 1);
    QVERIFY2(said[0][0].toString().startsWith(variant + ", step 1: targets set to the 2 picked layers"), qPrintable(said[0][0].toString()));
    const json step = mDoc->steps(variant)[0];
    QVERIFY(step.contains("targets"));
    // The regex selects exactly the picked linear and every linear of the group, through the core's own reader.
    std::set<std::string> expected = {single};
    for (const auto& l : linears)
        if (l.rfind(group + ".", 0) == 0) expected.insert(l);
    QVERIFY(expected.size() >= 3);
    const Recipe recipe = Recipe::fromJson({{"steps", mDoc->steps(variant)}}, "test");
    const std::vector<std::string> targeted = targetLayers(*mDoc->model(), recipe.steps[0]);
    QCOMPARE(std::set<std::string>(targeted.begin(), targeted.end()), expected);

    // Regression (GUI probe): the pipeline's step read as if it took every layer.
    const QString label = mEditor->stepList()->item(0)->text();
    QVERIFY2(label.contains("targets /" + QString::fromStdString(step["targets"].get<std::string>()) + "/"), qPrintable(label));
    QVERIFY2(mEditor->stepList()->item(0)->toolTip().startsWith("targets: "), qPrintable(mEditor->stepList()->item(0)->toolTip()));

    mDoc->undoStack()->undo();
    QVERIFY(!mDoc->steps(variant)[0].contains("targets"));
    QVERIFY(!mEditor->stepList()->item(0)->text().contains("targets"));
    mDoc->undoStack()->redo();
    QCOMPARE(mDoc->steps(variant)[0].value("targets", ""), step["targets"].get<std::string>());
}

void TestImportanceView::pickedLayersGetABitsOverride() {
    LayerPickBar* bar = mView->pickBar();
    const QString variant = mDoc->currentVariant();
    const std::vector<std::string> linears = mDoc->model()->linearLayers();
    mView->pickCell(1, 0, Qt::ShiftModifier);   // block 1, every sublayer
    const std::set<std::string> picked(bar->picked().begin(), bar->picked().end());
    bar->setStepIndex(0);
    bar->setOverrideBits(8);
    QVERIFY(bar->addBitsOverride(false));
    json overrides = mDoc->steps(variant)[0]["overrides"];
    QCOMPARE(overrides.size(), size_t(1));
    QCOMPARE(overrides[0]["params"], json({{"bits", 8}}));
    QCOMPARE(matching(overrides[0]["pattern"].get<std::string>(), linears), picked);
    // The recipe with the override still passes the core's validation.
    Recipe::fromJson({{"steps", mDoc->steps(variant)}}, "test");
    // Regression (GUI probe): a step with overrides read as one width for every layer.
    QVERIFY2(mEditor->stepList()->item(0)->text().endsWith("1 per-layer override"), qPrintable(mEditor->stepList()->item(0)->text()));
    QVERIFY2(mEditor->stepList()->item(0)->toolTip().contains("{\"bits\":8}"), qPrintable(mEditor->stepList()->item(0)->toolTip()));
    // The same pattern again replaces the override instead of stacking a second one.
    bar->setOverrideBits(6);
    QVERIFY(bar->addBitsOverride(false));
    QCOMPARE(mDoc->steps(variant)[0]["overrides"].size(), size_t(1));
    QCOMPARE(mDoc->steps(variant)[0]["overrides"][0]["params"]["bits"].get<int>(), 6);
    // Regression: a narrower pick inside the block was appended after the block's override and never applied (the
    // first matching override wins). It now comes first, so its layer gets 3 bits and the rest of the block 6.
    mView->pickCell(1, 0);
    bar->setOverrideBits(3);
    QVERIFY(bar->addBitsOverride(false));
    {
        const Recipe recipe = Recipe::fromJson({{"steps", mDoc->steps(variant)}}, "test");
        const std::set<std::string> narrow = matching(recipe.steps[0].overrides.front().pattern, linears);
        QVERIFY(!narrow.empty() && narrow.size() < picked.size());
        auto bitsOf = [&](const std::string& layer) {   // as StepContext::paramsFor: the first match
            for (const auto& o : recipe.steps[0].overrides)
                if (std::regex_search(layer, std::regex(o.pattern))) return o.params.value("bits", 0);
            return 0;
        };
        for (const auto& layer : picked) QCOMPARE(bitsOf(layer), narrow.count(layer) ? 3 : 6);
    }
    mDoc->undoStack()->undo();
    mView->pickCell(1, 0, Qt::ShiftModifier);
    mDoc->undoStack()->undo();
    QCOMPARE(mDoc->steps(variant)[0]["overrides"][0]["params"]["bits"].get<int>(), 8);
    mDoc->undoStack()->undo();
    QVERIFY(!mDoc->steps(variant)[0].contains("overrides"));

    // prune.magnitude has no bits: refused with a message naming the parameter, nothing pushed.
    bar->setStepIndex(1);
    const int count = mDoc->undoStack()->count();
    QVERIFY(!bar->addBitsOverride(false));
    QVERIFY2(bar->lastError().contains("bits"), qPrintable(bar->lastError()));
    QCOMPARE(mDoc->undoStack()->count(), count);
    // Nothing picked: refused too.
    bar->setPicked({});
    bar->setStepIndex(0);
    QVERIFY(!bar->useAsTargets(false));
    QVERIFY(!bar->lastError().isEmpty());
}

void TestImportanceView::headCellsPickTheAttentionGroup() {
    ImportanceMap heads;
    heads.kind = "heads.ablation";
    heads.rowLabels = {"block 0", "block 1"};
    heads.columnLabels = {"head 0", "head 1", "head 2", "head 3"};
    heads.values = {1, 2, 3, 4, 5, 6, 7, 8};
    mDoc->setImportance(heads);
    mView->setKind("heads.ablation");
    click(1, 2, Qt::ShiftModifier);   // every head of block 1 is the same attention group
    LayerPickBar* bar = mView->pickBar();
    QCOMPARE(bar->picked().size(), size_t(1));
    const std::string group = bar->picked()[0];
    QVERIFY2(group.find(".1.") != std::string::npos && group.find("attn") != std::string::npos, group.c_str());
    const std::set<std::string> matched = matching(layersPattern(bar->picked(), mDoc->model()->linearLayers()), mDoc->model()->linearLayers());
    QVERIFY(matched.size() >= 4);   // q, k, v, o
    for (const auto& l : matched) QVERIFY(l.rfind(group + ".", 0) == 0);
}

void TestImportanceView::channelKindsShowAHistogram() {
    const double nan = std::nan("");
    ImportanceMap channels;
    channels.kind = "channels.wanda";
    channels.rowLabels = {"block 0", "block 1"};
    channels.columnLabels = {"0", "1", "2", "3", "4"};
    channels.values = {5, 5, 5, 5, 5, /* block 1: */ 1, 2, nan, 9, 3};
    mDoc->setImportance(channels);
    mView->setKind("channels.wanda");
    ScoreHistogram* histogram = mView->histogram();
    QVERIFY(histogram->isVisible());
    QCOMPARE(histogram->histogram().counts, std::vector<int>{5});   // block 0: five equal scores
    // Clicking a cell of block 1 shows block 1: 4 finite scores between 1 and 9.
    click(1, 3, Qt::NoModifier);
    const Histogram& h = histogram->histogram();
    QCOMPARE(h.low, 1.0);
    QCOMPARE(h.high, 9.0);
    int total = 0;
    for (int c : h.counts) total += c;
    QCOMPARE(total, 4);
    QVERIFY(histogram->title().contains("block 1"));
    // Other kinds hide it.
    mView->setKind("linears.sensitivity");
    QVERIFY(!histogram->isVisible());
}

// Regression (GUI probe): reopened, the boxes showed the defaults (8 × 128) beside a map measured on other windows.
void TestImportanceView::windowBoxesShowTheStoredMapsWindows() {
    ImportanceMap measured = sensitivityMap(*mDoc->model());
    measured.kind = "channels.wanda";
    measured.measuredWith = {{"text", "t.txt"}, {"windows", 16}, {"tokens", 48}};
    mDoc->setImportance(measured);
    ImportanceView reopened;
    reopened.setDocument(mDoc.get());
    QCOMPARE(reopened.windowSize(), std::make_pair(8, 128));   // the shown kind has no measurement recorded
    reopened.setKind("channels.wanda");
    QCOMPARE(reopened.windowSize(), std::make_pair(16, 48));
    reopened.setWindowSize(4, 32);   // the user's choice stands until another map is shown
    QCOMPARE(reopened.windowSize(), std::make_pair(4, 32));
}

// Regression (GUI probe): per-layer sensitivity always rounded each layer to RTN int4 g32, whatever method the variant
// uses; the view offers the variant's steps (method and parameters; what applies to one layer at a time).
void TestImportanceView::sensitivityProbesOfferTheVariantsSteps() {
    QComboBox* probes = mView->probeChooser();
    QVERIFY(probes->isVisibleTo(mView.get()));   // linears.sensitivity
    QCOMPARE(mView->probeStep(), defaultSensitivityStep());
    QStringList texts;
    for (int i = 0; i < probes->count(); ++i) texts << probes->itemText(i);
    QCOMPARE(texts.size(), 3);
    QVERIFY2(texts[1].startsWith("step 1: quantize.rtn") && texts[2].startsWith("step 2: prune.magnitude"), qPrintable(texts.join(" | ")));
    // A step's head and layer fields are left out; a disabled step is not offered.
    mDoc->undoStack()->push(new ReplaceStep("t", mDoc.get(), mDoc->currentVariant(), 0,
                                            json{{"method", "quantize.rtn"}, {"targets", "mlp"}, {"params", {{"bits", 3}, {"head", "only"}}}}));
    mDoc->undoStack()->push(new ReplaceStep("t", mDoc.get(), mDoc->currentVariant(), 1,
                                            json{{"method", "prune.magnitude"}, {"enabled", false}}));
    QCOMPARE(probes->count(), 2);
    QVERIFY(mView->chooseProbe(json{{"method", "quantize.rtn"}, {"params", {{"bits", 3}}}}));
    QVERIFY2(probes->itemData(1, Qt::ToolTipRole).toString().contains("without the step's targets, head"),
             qPrintable(probes->itemData(1, Qt::ToolTipRole).toString()));
    mView->setKind("heads.ablation");
    QVERIFY(!probes->isVisibleTo(mView.get()));
    // A stored map's probe is chosen when it is shown.
    ImportanceMap measured = sensitivityMap(*mDoc->model());
    measured.kind = "linears.delta_ppl";
    measured.measuredWith = {{"windows", 2}, {"tokens", 16}, {"step", defaultSensitivityStep()}};
    mDoc->setImportance(measured);
    mView->setKind("linears.delta_ppl");
    QVERIFY(probes->isVisibleTo(mView.get()));
    QCOMPARE(mView->probeStep(), defaultSensitivityStep());
}

QTEST_MAIN(TestImportanceView)
#include "test_importance_view.moc"
