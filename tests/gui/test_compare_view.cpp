// CompareView. Side-by-side generation: two variants chosen in the combo boxes are generated on a worker thread
// (waiting on the finished signal), and each pane holds exactly what the core's generate() gives for that variant.
// Latency: measured on a worker thread for the base and each variant, stored beside the other results, charted.
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "app/commands/settings_commands.h"
#include "app/commands/step_commands.h"
#include "app/commands/variant_commands.h"
#include "app/gui/compare_view.h"
#include "app/gui/generation_panel.h"
#include "app/gui/project_document.h"
#include "core/export/export_format.h"
#include "core/io/model_format.h"
#include "core/model/model.h"
#include "core/project/project_runner.h"
#include "core/runtime/generate.h"
#include "core/runtime/transformer.h"
#include "core/tokenizer/chat_format.h"
#include "tests/support/test_paths.h"
#include "widgets/ab_chart.h"
#include "widgets/loss_curve.h"

using namespace cwb;

namespace {

QString directly(const ProjectDocument& doc, const std::string& variant, const QString& prompt, int tokens,
                 double temperature = 0, int topK = 0, int seed = 0) {
    std::unique_ptr<Model> built;
    if (variant != Project::kBaseName) built = ProjectRunner(doc.project(), *doc.model()).build(variant, nullptr);
    Transformer runtime(built ? *built : *doc.model());
    GenerateParams params;
    params.prompt = prompt.toStdString();
    params.tokens = tokens;
    params.temperature = temperature;
    params.topK = topK;
    params.seed = uint64_t(seed);
    return prompt + QString::fromStdString(generate(runtime, *doc.model()->tokenizer, params).text);
}

} // namespace

class TestCompareView : public QObject {
    Q_OBJECT
private slots:
    void generatesTwoVariantsSideBySide();
    void generationKeepsBuiltVariantsAndSamples();
    void chatSendsThePromptInTheChatFormat();
    void measuresAndChartsLatency();
    void chartsReconstructionErrorPerLayer();
};

void TestCompareView::generatesTwoVariantsSideBySide() {
    CWB_REQUIRE_FIXTURE(model, "models/stories260K.gguf");
    auto doc = ProjectDocument::openModel(model);
    Variant w2;
    w2.name = "w2";
    nlohmann::json step = defaultStep("quantize.rtn");
    step["params"]["bits"] = 2;   // coarse enough that the text changes
    w2.recipe["steps"].push_back(step);
    doc->undoStack()->push(new AddVariant(doc.get(), w2));

    CompareView view;
    view.setDocument(doc.get());
    GenerationPanel* panel = view.generationPanel();
    QVERIFY(panel);
    QVERIFY(panel->setVariants("base", "w2"));
    QVERIFY(!panel->setVariants("base", "missing"));
    panel->setPrompt("Once upon a time");
    panel->setTokens(24);
    QSignalSpy finished(panel, &GenerationPanel::generationFinished);
    QVERIFY(panel->generate());
    QVERIFY(panel->isGenerating());
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);

    const QString base = directly(*doc, "base", "Once upon a time", 24);
    const QString variant = directly(*doc, "w2", "Once upon a time", 24);
    QVERIFY(base.size() > QString("Once upon a time").size());
    QVERIFY2(variant != base, "2-bit RTN must change the text, or the swap below proves nothing");
    QCOMPARE(panel->leftText(), base);
    QCOMPARE(panel->rightText(), variant);

    // Swapped sides swap the panes.
    QVERIFY(panel->setVariants("w2", "base"));
    QVERIFY(panel->generate());
    QVERIFY(finished.wait(120000));
    QCOMPARE(panel->leftText(), variant);
    QCOMPARE(panel->rightText(), base);

    // Regression (GUI probe): a pane kept its text under another variant's name. A variant added keeps the choices
    // and the texts; another choice on one side clears that side; another document clears both.
    Variant w3 = w2;
    w3.name = "w3";
    doc->undoStack()->push(new AddVariant(doc.get(), w3));
    QCOMPARE(panel->leftText(), variant);
    QCOMPARE(panel->rightText(), base);
    QVERIFY(panel->setVariants("w2", "w3"));
    QCOMPARE(panel->leftText(), variant);
    QVERIFY(panel->rightText().isEmpty());
    auto other = ProjectDocument::openModel(model);
    view.setDocument(other.get());
    QVERIFY(panel->leftText().isEmpty());
    view.setDocument(doc.get());

    // Cancel: reported as not succeeded, nothing half-shown.
    finished.clear();
    QVERIFY(panel->generate());
    panel->cancel();
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), false);
    QVERIFY(panel->rightText().isEmpty());
}

