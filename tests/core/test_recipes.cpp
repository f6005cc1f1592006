// Recipes and parameters: declared defaults fill in, unknown or out-of-range parameters, unknown methods and
// other versions are refused with messages that name them; recipes round-trip through JSON.
#include <QDir>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <fstream>

#include "core/compress/method.h"
#include "core/compress/params.h"
#include "core/compress/recipe.h"
#include "core/util/error.h"

using namespace cwb;
using nlohmann::json;

class TestRecipes : public QObject {
    Q_OBJECT
private slots:
    void defaultsAreFilled();
    void rangesAreWholeNumbers();
    void badRecipesAreRefused_data();
    void badRecipesAreRefused();
    void usualPatternsAreAllowed();
    void roundTripThroughFile();
    void relativeFilesFollowTheirRecipe();
    void everyMethodDeclaresValidDefaults();
    void exampleRecipesAreValid();
};

void TestRecipes::defaultsAreFilled() {
    const CompressionMethod* gptq = MethodRegistry::instance().find("quantize.gptq");
    QVERIFY(gptq);
    json p = resolveParams(gptq->id(), gptq->params(), json{{"bits", 3}});
    QCOMPARE(p["bits"].get<int>(), 3);
    QCOMPARE(p["group_size"].get<int>(), 128);
    QCOMPARE(p["damp_percent"].get<double>(), 0.01);
    QCOMPARE(p["act_order"].get<bool>(), false);
}

// Regression (user probe): `cwb methods` listed the seeds' range as [0, 4611686018427387904.] (a double's text).
void TestRecipes::rangesAreWholeNumbers() {
    QCOMPARE(rangeText(intParam("seed", 0, 1LL << 62, 0, "")), std::string(" [0, 4611686018427387904]"));
    QCOMPARE(rangeText(floatParam("damp", 0.0, 0.5, 0.01, "")), std::string(" [0, 0.5]"));
    QCOMPARE(rangeText(floatParam("scale", 0.25, 1e20, 1.0, "")), std::string(" [0.25, 100000000000000000000]"));
}

