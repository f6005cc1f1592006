// exportRecipeProblem: a refusal judged from the recipe before the variant is built. Each case builds the variant
// too and asks the format itself, so the test holds the prediction to two things: it never refuses what the
// format would take (a false refusal would block a working export), and it finds the refusals the recipe decides.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <filesystem>

#include "core/compress/recipe.h"
#include "core/export/export_format.h"
#include "core/export/export_plan.h"
#include "core/io/model_format.h"
#include "core/model/model.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/error.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

namespace {

std::string step(const std::string& method, const std::string& params, const std::string& extra = "") {
    return R"({"method":")" + method + R"(","params":)" + params + extra + "}";
}

std::string recipeOf(std::initializer_list<std::string> steps) {
    std::string s = R"({"steps":[)";
    bool first = true;
    for (const auto& st : steps) {
        s += (first ? "" : ",") + st;
        first = false;
    }
    return s + "]}";
}

const std::string kRtn4 = step("quantize.rtn", R"({"bits":4,"group_size":32})");

} // namespace

class TestExportPlan : public QObject {
    Q_OBJECT
    QTemporaryDir mDir;
    std::unique_ptr<Model> mBase;

private slots:
    // packableLlamaSpec: q/o 64x64, k/v 32x64, gate/up 128x64, down 64x128.
    void initTestCase() {
        at::manual_seed(0);
        QVERIFY(mDir.isValid());
        const std::string folder = mDir.filePath("base").toStdString();
        std::filesystem::create_directories(folder);
        writeHfFolder(folder, packableLlamaSpec(), randomWeights(packableLlamaSpec(), 11), ggml::Type::F32);
        mBase = loadModel(folder);
        mBase->tokenizer = tinyVocabulary(packableLlamaSpec().vocab);
    }