// Regression (GUI probe): each Generate built its variants again, 12 s for RTN of stories260K with a calibration text
// (the build measured reconstruction errors that nothing here shows). A variant built is kept while its recipe and the
// calibration stay; sampling and a named chat format reach the core as the CLI gives them.
void TestCompareView::generationKeepsBuiltVariantsAndSamples() {
    CWB_REQUIRE_FIXTURE(model, "models/stories260K.gguf");
    CWB_REQUIRE_FIXTURE(text, "text/tinystories_v2_valid_first100.txt");
    auto doc = ProjectDocument::openModel(model);
    ProjectSettings settings = doc->project().settings();
    settings.calibration = textFileReference(text.toStdString());
    settings.calibrationSamples = 8;
    settings.calibrationSeqLen = 64;
    doc->undoStack()->push(changeSettings(doc.get(), settings));
    Variant w2;
    w2.name = "w2";
    nlohmann::json step = defaultStep("quantize.rtn");
    step["params"]["bits"] = 2;
    w2.recipe["steps"].push_back(step);
    doc->undoStack()->push(new AddVariant(doc.get(), w2));
    {   // Errors are measured when a run asks for them, not for a build to generate, time or export with.
        ProjectRunner runner(doc->project(), *doc->model());
        runner.build("w2", nullptr);
        QVERIFY(runner.lastReconstructionErrors().empty());
        runner.build("w2", nullptr, ProjectRunner::ErrorPass::Measure);
        QCOMPARE(runner.lastReconstructionErrors().size(), doc->model()->linearLayers().size());
    }

    CompareView view;
    view.setDocument(doc.get());
    GenerationPanel* panel = view.generationPanel();
    QSignalSpy finished(panel, &GenerationPanel::generationFinished);
    auto generated = [&] {
        finished.clear();
        return panel->generate() && finished.wait(120000) && finished.takeFirst().at(0).toBool();
    };
    panel->setPrompt("Once upon a time");
    panel->setTokens(16);
    QVERIFY(panel->setVariants("w2", "w2"));
    QVERIFY(generated());
    QCOMPARE(panel->lastBuildCount(), 1);   // once for both sides
    QCOMPARE(panel->leftText(), panel->rightText());
    QVERIFY(generated());
    QCOMPARE(panel->lastBuildCount(), 0);   // kept

    panel->setSampling(0.8, 20, 7);
    QVERIFY(panel->setVariants("base", "w2"));
    QVERIFY(generated());
    QCOMPARE(panel->lastBuildCount(), 0);
    QCOMPARE(panel->leftText(), directly(*doc, "base", "Once upon a time", 16, 0.8, 20, 7));
    QCOMPARE(panel->rightText(), directly(*doc, "w2", "Once upon a time", 16, 0.8, 20, 7));

    doc->undoStack()->push(changeStepParameter(doc.get(), "w2", 0, "bits", 3));   // another recipe: built again
    QVERIFY(generated());
    QCOMPARE(panel->lastBuildCount(), 1);
    QCOMPARE(panel->rightText(), directly(*doc, "w2", "Once upon a time", 16, 0.8, 20, 7));

    // No chat template in stories260K: a format named in the panel serves instead.
    panel->setChat(true);
    QVERIFY(!panel->generate());
    QVERIFY2(panel->lastError().contains("Name a chat format"), qPrintable(panel->lastError()));
    QVERIFY(!panel->setChatFormat("no-such-format"));
    QVERIFY(panel->setChatFormat("llama2"));
    QVERIFY(generated());
}