void TestRecipes::badRecipesAreRefused_data() {
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<QString>("expected");
    QTest::newRow("not an object") << "[1,2]" << "\"steps\" array";
    QTest::newRow("unknown method") << R"({"steps":[{"method":"quantize.magic"}]})" << "unknown method";
    QTest::newRow("other version") << R"({"steps":[{"method":"quantize.rtn","version":7}]})" << "version 7";
    QTest::newRow("unknown param") << R"({"steps":[{"method":"quantize.gptq","params":{"bitz":4}}]})" << "unknown parameter 'bitz'";
    QTest::newRow("out of range") << R"({"steps":[{"method":"quantize.gptq","params":{"bits":9}}]})" << "'bits' = 9 is out of range 2..8";
    // Regression (user probe): GPTQ's group_size 0 passed the recipe checks and failed a project run half way.
    QTest::newRow("excluded value") << R"({"steps":[{"method":"quantize.gptq","params":{"group_size":0}}]})"
                                    << "'group_size' = 0 is not allowed (range [-1, 65536] except 0)";
    QTest::newRow("excluded value in override") << R"({"steps":[{"method":"quantize.gptq","overrides":[{"pattern":"q_proj","params":{"group_size":0}}]}]})"
                                                << "'group_size' = 0 is not allowed";
    // Regression (user probe): the bound 2^62 printed as "4611686018427387904." (a double's text).
    QTest::newRow("large bound") << R"({"steps":[{"method":"distill.kd","params":{"seed":-1}}]})"
                                 << "'seed' = -1 is out of range 0..4611686018427387904";
    QTest::newRow("wrong type") << R"({"steps":[{"method":"prune.wanda","params":{"sparsity":"half"}}]})" << "must be a number";
    QTest::newRow("bad choice") << R"({"steps":[{"method":"quantize.rtn","params":{"scheme":"odd"}}]})" << "not one of: sym, asym";
    QTest::newRow("bad override") << R"({"steps":[{"method":"quantize.rtn","overrides":[{"pattern":"layers\\.0\\.","params":{"bits":1}}]}]})" << "'bits' = 1";
    QTest::newRow("bad regex") << R"({"steps":[{"method":"quantize.rtn","targets":"(["}]})" << "invalid regular expression";
    QTest::newRow("unknown key") << R"({"steps":[{"method":"quantize.rtn","param":{}}]})" << "unknown key 'param'";
    QTest::newRow("unknown recipe key") << R"({"steps":[],"stpes":[]})" << "unknown key 'stpes'";
    QTest::newRow("description not text") << R"({"steps":[],"description":3})" << "\"description\" must be a string";
    // Regressions from a hostile-input review: each crashed, hung or leaked a raw library message.
    const std::string deep = std::string(100000, '(') + "q" + std::string(100000, ')');
    QTest::newRow("deep nesting (stack overflow)") << QString::fromStdString(R"({"steps":[{"method":"quantize.rtn","targets":")" + deep + R"("}]})")
                                                   << "nests groups deeper than 32";
    QTest::newRow("nested repetition (hang)") << R"({"steps":[{"method":"quantize.rtn","targets":"^(.*.*)*X$"}]})" << "exponential time";
    QTest::newRow("nested repetition in ignore") << R"({"steps":[{"method":"quantize.rtn","ignore":["(a+)+b"]}]})" << "exponential time";
    QTest::newRow("many repetitions (hang)") << R"({"steps":[{"method":"quantize.rtn","overrides":[{"pattern":".*.*.*.*.*X","params":{}}]}]})"
                                             << "more than 4 unbounded repetitions";
    QTest::newRow("repeated alternatives (hang)") << R"({"steps":[{"method":"quantize.rtn","targets":"(.|..)*#"}]})" << "exponential time";
    QTest::newRow("class that ends at once") << R"({"steps":[{"method":"quantize.rtn","targets":"[^](.+)+#"}]})" << "exponential time";
    // Found by fuzz_recipe (UBSan): a count past 2^63 overflowed inside std::regex's parser; large counts build one copy
    // of the atom each.
    QTest::newRow("count past 2^63") << R"({"steps":[{"method":"quantize.rtn","targets":"q{99999999999999999999}"}]})"
                                     << "repeats something {99999999999999999999} times; counts above 1000";
    QTest::newRow("large count") << R"({"steps":[{"method":"quantize.rtn","ignore":["x{2,100000000}"]}]})" << "{2,100000000} times";
    QTest::newRow("back-reference past 2^63")
        << R"({"steps":[{"method":"quantize.rtn","overrides":[{"pattern":"K\\9929999999999999999.","params":{}}]}]})"
        << "has a back-reference \\9929999999999999999";
    QTest::newRow("enabled not boolean") << R"({"steps":[{"method":"quantize.rtn","enabled":"yes"}]})" << "\"enabled\" must be true or false";
    QTest::newRow("override params not object") << R"({"steps":[{"method":"quantize.rtn","overrides":[{"pattern":"x","params":5}]}]})"
                                                << "a \"params\" object";
    QTest::newRow("version too large") << R"({"steps":[{"method":"quantize.rtn","version":4294967297}]})" << "small whole number";
    QTest::newRow("two problems at once") << R"({"steps":[{"method":"quantize.rtn","params":{"bits":0,"x":1}}]})" << "unknown parameter 'x'";
}

void TestRecipes::badRecipesAreRefused() {
    QFETCH(QString, recipe);
    QFETCH(QString, expected);
    try {
        Recipe::fromJson(json::parse(recipe.toStdString()), "r.json");
        QFAIL("accepted a bad recipe");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains(expected), e.what());
        QVERIFY2(QString(e.what()).startsWith("r.json"), e.what());
    }
}

// Patterns real recipes use pass the safety check (the GUI's picks, budgets, the example recipes' forms).
void TestRecipes::usualPatternsAreAllowed() {
    for (const char* p : {"layers\\.0\\.", "^(?:model\\.layers\\.1\\.self_attn\\.|model\\.layers\\.3\\.mlp\\.up_proj$)",
                          "(q|k|v)_proj", "layers\\.([0-9]+)\\.(self_attn|mlp)\\..*", "mlp\\.(gate|up)_proj$", "[a-z]{2,}_proj",
                          "^model\\.layers\\.[0-9]+\\.mlp\\..*$", "(?:blk\\.[0-9]+\\.)?ffn_(up|down)", "a(bc)?d+", "layers\\.[0-9]{1,3}\\.", "x{1000}",
                          // five \\d+, one in each alternative: one at a time along any path
                          "^model\\.layers\\.\\d+\\.self_attn\\.q_proj$|^model\\.layers\\.\\d+\\.self_attn\\.k_proj$|"
                          "^model\\.layers\\.\\d+\\.self_attn\\.v_proj$|^model\\.layers\\.\\d+\\.mlp\\.gate_proj$|"
                          "^model\\.layers\\.\\d+\\.mlp\\.up_proj$", "[]x|[^]+"})
        QVERIFY2(layerPatternProblem(p).empty(), p);
}

void TestRecipes::roundTripThroughFile() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("r.json").toStdString();
    Recipe r = Recipe::fromJson(json::parse(R"({"description":"Wanda, then GPTQ","steps":[
        {"method":"prune.wanda","params":{"sparsity":0.4},"ignore":["down_proj"]},
        {"method":"quantize.gptq","params":{"bits":4,"group_size":32},"targets":"layers\\.[0-3]\\.",
         "overrides":[{"pattern":"layers\\.0\\.","params":{"bits":8}}]}]})"), "inline");
    r.save(path);
    Recipe back = Recipe::load(path);
    QCOMPARE(back.toJson(), r.toJson());
    QCOMPARE(back.steps.size(), size_t(2));
    QCOMPARE(back.description, std::string("Wanda, then GPTQ"));
    QCOMPARE(back.steps[1].overrides.at(0).params["bits"].get<int>(), 8);
    QCOMPARE(back.steps[0].ignore, std::vector<std::string>{"down_proj"});
    QCOMPARE(back.toJson()["steps"][1]["version"].get<int>(), MethodRegistry::instance().find("quantize.gptq")->version());   // recorded when saved

    // Regression (user probe): a key written twice ("steps", a parameter) silently took the last; the file is refused,
    // naming the key. The same key in two different objects is fine.
    for (const char* text : {R"({"steps":[],"steps":[{"method":"prune.magnitude"}]})",
                             R"({"steps":[{"method":"quantize.rtn","params":{"bits":4,"bits":8}}]})"}) {
        std::ofstream(path) << text;
        try {
            Recipe::load(path);
            QFAIL(text);
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).startsWith(QString::fromStdString(path)) && QString(e.what()).contains("is given twice in one object"), e.what());
        }
    }
    std::ofstream(path) << R"({"steps":[{"method":"quantize.rtn","params":{"bits":4}},{"method":"quantize.rtn","params":{"bits":8}}]})";
    QCOMPARE(Recipe::load(path).steps.size(), size_t(2));
}