    void predictionAgreesWithTheBuiltVariant_data() {
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("predicted");   // a phrase the early refusal must contain; "" when none is expected

        auto row = [](const char* name, const std::string& recipe, const char* format, const char* predicted) {
            QTest::newRow(name) << QString::fromStdString(recipe) << format << predicted;
        };
        row("rtn4 -> gptq", recipeOf({kRtn4}), "gptq", "");
        row("rtn4 -> awq", recipeOf({kRtn4}), "awq", "");
        row("rtn4 -> compressed-tensors", recipeOf({kRtn4}), "compressed-tensors", "");
        row("rtn8 -> awq", recipeOf({step("quantize.rtn", R"({"bits":8,"group_size":32})")}), "awq", "8-bit weights");
        row("rtn3 -> gptq", recipeOf({step("quantize.rtn", R"({"bits":3,"group_size":32})")}), "gptq", "");
        row("rtn3 -> compressed-tensors", recipeOf({step("quantize.rtn", R"({"bits":3,"group_size":32})")}),
            "compressed-tensors", "3-bit levels are not written");
        row("q_proj only -> gptq", recipeOf({step("quantize.rtn", R"({"bits":4,"group_size":32})", R"(,"targets":"q_proj")")}),
            "gptq", "will not be integer-quantized: no quantize.rtn, quantize.gptq or quantize.awq step targets it");
        row("q_proj only -> compressed-tensors",
            recipeOf({step("quantize.rtn", R"({"bits":4,"group_size":32})", R"(,"targets":"q_proj")")}), "compressed-tensors",
            "vLLM runs the layers that share an input");
        row("mixed bits -> gptq",
            recipeOf({step("quantize.rtn", R"({"bits":4,"group_size":32})",
                           R"(,"overrides":[{"pattern":"layers\\.1\\.","params":{"bits":8}}])")}),
            "gptq", "one quantization_config covers every layer");
        row("mixed bits -> compressed-tensors (per layer)",
            recipeOf({step("quantize.rtn", R"({"bits":4,"group_size":32})",
                           R"(,"overrides":[{"pattern":"layers\\.1\\.","params":{"bits":8}}])")}),
            "compressed-tensors", "");
        row("group 48 -> awq", recipeOf({step("quantize.rtn", R"({"bits":4,"group_size":48})")}), "awq",
            "is not a multiple of the group size 48");
        row("group 48 -> compressed-tensors", recipeOf({step("quantize.rtn", R"({"bits":4,"group_size":48})")}),
            "compressed-tensors", "not a multiple of its group size 48");
        row("act-order -> gptq", recipeOf({step("quantize.gptq", R"({"bits":4,"group_size":32,"act_order":true})")}), "gptq", "");
        row("act-order -> awq", recipeOf({step("quantize.gptq", R"({"bits":4,"group_size":32,"act_order":true})")}), "awq",
            "act-order group indices");
        row("act-order -> compressed-tensors",
            recipeOf({step("quantize.gptq", R"({"bits":4,"group_size":32,"act_order":true})")}), "compressed-tensors",
            "act-order group indices");
        row("act-order static groups -> compressed-tensors",
            recipeOf({step("quantize.gptq", R"({"bits":4,"group_size":32,"act_order":true,"static_groups":true})")}),
            "compressed-tensors", "");
        row("awq unfolded -> gptq", recipeOf({step("quantize.awq", R"({"bits":4,"group_size":32})")}), "gptq", "AWQ input scales");
        row("awq unfolded -> compressed-tensors", recipeOf({step("quantize.awq", R"({"bits":4,"group_size":32})")}),
            "compressed-tensors", "AWQ input scales");
        row("awq folded -> awq", recipeOf({step("quantize.awq", R"({"bits":4,"group_size":32,"fold":true})")}), "awq", "");
        row("rtn then magnitude on block 1 -> gptq",
            recipeOf({kRtn4, step("prune.magnitude", R"({"sparsity":0.5})", R"(,"targets":"layers\\.1\\.")")}), "gptq",
            "dense after step 2 (prune.magnitude)");
        row("magnitude then rtn -> gptq", recipeOf({step("prune.magnitude", R"({"sparsity":0.5})"), kRtn4}), "gptq", "");
        row("smoothquant unfolded -> compressed-tensors", recipeOf({step("quantize.smoothquant", "{}")}), "compressed-tensors",
            "SmoothQuant smoothing scales");
        row("smoothquant folded -> compressed-tensors", recipeOf({step("quantize.smoothquant", R"({"fold":true})")}),
            "compressed-tensors", "");
        row("fp8 -> gptq", recipeOf({step("quantize.fp8", "{}")}), "gptq", "is FP8 after step 1 (quantize.fp8)");
        row("fp8 -> compressed-tensors", recipeOf({step("quantize.fp8", "{}")}), "compressed-tensors", "");
        row("dense -> compressed-tensors", recipeOf({step("prune.magnitude", R"({"sparsity":0.5})")}), "compressed-tensors",
            "no layer will be quantized");
        row("disabled step -> awq", recipeOf({step("quantize.rtn", R"({"bits":8,"group_size":32})", R"(,"enabled":false)"), kRtn4}),
            "awq", "");
        // Structured pruning removes as many heads or channels as its ratio says (which ones is the data's choice):
        // the touched layers become dense with shapes known from the recipe, and what follows is judged on them.
        row("heads then rtn -> awq", recipeOf({step("prune.heads", R"({"ratio":0.5,"unit":"kv_group","importance":"weight"})"), kRtn4}),
            "awq", "");
        row("query heads then rtn g64 -> awq",
            recipeOf({step("prune.heads", R"({"ratio":0.5,"importance":"weight"})"), step("quantize.rtn", R"({"bits":4,"group_size":64})")}),
            "awq", "in_features 32 is not a multiple of the group size 64");
        row("channels 0.25 then rtn -> awq", recipeOf({step("prune.channels", R"({"ratio":0.25,"importance":"weight"})"), kRtn4}),
            "awq", "");
        row("channels 0.3 then rtn -> awq", recipeOf({step("prune.channels", R"({"ratio":0.3,"importance":"weight"})"), kRtn4}),
            "awq", "90 is not a multiple of");
        row("channels 0.25 then rtn g64 -> compressed-tensors",
            recipeOf({step("prune.channels", R"({"ratio":0.25,"importance":"weight"})"), step("quantize.rtn", R"({"bits":4,"group_size":64})")}),
            "compressed-tensors", "not a multiple of its group size 64");
        row("channels then nothing -> gptq", recipeOf({step("prune.channels", R"({"ratio":0.25,"importance":"weight"})")}), "gptq",
            "dense after step 1 (prune.channels)");
        row("channels of block 1 -> hf",
            recipeOf({step("prune.channels", R"({"ratio":0.25,"importance":"weight"})", R"(,"targets":"layers\\.1\\.")")}), "hf",
            "layer 1 has 96 MLP channels but layer 0 has 128");
        row("channels of every block -> hf", recipeOf({step("prune.channels", R"({"ratio":0.25,"importance":"weight"})")}), "hf", "");
        row("heads then rtn8 -> awq",
            recipeOf({step("prune.heads", R"({"ratio":0.5,"unit":"kv_group","importance":"weight"})"),
                      step("quantize.rtn", R"({"bits":8,"group_size":32})")}),
            "awq", "8-bit weights");
        // Layer names change after prune.layers: nothing is claimed, though the export does refuse 8 bits.
        row("layers then rtn8 -> awq",
            recipeOf({step("prune.layers", R"({"count":1,"importance":"last"})"), step("quantize.rtn", R"({"bits":8,"group_size":32})")}),
            "awq", "");
        // A zero point of 0 depends on the weights: left to the export.
        row("asym rtn4 -> gptq", recipeOf({step("quantize.rtn", R"({"bits":4,"group_size":32,"scheme":"asym"})")}), "gptq", "");
        row("rtn4 -> gguf", recipeOf({kRtn4}), "gguf", "");
        row("rtn4 -> hf", recipeOf({kRtn4}), "hf", "");
    }