void TestCompareView::chatSendsThePromptInTheChatFormat() {
    CWB_REQUIRE_FIXTURE(model, "models/stories260K.gguf");
    {   // stories260K has no chat template: Chat refuses to start, saying why.
        auto doc = ProjectDocument::openModel(model);
        CompareView view;
        view.setDocument(doc.get());
        view.generationPanel()->setChat(true);
        QVERIFY(!view.generationPanel()->generate());
        QVERIFY2(view.generationPanel()->lastError().contains("no chat template"), qPrintable(view.generationPanel()->lastError()));
    }
    // The same model with a Mistral-style template ([INST] … [/INST]) written into a GGUF.
    QTemporaryDir dir;
    auto source = loadModel(model.toStdString());
    TokenizerData data = *source->tokenizer->vocabulary();
    data.chatTemplate = "{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endfor %}";
    source->tokenizer = makeTokenizer(data);
    const QString withTemplate = dir.filePath("chat.gguf");
    ExportOptions options;
    options.tensorType = "f32";
    exportModel(*source, "gguf", withTemplate.toStdString(), options);

    auto doc = ProjectDocument::openModel(withTemplate);
    CompareView view;
    view.setDocument(doc.get());
    GenerationPanel* panel = view.generationPanel();
    panel->setPrompt("Tell a story");
    panel->setTokens(16);
    panel->setChat(true);
    QSignalSpy finished(panel, &GenerationPanel::generationFinished);
    QVERIFY(panel->generate());
    QVERIFY(finished.wait(120000));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);

    const ChatPrompt prompt = prepareChatPrompt(*doc->model()->tokenizer, {{"user", "Tell a story"}});
    QCOMPARE(QString::fromStdString(prompt.text), QString("[INST] Tell a story [/INST]"));
    Transformer runtime(*doc->model());
    GenerateParams params;
    params.prompt = prompt.text;
    params.tokens = 16;
    params.parseSpecial = true;
    params.addBos = doc->model()->tokenizer->addBosByDefault();
    params.stopIds = prompt.stopIds;
    const QString answer = QString::fromStdString(generate(runtime, *doc->model()->tokenizer, params).text);
    QVERIFY(!answer.isEmpty());
    QCOMPARE(panel->leftText(), answer);   // the answer alone, without the rendered prompt
    QCOMPARE(panel->rightText(), answer);
}