// distill.kd's data and checkpoint, given relative, are relative to the file holding the recipe, not to the working
// folder (a GUI started elsewhere wrote its checkpoint there, and a resume then started over: GUI probe). Other text
// parameters, absolute paths and empty ones stay as written.
void TestRecipes::relativeFilesFollowTheirRecipe() {
    QTemporaryDir dir;
    QVERIFY(QDir(dir.path()).mkpath("recipes"));
    const std::string folder = QDir(dir.filePath("recipes")).absolutePath().toStdString();
    const std::string path = folder + "/kd.json";
    std::ofstream(path) << R"({"steps":[{"method":"distill.kd","params":{"data":"../texts/train.txt","checkpoint":"kd.ckpt",
        "layer_map":"0:0"}},{"method":"distill.kd","params":{"data":"/abs/train.txt","checkpoint":""}}]})";
    const Recipe loaded = Recipe::load(path);
    const std::string parent = QDir(QString::fromStdString(folder + "/..")).absolutePath().toStdString();
    QCOMPARE(loaded.steps[0].params["data"].get<std::string>(), parent + "/texts/train.txt");
    QCOMPARE(loaded.steps[0].params["checkpoint"].get<std::string>(), folder + "/kd.ckpt");
    QCOMPARE(loaded.steps[0].params["layer_map"].get<std::string>(), std::string("0:0"));
    QCOMPARE(loaded.steps[1].params["data"].get<std::string>(), std::string("/abs/train.txt"));
    QCOMPARE(loaded.steps[1].params["checkpoint"].get<std::string>(), std::string());

    // As a project stores it: relative until run, then against the project's folder; no folder leaves it.
    const Recipe stored = Recipe::fromJson(json::parse(R"({"steps":[{"method":"distill.kd","params":{"checkpoint":"kd.ckpt"}}]})"), "inline");
    QCOMPARE(stored.steps[0].params["checkpoint"].get<std::string>(), std::string("kd.ckpt"));
    QCOMPARE(withPathsFrom(stored, "/projects/p").steps[0].params["checkpoint"].get<std::string>(), std::string("/projects/p/kd.ckpt"));
    QCOMPARE(withPathsFrom(stored, "").steps[0].params["checkpoint"].get<std::string>(), std::string("kd.ckpt"));
    const json described = describeParams(MethodRegistry::instance().find("distill.kd")->params());
    bool fileMarked = false;
    for (const auto& p : described)
        if (p["name"] == "checkpoint") fileMarked = p.value("file", false);
    QVERIFY(fileMarked);
}

void TestRecipes::everyMethodDeclaresValidDefaults() {
    QVERIFY(MethodRegistry::instance().methods().size() >= 12);
    for (const auto* m : MethodRegistry::instance().methods()) {
        json p = resolveParams(m->id(), m->params(), json::object());   // defaults must pass their own checks
        QCOMPARE(p.size(), m->params().size());
        resolveParams(m->id(), m->params(), p);
        QVERIFY(!m->summary().empty());
    }
}

// The recipes under projects/recipes load as this build reads recipes (methods, versions, parameters, patterns).
void TestRecipes::exampleRecipesAreValid() {
    const QDir folder(QStringLiteral(CWB_SOURCE_DIR) + "/projects/recipes");
    const QStringList files = folder.entryList({"*.json"}, QDir::Files);
    QVERIFY(files.size() >= 9);
    for (const QString& file : files) {
        try {
            const Recipe recipe = Recipe::load(folder.filePath(file).toStdString());
            QVERIFY2(!recipe.steps.empty(), qPrintable(file));
        } catch (const Error& e) {
            QFAIL(qPrintable(file + ": " + e.what()));
        }
    }
}

QTEST_APPLESS_MAIN(TestRecipes)
#include "test_recipes.moc"