    void predictionAgreesWithTheBuiltVariant() {
        QFETCH(QString, recipe);
        QFETCH(QString, format);
        QFETCH(QString, predicted);
        const Recipe parsed = Recipe::fromJson(nlohmann::json::parse(recipe.toStdString()), "test recipe");
        const QString early = QString::fromStdString(exportRecipeProblem(*mBase, parsed, format.toStdString()));
        if (predicted.isEmpty()) QVERIFY2(early.isEmpty(), qPrintable("unexpected early refusal: " + early));
        else QVERIFY2(early.contains(predicted), qPrintable("early refusal: '" + early + "', expected to contain: " + predicted));

        const auto variant = compressWithRecipe(*mBase, recipe.toStdString());
        const QString late = QString::fromStdString(
            ExportFormatRegistry::instance().byId(format.toStdString())->refusal(*variant, ExportOptions{}));
        // Never refused early what the format takes; a refusal found early is one the format makes too.
        if (!early.isEmpty()) QVERIFY2(!late.isEmpty(), qPrintable("refused early, but the format takes the variant: " + early));
    }

    void formatsTheRecipeDoesNotDecide() {
        const Recipe rtn = Recipe::fromJson(nlohmann::json::parse(recipeOf({kRtn4})), "test recipe");
        auto bare = mBase->clone();
        bare->tokenizer.reset();
        QVERIFY(QString::fromStdString(exportRecipeProblem(*bare, rtn, "gguf")).contains("no tokenizer vocabulary"));
        QVERIFY_EXCEPTION_THROWN(exportRecipeProblem(*mBase, rtn, "onnx"), Error);

        // GPT-2 models have no GPTQ/AWQ/compressed-tensors export at all.
        const std::string folder = mDir.filePath("gpt2").toStdString();
        std::filesystem::create_directories(folder);
        writeHfFolder(folder, tinyGpt2Spec(), randomWeights(tinyGpt2Spec(), 3), ggml::Type::F32);
        const auto gpt2 = loadModel(folder);
        QVERIFY(QString::fromStdString(exportRecipeProblem(*gpt2, rtn, "gptq")).contains("Llama family"));
        QVERIFY(QString::fromStdString(exportRecipeProblem(*gpt2, rtn, "compressed-tensors")).contains("Llama family"));
    }
};

QTEST_APPLESS_MAIN(TestExportPlan)
#include "test_export_plan.moc"