void TestCompareView::measuresAndChartsLatency() {
    CWB_REQUIRE_FIXTURE(model, "models/stories260K.gguf");
    auto doc = ProjectDocument::openModel(model);
    Variant w4;
    w4.name = "w4";
    w4.recipe["steps"].push_back(defaultStep("quantize.rtn"));
    doc->undoStack()->push(new AddVariant(doc.get(), w4));
    ResultRow ppl;
    ppl.metric = "perplexity";
    ppl.value = 12.5;
    doc->setResults("w4", {ppl});

    CompareView view;
    view.setDocument(doc.get());
    QSignalSpy measured(&view, &CompareView::latencyMeasured);
    QVERIFY(view.measureLatency(8, 4));
    QVERIFY(!view.measureLatency(8, 4));   // one at a time
    QVERIFY(measured.wait(120000));
    QVERIFY2(measured.first().at(0).toBool(), qPrintable(measured.first().at(1).toString()));

    auto value = [&](const std::string& variant, const std::string& metric) {
        for (const auto& r : doc->project().results(variant))
            if (r.metric == metric) return r.value;
        return -1.0;
    };
    for (const std::string v : {"base", "w4"}) {
        QVERIFY2(value(v, "decode_ms_p50") > 0, v.c_str());
        QVERIFY2(value(v, "prefill_tokens_per_second") > 0, v.c_str());
    }
    QCOMPARE(value("w4", "perplexity"), 12.5);   // the other results stay
    view.setMetric("decode_ms_p50");
    QCOMPARE(view.chart()->seriesCount(), 2);
    QCOMPARE(view.chart()->variantName(0), QString("base"));
    QCOMPARE(view.chart()->barValue(0), value("base", "decode_ms_p50"));
    QCOMPARE(view.chart()->barValue(1), value("w4", "decode_ms_p50"));
    QVERIFY(view.chart()->hasBaseline());
    QVERIFY2(view.measurementStatus().contains("Latency measured"), qPrintable(view.measurementStatus()));
    {   // Regression (GUI probe): another project showed this one's latency note.
        CompareView other;
        other.setDocument(doc.get());
        QVERIFY(other.measurementStatus().isEmpty());
        view.setDocument(nullptr);
        QVERIFY(view.measurementStatus().isEmpty());
        view.setDocument(doc.get());
    }
    // Regression: with no perplexity row for the base, w4's bar was labelled "(baseline)"; KL and top-1 never have
    // a base bar, and their first variant was labelled so too.
    view.setMetric("perplexity");
    QCOMPARE(view.chart()->seriesCount(), 1);
    QVERIFY(!view.chart()->hasBaseline());

    // Measuring again replaces the latency rows instead of adding more.
    QVERIFY(view.measureLatency(8, 4));
    QVERIFY(measured.wait(120000));
    int latencyRows = 0;
    for (const auto& r : doc->project().results("w4")) latencyRows += r.metric == "decode_ms_p50";
    QCOMPARE(latencyRows, 1);

    // Regression (review): with w4's results of an earlier recipe, its new latency was filed under that recipe's basis
    // (and a later run of that recipe kept it as its own). It is not stored then, and the status says so.
    const double before = value("w4", "decode_ms_p50");
    doc->undoStack()->push(changeStepParameter(doc.get(), "w4", 0, "bits", 3));
    QVERIFY(!doc->resultsCurrent("w4"));
    QVERIFY(view.measureLatency(8, 4));
    QVERIFY(measured.wait(120000));
    QVERIFY2(measured.last().at(0).toBool(), qPrintable(measured.last().at(1).toString()));
    QVERIFY2(view.measurementStatus().contains("Not stored for w4: its results are of an earlier recipe or model"),
             qPrintable(view.measurementStatus()));
    QCOMPARE(value("w4", "decode_ms_p50"), before);
    doc->undoStack()->undo();
    // Regression (GUI probe): results stored without w4's latency (a re-run of another recipe) left the note saying
    // it had been measured. The note follows what is stored.
    QVERIFY2(view.measurementStatus().startsWith("Latency measured on cpu for base, w4."), qPrintable(view.measurementStatus()));
    doc->setResults("w4", {ppl});
    QVERIFY2(view.measurementStatus() == "Latency measured on cpu for base. Not stored for w4: its results are of an earlier "
                                         "recipe or model; run it, then measure again.", qPrintable(view.measurementStatus()));

    // Regression: a failed measurement said nothing (the signal was connected to nothing). Now the view says which
    // variant failed and why: GPTQ needs calibration text, which a fresh project has none of.
    Variant gptq;
    gptq.name = "needs-calibration";
    gptq.recipe["steps"].push_back(defaultStep("quantize.gptq"));
    doc->undoStack()->push(new AddVariant(doc.get(), gptq));
    QVERIFY(view.measureLatency(8, 4));
    QVERIFY(measured.wait(120000));
    QCOMPARE(measured.last().at(0).toBool(), false);
    QVERIFY2(view.measurementStatus().startsWith("Latency not measured: needs-calibration: "), qPrintable(view.measurementStatus()));

    // A cancel is a cancel, not a failure (the per-variant message wrapped it into an error).
    QVERIFY(view.measureLatency(64, 256));
    view.cancelMeasurement();
    QVERIFY(measured.wait(120000));
    QCOMPARE(measured.last().at(0).toBool(), false);
    QCOMPARE(measured.last().at(1).toString(), QString("Cancelled; nothing was stored."));
    QVERIFY2(view.measurementStatus().contains("cancelled"), qPrintable(view.measurementStatus()));
}

void TestCompareView::chartsReconstructionErrorPerLayer() {
    CWB_REQUIRE_FIXTURE(model, "models/stories260K.gguf");
    auto doc = ProjectDocument::openModel(model);
    for (const char* name : {"dense", "w4", "w8"}) {
        Variant v;
        v.name = name;
        v.recipe["steps"].push_back(defaultStep("quantize.rtn"));
        doc->undoStack()->push(new AddVariant(doc.get(), v));
    }
    // What ProjectRunner stores: one row per layer; w8 has errors for the first three layers only.
    const std::vector<std::string> layers = doc->model()->linearLayers();
    auto rowsOf = [&](size_t count, double scale) {
        std::vector<ResultRow> rows;
        ResultRow ppl;
        ppl.metric = "perplexity";
        ppl.value = 10;
        rows.push_back(ppl);
        for (size_t i = 0; i < count; ++i) {
            ResultRow r;
            r.metric = kReconstructionErrorPrefix + layers[i];
            r.value = scale * double(i + 1);
            rows.push_back(r);
        }
        return rows;
    };
    doc->setResults("w4", rowsOf(layers.size(), 1e-3));
    doc->setResults("w8", rowsOf(3, 1e-5));
    doc->setResults("dense", rowsOf(0, 0));   // a perplexity, no layer errors: a bar and no line
    CompareView view;
    view.setDocument(doc.get());
    LossCurve* chart = view.layerErrorChart();
    QCOMPARE(chart->seriesNames(), QStringList({"w4", "w8"}));
    QCOMPARE(chart->pointCount("w4"), int(layers.size()));
    QCOMPARE(chart->pointCount("w8"), 3);
    // One colour per variant in both charts: dense has a bar and no line, and the lines took the colours of the bars
    // before them (GUI probe).
    AbChart* bars = view.chart();
    for (int i = 0; i < bars->seriesCount(); ++i)
        if (chart->seriesNames().contains(bars->variantName(i)))
            QCOMPARE(bars->barColor(i), chart->seriesColor(bars->variantName(i)).darker(130));
    QCOMPARE(bars->variantName(bars->seriesCount() - 1), QString("w8"));
    QVERIFY(!chart->isDashed("w4"));
    // Hovering a dot names its layer (GUI probe: x was only a place in block order).
    chart->resize(500, 300);
    chart->flush();
    const QPoint third = chart->pointPixel("w8", 2);
    QVERIFY(third.x() >= 0);
    QCOMPARE(chart->pointTextAt(third), QString::fromStdString(layers[2] + "\nw4: 0.003\nw8: 3e-05"));
    // Per-layer rows stay out of the table: its columns are the scalar metrics only.
    QCOMPARE(view.table()->columnCount(), 1);
    QCOMPARE(view.table()->horizontalHeaderItem(0)->text(), QStringLiteral("perplexity"));
    // Results that change (a rerun without calibration) redraw the chart.
    doc->setResults("w8", {});
    QCOMPARE(chart->seriesNames(), QStringList({"w4"}));
    // Regression (GUI probe): the chart was not marked stale when the bars were, and kept the axes of data gone.
    doc->undoStack()->push(changeStepParameter(doc.get(), "w4", 0, "bits", 3));
    QCOMPARE(chart->seriesNames(), QStringList({"w4 (stale)"}));
    QVERIFY2(chart->isDashed("w4 (stale)"), "a stale line is dashed, as its bar is hatched");
    QVERIFY(chart->stepRange().second >= double(layers.size() - 1));
    doc->setResults("w4", {});
    chart->flush();
    QCOMPARE(chart->stepRange(), std::make_pair(0.0, 1.0));
}

QTEST_MAIN(TestCompareView)
#include "test_compare_view.moc"
