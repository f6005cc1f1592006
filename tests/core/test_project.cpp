// Project files: everything round-trips through save/open, variant lineage and its refusals, a v1 file is
// migrated in place, bad files are refused with messages naming them, a save killed half way leaves either
// the old or the new state, and the file hashes match published FNV-1a test vectors.
#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/model/model.h"
#include "core/project/file_hash.h"
#include "core/project/project.h"
#include "core/project/project_runner.h"
#include "core/project/project_schema.h"
#include "core/util/error.h"
#include "core/runtime/transformer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/feedback.h"
#include "tests/support/test_paths.h"

using namespace cwb;
using nlohmann::json;

namespace {

template <typename F>
QString errorOf(F f) {
    try {
        f();
    } catch (const Error& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

// Runs SQL on a file with the plain sqlite3 API, as another program (or an older cwb) would.
bool execRaw(const QString& path, const std::string& sql) {
    sqlite3* db = nullptr;
    bool ok = sqlite3_open(path.toStdString().c_str(), &db) == SQLITE_OK;
    char* message = nullptr;
    if (ok && sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
        qWarning("sqlite: %s", message ? message : "?");
        ok = false;
    }
    sqlite3_free(message);
    sqlite3_close(db);
    return ok;
}

QStringList queryRaw(const QString& path, const std::string& sql) {
    QStringList out;
    sqlite3* db = nullptr;
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_open(path.toStdString().c_str(), &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            QStringList row;
            for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
                const unsigned char* t = sqlite3_column_text(stmt, c);
                row << (t ? QString::fromUtf8(reinterpret_cast<const char*>(t)) : QStringLiteral("<null>"));
            }
            out << row.join('|');
        }
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return out;
}

void writeBytes(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    QCOMPARE(f.write(bytes), qint64(bytes.size()));
}

ModelReference sampleModel() { return {"/models/stories260K.gguf", "gguf", 1187392, "fnv1a64:0123456789abcdef"}; }

ProjectSettings sampleSettings() {
    ProjectSettings s;
    s.calibration = {"/data/calib.txt", "fnv1a64:1111111111111111", 4096};
    s.calibrationSamples = 64;
    s.calibrationSeqLen = 256;
    s.calibrationSeed = 0xfedcba9876543210ULL;   // above INT64_MAX: exercises the unsigned bit-cast
    s.evaluation = {"/data/eval.txt", "fnv1a64:2222222222222222", 8192};
    s.evalCtx = 128;
    s.evalChunks = 7;
    return s;
}

json rtnRecipe(int bits) {
    return {{"steps", json::array({{{"method", "quantize.rtn"}, {"params", {{"bits", bits}}}}})}};
}

// base -> a -> b, base -> c
Project sampleProject(const QString& path) {
    Project p = Project::create(path.toStdString(), sampleModel(), sampleSettings());
    p.addVariant({"a", "", rtnRecipe(8), "2024-01-01T00:00:00Z", json::array({{{"format", "gguf"}, {"file", "a.gguf"}}})});
    p.addVariant({"b", "a", rtnRecipe(4), "2024-01-02T00:00:00Z", json::array()});
    p.addVariant({"c", "base", {{"steps", json::array()}}, "", json::array()});
    return p;
}

std::vector<ResultRow> rows(const std::string& metric, int count, double scale) {
    std::vector<ResultRow> out;
    for (int i = 0; i < count; ++i)
        out.push_back({"", metric, scale * (i + 0.125), i % 3 ? 0.01 * i : std::nan(""), "cpu", 4, 0.5 * i,
                       "2024-02-03T04:05:06Z", "cwb 0.1"});
    return out;
}

} // namespace

class TestProject : public QObject {
    Q_OBJECT
private slots:
    void roundTrip();
    void modelTokenizerIsKept();
    void tokenizerHashCoversTheFilesRead();
    void lineage_data();
    void lineage();
    void relativeStepFilesFollowTheProject();
    void evaluationStartsTextsAsTheTokenizerDoes();
    void layerErrorsOfSeveralStepsAreAgainstTheBase();
    void refusals_data();
    void refusals();
    void newNamesAreChecked();
    void measurementTextFallsBackToEvaluationWithAWarning();
    void storedSettingsOutOfBoundsAreNamed();
    void aRunKeepsLatencyOfTheSameRecipeAndModel();
    void removeVariant();
    void renameVariant();
    void resultsKeepWhatTheyWereMeasuredFrom();
    void cycleInFileIsRefused();
    void hostileExportEntriesAreRefused();
    void readersLeaveNoFilesBesideTheProject();
    void saveRefusesAFileChangedSinceItWasRead();
    void mergeTakesEachSidesChanges();
    void createRefusesExistingFile();
    void migratesVersion1();
    void badFilesAreRefused_data();
    void badFilesAreRefused();
    void killDuringSave();
    void hashKnownVectors_data();
    void hashKnownVectors();
    void hashFolderDependsOnNamesAndContents();
    void hashingStopsAtAnInterrupt();
    void hashErrorsNameTheFile();
    void autosaveKeepsTheSavedFileAndRecovers();
    void autosaveBaseIsRecoveredForItsRevisionOnly();

private:
    QTemporaryDir mDir;
    QString file(const QString& name) const { return mDir.filePath(name); }
};

void TestProject::roundTrip() {
    const QString path = file("round.cwbproj");
    Project::setWriter("cwb 9.9.9", "torch 2.5", "cuda 12.4");
    Project p = sampleProject(path);
    p.setResults("base", rows("perplexity", 3, 1.0));
    p.setResults("b", rows("kl", 2, 2.0));
    p.setImportance({"attention", {"layer0", "layer1"}, {"q", "k", "v"},
                     {1, 2, 3, std::numeric_limits<double>::infinity(), std::nan(""), -0.25}});
    p.setImportance({"mlp", {"layer0"}, {"up"}, {0.5}, {{"text", "/data/calib.txt"}, {"windows", 8}, {"tokens", 128}}});
    p.record("run", {{"variant", "b"}, {"threads", 4}});
    QVERIFY(p.isModified());
    p.save();
    QVERIFY(!p.isModified());

    const Project q = Project::open(path.toStdString());
    QVERIFY(q == p);
    QCOMPARE(q.variants().size(), size_t(3));
    QCOMPARE(q.variant("b").parent, std::string("a"));
    QCOMPARE(q.variant("c").parent, std::string(""));
    QCOMPARE(q.variant("a").exports, json::array({{{"format", "gguf"}, {"file", "a.gguf"}}}));
    QCOMPARE(q.variant("b").recipe, rtnRecipe(4));
    QVERIFY(!q.variant("c").created.empty());
    QCOMPARE(q.settings().calibrationSeed, uint64_t(0xfedcba9876543210ULL));
    QCOMPARE(q.settings().evalChunks, int64_t(7));
    QCOMPARE(q.model().bytes, uint64_t(1187392));
    QCOMPARE(q.results().size(), size_t(5));
    QCOMPARE(q.results("b").size(), size_t(2));
    QCOMPARE(q.results("b")[1].value, 2.0 * 1.125);
    QVERIFY(std::isnan(q.results("base")[0].error));
    QCOMPARE(q.results("base")[2].device, std::string("cpu"));
    QCOMPARE(q.results("base")[2].threads, 4);
    QVERIFY(q.importance("attention"));
    QVERIFY(std::isinf(q.importance("attention")->values[3]));
    QVERIFY(std::isnan(q.importance("attention")->values[4]));
    QCOMPARE(q.importance("attention")->columnLabels, (std::vector<std::string>{"q", "k", "v"}));
    QVERIFY(q.importance("attention")->measuredWith.is_null());
    QCOMPARE(q.importance("mlp")->measuredWith["tokens"], json(128));
    QCOMPARE(q.journal().size(), size_t(1));
    QCOMPARE(q.journal()[0].action, std::string("run"));
    QCOMPARE(q.journal()[0].detail["threads"].get<int>(), 4);
    QVERIFY(QString::fromStdString(q.journal()[0].time).contains(QRegularExpression("^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ$")));
    QCOMPARE(q.writtenBy().app, std::string("cwb 9.9.9"));
    QCOMPARE(q.writtenBy().cuda, std::string("cuda 12.4"));
    QCOMPARE(q.writtenBy().schema, 3);
    QCOMPARE(q.toJson()["variants"].size(), size_t(3));
    QCOMPARE(q.toJson()["variants"][2]["parent"], json("base"));

    // Equality must notice a difference in any part.
    Project r = q;
    r.setResults("b", rows("kl", 2, 3.0));
    QVERIFY(r != q);
    r = q;
    r.setImportance({"mlp", {"layer0"}, {"up"}, {0.75}});
    QVERIFY(r != q);
    r = q;
    r.setSettings(ProjectSettings{});
    QVERIFY(r != q);

    // Replacing a variant's results and a map of the same kind does not duplicate them.
    r = q;
    r.setResults("b", rows("kl", 1, 1.0));
    r.setImportance({"mlp", {"layer0"}, {"up"}, {0.75}});
    QCOMPARE(r.results().size(), size_t(4));
    QCOMPARE(r.importance().size(), size_t(2));
    Project::setWriter("cwb (unknown version)", "", "");
}

// The tokenizer given in place of the model's own lives in the meta table, so that schema 2 stays as it was.
void TestProject::modelTokenizerIsKept() {
    const QString path = file("tokenizer.cwbproj");
    ModelReference model = sampleModel();
    model.tokenizer = "/tokenizers/tok512/tokenizer.json";
    model.tokenizerHash = "fnv1a64:0123456789abcdef";
    Project p = Project::create(path.toStdString(), model, sampleSettings());
    p.save();
    Project q = Project::open(path.toStdString());
    QCOMPARE(q.model().tokenizer, model.tokenizer);
    QCOMPARE(q.model().tokenizerHash, model.tokenizerHash);
    QCOMPARE(q.toJson()["model"]["tokenizer_hash"], json(model.tokenizerHash));
    QCOMPARE(queryRaw(path, "SELECT value FROM meta WHERE key = 'model_tokenizer_hash'"),
             QStringList{QString::fromStdString(model.tokenizerHash)});
    QVERIFY(q == p);
    QCOMPARE(q.model().loadOptions().tokenizerPath, model.tokenizer);
    QCOMPARE(q.toJson()["model"]["tokenizer"], json(model.tokenizer));
    QCOMPARE(q.writtenBy().schema, 3);
    QCOMPARE(queryRaw(path, "SELECT value FROM meta WHERE key = 'model_tokenizer'"),
             QStringList{QString::fromStdString(model.tokenizer)});
    // Another tokenizer is a different project; none removes the row.
    ModelReference other = model;
    other.tokenizer = "/elsewhere/tok512.bin";
    Project r = q;
    r.setModel(other);
    QVERIFY(r != q);
    q.setModel(sampleModel());
    q.save();
    QVERIFY(queryRaw(path, "SELECT value FROM meta WHERE key = 'model_tokenizer'").isEmpty());
    QVERIFY(queryRaw(path, "SELECT value FROM meta WHERE key = 'model_tokenizer_hash'").isEmpty());
    const Project none = Project::open(path.toStdString());
    QCOMPARE(none.model().tokenizer, std::string());
    QCOMPARE(none.model().tokenizerHash, std::string());
    QVERIFY(!none.toJson()["model"].contains("tokenizer"));
    QVERIFY(!none.toJson()["model"].contains("tokenizer_hash"));
    // Another hash alone is another project too.
    ModelReference rehashed = model;
    rehashed.tokenizerHash = "fnv1a64:fedcba9876543210";
    Project s = p;
    s.setModel(rehashed);
    QVERIFY(s != p);
}

// A project's tokenizer hash covers what the tokenizer reads: a folder and its tokenizer.json hash alike, and so do the
// same files moved; a changed tokenizer.json or tokenizer_config.json beside it changes the hash; files the tokenizer
// does not read do not.
void TestProject::tokenizerHashCoversTheFilesRead() {
    QTemporaryDir dir;
    const auto write = [&](const QString& name, const QByteArray& bytes) {
        QFile f(dir.filePath(name));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(bytes);
    };
    QVERIFY(QDir(dir.path()).mkpath("tok"));
    write("tok/tokenizer.json", R"({"model": {"type": "BPE", "vocab": {}}})");
    write("tok/tokenizer_config.json", R"({"bos_token": "<s>"})");
    write("tok/README.md", "not read by the tokenizer");
    const std::string folder = dir.filePath("tok").toStdString();
    const std::string ofFolder = hashTokenizer(folder), ofFile = hashTokenizer(folder + "/tokenizer.json");
    QVERIFY(ofFolder.rfind("fnv1a64:", 0) == 0);
    QCOMPARE(ofFile, ofFolder);
    write("tok/README.md", "changed, still not read");
    QCOMPARE(hashTokenizer(folder), ofFolder);
    QVERIFY(QDir().rename(dir.filePath("tok"), dir.filePath("moved")));
    const std::string moved = dir.filePath("moved").toStdString();
    QCOMPARE(hashTokenizer(moved), ofFolder);
    write("moved/tokenizer_config.json", R"({"bos_token": "<|begin_of_text|>"})");
    const std::string configChanged = hashTokenizer(moved);
    QVERIFY(configChanged != ofFolder);
    std::string last = configChanged;
    for (const QString& name : {"chat_template.jinja", "chat_template.json", "generation_config.json", "tokenizer.json"}) {
        write("moved/" + name, "{\"changed\": \"" + name.toUtf8() + "\"}");
        const std::string now = hashTokenizer(moved);
        QVERIFY2(now != last, qPrintable(name));
        last = now;
    }
    // What a replay says: nothing when the hash agrees or none was recorded; a changed hash or a tokenizer given in
    // place of the model's own is named.
    Model ownTokenizer;   // read with a tokenizer of its own file (no Model::metadata "tokenizer")
    ModelReference recorded;
    recorded.tokenizer = moved;
    recorded.tokenizerHash = last;
    std::string used;
    QCOMPARE(tokenizerChangeWarning(recorded, moved, ownTokenizer, &used), std::string());
    QCOMPARE(used, last);
    QCOMPARE(tokenizerChangeWarning(recorded, "", ownTokenizer), std::string());
    recorded.tokenizerHash = ofFolder;
    QVERIFY(tokenizerChangeWarning(recorded, moved, ownTokenizer)
                .find("changed since the project was saved (hash " + ofFolder + " -> " + last) != std::string::npos);
    recorded.tokenizerHash.clear();   // projects saved before the hash was kept
    QCOMPARE(tokenizerChangeWarning(recorded, moved, ownTokenizer), std::string());
    QVERIFY(tokenizerChangeWarning(ModelReference(), moved, ownTokenizer)
                .find("model's own tokenizer; " + moved + " replaces it") != std::string::npos);
    // Nothing given: the tokenizer file found beside the model (llama2.c) is checked against the recorded hash.
    const std::string bin = dir.filePath("tok.bin").toStdString();
    write("tok.bin", QByteArray(16, '\1'));
    Model besideBin;
    besideBin.metadata["tokenizer"] = bin;
    ModelReference own;
    own.tokenizerHash = hashTokenizer(bin);
    std::string binHash;
    QCOMPARE(tokenizerChangeWarning(own, "", besideBin, &binHash), std::string());
    QCOMPARE(binHash, own.tokenizerHash);
    write("tok.bin", QByteArray(17, '\1'));
    QVERIFY(tokenizerChangeWarning(own, "", besideBin).find("the model's tokenizer file " + bin + " changed") !=
            std::string::npos);
    QCOMPARE(hashTokenizer(dir.filePath("tok.bin").toStdString()), hashFiles({{"tokenizer", dir.filePath("tok.bin").toStdString()}}));
    QVERIFY(QFile::copy(dir.filePath("tok.bin"), dir.filePath("renamed.bin")));   // renamed: the same tokenizer
    QCOMPARE(hashTokenizer(dir.filePath("renamed.bin").toStdString()), hashTokenizer(dir.filePath("tok.bin").toStdString()));
    write("notes.txt", "x");
    for (const QString& bad : {dir.filePath("missing.json"), dir.filePath("notes.txt")}) {
        try {
            hashTokenizer(bad.toStdString());
            QFAIL("a path that is not a tokenizer was hashed");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains(bad), e.what());
        }
    }
}

void TestProject::lineage_data() {
    QTest::addColumn<QString>("variant");
    QTest::addColumn<QStringList>("expected");
    QTest::newRow("grandchild") << "b" << QStringList{"a", "b"};
    QTest::newRow("child of base") << "a" << QStringList{"a"};
    QTest::newRow("explicit base parent") << "c" << QStringList{"c"};
    QTest::newRow("the base itself") << "base" << QStringList{};
}

void TestProject::lineage() {
    QFETCH(QString, variant);
    QFETCH(QStringList, expected);
    const QString path = file("lineage-" + variant + ".cwbproj");
    const Project p = sampleProject(path);
    QStringList got;
    for (const auto& n : p.lineage(variant.toStdString())) got << QString::fromStdString(n);
    QCOMPARE(got, expected);
    QVERIFY(errorOf([&] { p.lineage("nope"); }).contains("no variant named 'nope'"));
}

// A step's relative file (distill.kd's checkpoint) is the project folder's when the variant is built, wherever the
// GUI or `cwb project run` was started (it went to the working folder: GUI probe); the stored recipe keeps it relative.
void TestProject::relativeStepFilesFollowTheProject() {
    const QString path = file("relative.cwbproj");
    Project p = Project::create(path.toStdString(), sampleModel(), sampleSettings());
    p.addVariant({"kd", "", {{"steps", json::array({{{"method", "distill.kd"}, {"params", {{"checkpoint", "ck/kd.ckpt"}}}}})}}, "", json::array()});
    const Model base;
    const ProjectRunner runner(p, base);
    const std::string folder = QFileInfo(path).absolutePath().toStdString();
    QCOMPARE(runner.runnableRecipe("kd").steps.at(0).params["checkpoint"].get<std::string>(), folder + "/ck/kd.ckpt");
    QCOMPARE(runner.fullRecipe("kd").steps.at(0).params["checkpoint"].get<std::string>(), std::string("ck/kd.ckpt"));
    // Its folder is not there: the problem names the project's folder, not the working one.
    QVERIFY2(runner.buildProblem("kd").find(folder + "/ck/kd.ckpt") != std::string::npos, runner.buildProblem("kd").c_str());
}

// Regression (user probe): evaluation chunks started with BOS (or id 0) for every model, so Qwen2's and GPT-2's
// perplexities were not those of transformers or llama.cpp, whose tokenizers start a text without one. A chunk starts
// as the model's tokenizer starts a text: with BOS where it adds one, with the text's own token where it adds none.
void TestProject::evaluationStartsTextsAsTheTokenizerDoes() {
    CWB_REQUIRE_FIXTURE(modelPath, "models/stories260K.gguf");
    CWB_REQUIRE_FIXTURE(text, "text/tinystories_v2_valid_first100.txt");
    const std::unique_ptr<Model> withBos = loadModel(modelPath.toStdString());
    QVERIFY(withBos->tokenizer && withBos->tokenizer->addBosByDefault() && withBos->tokenizer->bos() >= 0);
    std::unique_ptr<Model> withoutBos = withBos->clone();
    TokenizerData data = *withBos->tokenizer->vocabulary();
    data.addBos = false;   // as a Qwen2 or GPT-2 vocabulary says
    withoutBos->tokenizer = makeTokenizer(data);
    QCOMPARE(withoutBos->tokenizer->textBos(), TokenId(-1));
    QCOMPARE(withBos->tokenizer->textBos(), withBos->tokenizer->bos());

    ProjectSettings settings;
    settings.evaluation = textFileReference(text.toStdString());
    settings.evalCtx = 64;
    settings.evalChunks = 3;
    PerplexityParams params;
    params.ctx = 64;
    params.maxChunks = 3;
    const std::string words = readTextFile(text.toStdString());
    int made = 0;
    const auto storedPerplexity = [&](const Model& model) {
        const Project p = Project::create(file(QString("bos-%1.cwbproj").arg(++made)).toStdString(), sampleModel(), settings);
        ProjectRunner runner(p, model);
        for (const ResultRow& r : runner.evaluate(Project::kBaseName, nullptr))
            if (r.metric == "perplexity") return r.value;
        return -1.0;
    };
    const auto direct = [&](const Model& model, bool bos) {
        Transformer runtime(model);
        return evaluatePerplexity(runtime, model.tokenizer->encode(words, bos), bos ? model.tokenizer->bos() : -1, params).perplexity;
    };
    const double without = storedPerplexity(*withoutBos), with = storedPerplexity(*withBos);
    QCOMPARE(without, direct(*withoutBos, false));
    QCOMPARE(with, direct(*withBos, true));
    QVERIFY2(std::abs(without - with) > 1e-6 * with, qPrintable(QString::number(without) + " " + QString::number(with)));
}

// Regression (GUI probe): a layer's stored reconstruction error was the last step's, against the weights the steps
// before it left: prune 50% then int8 showed the int8 step's ~1e-4, as if the layer were barely changed, and the
// Compare tab set it beside one-step variants. With several steps it is the finished variant's against the base.
void TestProject::layerErrorsOfSeveralStepsAreAgainstTheBase() {
    CWB_REQUIRE_FIXTURE(modelPath, "models/stories260K.gguf");
    CWB_REQUIRE_FIXTURE(text, "text/tinystories_v2_valid_first100.txt");
    const std::unique_ptr<Model> base = loadModel(modelPath.toStdString());
    ProjectSettings settings;
    settings.calibration = textFileReference(text.toStdString());
    settings.calibrationSamples = 4;
    settings.calibrationSeqLen = 64;
    settings.evaluation = settings.calibration;
    settings.evalCtx = 64;
    settings.evalChunks = 2;
    Project p = Project::create(file("errors-against-base.cwbproj").toStdString(), sampleModel(), settings);
    const json prune = {{"method", "prune.magnitude"}, {"params", {{"sparsity", 0.5}}}};
    const json int8 = {{"method", "quantize.rtn"}, {"params", {{"bits", 8}}}};
    p.addVariant({"prune", "", {{"steps", json::array({prune})}}, "", json::array()});
    p.addVariant({"int8", "", {{"steps", json::array({int8})}}, "", json::array()});
    p.addVariant({"prune-int8", "", {{"steps", json::array({prune, int8})}}, "", json::array()});
    ProjectRunner runner(p, *base);
    const auto errors = [&](const std::string& variant) {
        std::map<std::string, double> byLayer;
        for (const ResultRow& r : runner.evaluate(variant, nullptr))
            if (r.metric.rfind(kReconstructionErrorPrefix, 0) == 0) byLayer[r.metric.substr(std::strlen(kReconstructionErrorPrefix))] = r.value;
        return byLayer;
    };
    const auto pruned = errors("prune"), quantized = errors("int8"), both = errors("prune-int8");
    QCOMPARE(both.size(), base->linearLayers().size());
    QCOMPARE(pruned.size(), both.size());
    for (const auto& [layer, error] : both) {
        const QString where = QString::fromStdString(layer) + QString(": prune %1, int8 %2, prune+int8 %3")
                                  .arg(pruned.at(layer)).arg(quantized.at(layer)).arg(error);
        // Half the weights gone dominates: the two steps' error is the pruning's, give or take the int8 rounding,
        // and far above the int8 step's alone.
        QVERIFY2(std::abs(error - pruned.at(layer)) < 0.1 * pruned.at(layer), qPrintable(where));
        QVERIFY2(error > 20 * quantized.at(layer), qPrintable(where));
    }

    // Layers with no error against the base are left out, and said (GUI probe: an int8 rounding after half the MLP
    // channels went was drawn as the layer's error; after a dropped block, block 3's under block 2's name).
    p.addVariant({"channels-int8", "", {{"steps", json::array({{{"method", "prune.channels"}, {"params", {{"ratio", 0.5}}}}, int8})}}, "", json::array()});
    p.addVariant({"drop-int8", "", {{"steps", json::array({{{"method", "prune.layers"}, {"params", {{"count", 1}}}}, int8})}}, "", json::array()});
    const auto channels = errors("channels-int8");
    const auto saidLeftOut = [&](const char* why) {
        for (const std::string& note : runner.notes())
            if (note.find("no reconstruction error against the base") != std::string::npos && note.find(why) != std::string::npos) return true;
        return false;
    };
    QVERIFY(saidLeftOut("changed their shape"));
    QVERIFY(!channels.empty());
    for (const auto& [layer, error] : channels) {
        QVERIFY2(layer.find(".mlp.") == std::string::npos, layer.c_str());   // their shapes changed
        QVERIFY2(std::abs(error - quantized.at(layer)) < 0.5 * quantized.at(layer), qPrintable(QString::fromStdString(layer) +
                 QString(": %1 against int8 alone %2").arg(error).arg(quantized.at(layer))));
    }
    QVERIFY(errors("drop-int8").empty());
    QVERIFY(saidLeftOut("blocks were dropped"));

    // Results of a variant of several steps stored before (a basis without the key) are out of date, and say why;
    // a one-step variant's are not (its errors were against the base already).
    json old = p.measurementBasis("prune-int8");
    QVERIFY(old.contains("layer_errors"));
    old.erase("layer_errors");
    p.setResults("prune-int8", runner.evaluate("prune-int8", nullptr), old);
    const std::vector<std::string> why = p.resultsOutdatedBy("prune-int8");
    QCOMPARE(why.size(), size_t(1));
    QVERIFY2(why[0].find("against the step before, not the base") != std::string::npos, why[0].c_str());
    QVERIFY(!p.measurementBasis("prune").contains("layer_errors"));
    QVERIFY(!p.measurementBasis(Project::kBaseName).contains("layer_errors"));
    p.setResults("prune-int8", runner.evaluate("prune-int8", nullptr), p.measurementBasis("prune-int8"));
    QVERIFY(p.resultsOutdatedBy("prune-int8").empty());
}

void TestProject::refusals_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("parent");
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<QString>("expected");
    const QString ok = R"({"steps":[]})";
    QTest::newRow("duplicate") << "a" << "" << ok << "variant 'a' already exists";
    QTest::newRow("unknown parent") << "d" << "zzz" << ok << "unknown parent 'zzz'";
    QTest::newRow("own parent") << "d" << "d" << ok << "cannot derive from itself";
    QTest::newRow("reserved name") << "base" << "" << ok << "'base' is reserved";
    QTest::newRow("empty name") << "" << "" << ok << "needs a name";
    QTest::newRow("recipe not an object") << "d" << "" << "[1]" << "\"steps\" array";
    QTest::newRow("recipe without steps") << "d" << "" << "{}" << "\"steps\" array";
    QTest::newRow("empty steps are fine") << "d" << "b" << ok << "";
}

void TestProject::refusals() {
    QFETCH(QString, name);
    QFETCH(QString, parent);
    QFETCH(QString, recipe);
    QFETCH(QString, expected);
    const QString path = file("refusals-" + QString(QTest::currentDataTag()).replace(' ', '_') + ".cwbproj");
    Project p = sampleProject(path);
    const size_t before = p.variants().size();
    const QString error = errorOf([&] {
        p.addVariant({name.toStdString(), parent.toStdString(), json::parse(recipe.toStdString()), "", json::array()});
    });
    if (expected.isEmpty()) {
        QVERIFY2(error.isEmpty(), qPrintable(error));
        QCOMPARE(p.variants().size(), before + 1);
        QCOMPARE(p.lineage(name.toStdString()), (std::vector<std::string>{"a", "b", "d"}));
    } else {
        QVERIFY2(error.contains(expected), qPrintable(error));
        QVERIFY2(error.startsWith(path), qPrintable(error));
        QCOMPARE(p.variants().size(), before);
    }
}

// New names are checked where a user gives one (CLI, GUI); a project holding such a name from an older build still
// takes it back (undo of a removal, Save As copies), so addVariant itself accepts it.
// Settings stored by other means than cwb (a file edited in place) are named with the project, the column and the option
// that replaces them; the GUI's samples box once stopped at 100000 where the CLI stores up to 1000000.
void TestProject::measurementTextFallsBackToEvaluationWithAWarning() {
    ProjectSettings s;
    QVERIFY(measurementText(s).path.empty());
    QVERIFY(evaluationStandInWarning(s).empty());   // no text at all: refused elsewhere, not warned
    s.evaluation = {"/texts/eval.txt", "e-hash"};
    QCOMPARE(measurementText(s).hash, std::string("e-hash"));
    QVERIFY2(evaluationStandInWarning(s).find("/texts/eval.txt") != std::string::npos, evaluationStandInWarning(s).c_str());
    s.calibration = {"/texts/calib.txt", "c-hash"};
    QCOMPARE(measurementText(s).path, std::string("/texts/calib.txt"));
    QCOMPARE(measurementText(s).hash, std::string("c-hash"));
    QVERIFY(evaluationStandInWarning(s).empty());
    // The same text as calibration, by path or by content (GUI probe: only a missing one was warned).
    s.calibration = s.evaluation;
    QVERIFY2(evaluationStandInWarning(s).find("the calibration text is the same text") != std::string::npos, evaluationStandInWarning(s).c_str());
    s.calibration = {"/elsewhere/copy.txt", "e-hash"};
    QVERIFY(!evaluationStandInWarning(s).empty());
}

void TestProject::storedSettingsOutOfBoundsAreNamed() {
    const std::string path = "/p/x.cwbproj";
    ProjectSettings fine;
    fine.calibrationSamples = kMostCalibrationSamples;
    fine.calibrationSeqLen = kLeastCalibrationSeqLen;
    fine.evalCtx = kLeastEvalCtx;
    for (int64_t chunks : {int64_t(-1), int64_t(1), int64_t(1) << 40}) {
        fine.evalChunks = chunks;
        checkStoredSettings(fine, path);   // throws on failure
    }
    const auto said = [&](ProjectSettings s) -> QString {
        try {
            checkStoredSettings(s, path);
        } catch (const Error& e) {
            return QString::fromUtf8(e.what());
        }
        return "accepted";
    };
    ProjectSettings s = fine;
    s.calibrationSamples = 0;
    QCOMPARE(said(s), QString("/p/x.cwbproj: its setting calibration_samples is 0, at least 1 is needed; store another "
                              "with cwb project set /p/x.cwbproj --samples N"));
    s.calibrationSamples = kMostCalibrationSamples + 1;
    QCOMPARE(said(s), QString("/p/x.cwbproj: its setting calibration_samples is 1000001, at most 1000000 is allowed; store "
                              "another with cwb project set /p/x.cwbproj --samples N"));
    s = fine;
    s.calibrationSeqLen = 1;
    QVERIFY2(said(s).contains("calibration_seq_len is 1, at least 2") && said(s).contains("--seq-len N"), qPrintable(said(s)));
    s = fine;
    s.evalCtx = 3;
    QVERIFY2(said(s).contains("eval_ctx is 3, at least 4") && said(s).contains("--ctx N"), qPrintable(said(s)));
    s = fine;
    s.evalChunks = 0;
    QVERIFY2(said(s).contains("eval_chunks is 0, at least 1") && said(s).contains("--chunks N"), qPrintable(said(s)));
    s.evalChunks = -2;
    QVERIFY2(said(s).contains("eval_chunks is -2"), qPrintable(said(s)));
}

// Regression (GUI probe): running a variant again replaced its rows, latency included, without a word. Latency measured
// from the same recipe and model is kept; from another recipe or model, or with no recorded basis, it is not.
void TestProject::aRunKeepsLatencyOfTheSameRecipeAndModel() {
    Project p = sampleProject(file("latency.cwbproj"));
    std::vector<ResultRow> stored = rows("perplexity", 1, 1.0);
    stored.push_back(rows("decode_ms_p50", 1, 2.0)[0]);
    stored.push_back(rows("prefill_tokens_per_second", 1, 900.0)[0]);
    p.setResults("a", stored, p.measurementBasis("a"));
    ProjectSettings s = p.settings();
    s.evalCtx = 64;   // other windows: the perplexity changes, the latency does not
    p.setSettings(s);
    const json now = p.measurementBasis("a");
    std::vector<ResultRow> kept = keepingLatency(p, "a", rows("perplexity", 1, 3.0), now);
    QCOMPARE(kept.size(), size_t(3));
    QCOMPARE(kept[0].value, 3.0 * 0.125);
    QCOMPARE(kept[1].metric, std::string("decode_ms_p50"));
    QCOMPARE(kept[2].metric, std::string("prefill_tokens_per_second"));
    json otherRecipe = now;
    otherRecipe["steps"] = json::array();
    QCOMPARE(keepingLatency(p, "a", rows("perplexity", 1, 3.0), otherRecipe).size(), size_t(1));
    json otherModel = now;
    otherModel["model"] = "fnv1a64:ffffffffffffffff";
    QCOMPARE(keepingLatency(p, "a", rows("perplexity", 1, 3.0), otherModel).size(), size_t(1));
    p.setResults("b", stored);   // measured by a build that recorded no basis
    QCOMPARE(keepingLatency(p, "b", rows("perplexity", 1, 3.0), p.measurementBasis("b")).size(), size_t(1));
}

void TestProject::newNamesAreChecked() {
    QVERIFY(QString::fromStdString(Project::newNameProblem("a,b")).contains("has a comma"));
    QVERIFY(QString::fromStdString(Project::newNameProblem("d ")).contains("starts or ends with a space"));
    QVERIFY(QString::fromStdString(Project::newNameProblem("d\te")).contains("control character"));
    QVERIFY(QString::fromStdString(Project::newNameProblem("a/b")).contains("has a slash"));   // user probe: taken, then its export failed
    QVERIFY(QString::fromStdString(Project::newNameProblem("a\\b")).contains("has a slash"));
    QCOMPARE(Project::newNameProblem("w4 g128-v2"), std::string());
    Project p = sampleProject(file("old-names.cwbproj"));
    p.addVariant({"w4,g128", "", json::parse(R"({"steps":[]})"), "", json::array()});
    p.renameVariant("w4,g128", "w4 g128");
    QVERIFY(p.hasVariant("w4 g128"));
}

void TestProject::removeVariant() {
    Project p = sampleProject(file("remove.cwbproj"));
    p.setResults("b", rows("kl", 2, 1.0));
    p.setResults("a", rows("kl", 1, 1.0));
    QVERIFY(errorOf([&] { p.removeVariant("a"); }).contains("'b' derives from it"));
    QVERIFY(errorOf([&] { p.removeVariant("zzz"); }).contains("no variant named 'zzz'"));
    QVERIFY(errorOf([&] { p.setResults("zzz", {}); }).contains("no variant named 'zzz'"));
    QVERIFY(errorOf([&] { p.setImportance({"x", {"r"}, {"c1", "c2"}, {1.0}}); }).contains("1 values for 1 x 2"));
    p.removeVariant("b");
    QVERIFY(!p.hasVariant("b"));
    QCOMPARE(p.results("b").size(), size_t(0));
    QCOMPARE(p.results("a").size(), size_t(1));
    p.removeVariant("a");
    QCOMPARE(p.variants().size(), size_t(1));
    p.save();
    QCOMPARE(Project::open(p.path()).variants().size(), size_t(1));
}

// Renaming moves the results, re-points derived variants, survives a save, and refuses taken or reserved names.
void TestProject::renameVariant() {
    Project p = sampleProject(file("rename.cwbproj"));
    p.setResults("a", rows("kl", 1, 1.0));
    const nlohmann::json recipe = p.variant("a").recipe;
    QVERIFY(errorOf([&] { p.renameVariant("a", "b"); }).contains("'b' already exists"));
    QVERIFY(errorOf([&] { p.renameVariant("a", "base"); }).contains("reserved"));
    QVERIFY(errorOf([&] { p.renameVariant("a", ""); }).contains("needs a name"));
    QVERIFY(errorOf([&] { p.renameVariant("zzz", "y"); }).contains("no variant named 'zzz'"));
    p.renameVariant("a", "a2");
    QVERIFY(!p.hasVariant("a"));
    QCOMPARE(p.variant("a2").recipe, recipe);
    QCOMPARE(p.variant("b").parent, std::string("a2"));
    QCOMPARE(p.results("a2").size(), size_t(1));
    QCOMPARE(p.results("a").size(), size_t(0));
    p.save();
    const Project reopened = Project::open(p.path());
    QCOMPARE(reopened.variant("b").parent, std::string("a2"));
    QCOMPARE(reopened.results("a2").size(), size_t(1));
    QCOMPARE(reopened.lineage("b"), (std::vector<std::string>{"a2", "b"}));
}

void TestProject::cycleInFileIsRefused() {
    const QString path = file("cycle.cwbproj");
    Project p = sampleProject(path);
    p.save();
    QVERIFY(execRaw(path, "UPDATE variants SET parent = 'b' WHERE name = 'a'"));
    const QString error = errorOf([&] { Project::open(path.toStdString()); });
    QVERIFY2(error.startsWith(path) && error.contains("parent cycle"), qPrintable(error));
}

// Regression: a project file could name an export "../../victim.txt", and --batch overwrote that file outside its
// --out folder. Export entries are now checked when a project is read and when they are set.
void TestProject::hostileExportEntriesAreRefused() {
    const QString path = file("exports.cwbproj");
    Project p = sampleProject(path);
    p.save();
    for (const char* bad : {R"([{"format":"gguf","file":"../../../victim.txt"}])", R"([{"format":"gguf","file":"/etc/x"}])",
                            R"([{"format":"hf","file":"."}])", R"([1])", R"("abc")", R"([{"format":5,"file":"a"}])",
                            R"([{"format":"gptq","file":"a","pack_head":"yes"}])"}) {
        QVERIFY(execRaw(path, std::string("UPDATE variants SET exports = '") + bad + "' WHERE name = 'a'"));
        const QString error = errorOf([&] { Project::open(path.toStdString()); });
        QVERIFY2(error.startsWith(path) && error.contains("the exports of variant 'a'"), qPrintable(error));
        QVERIFY_EXCEPTION_THROWN(p.setExports("a", json::parse(bad)), Error);
    }
    // Regression: two variants could export to one file name; --batch, which writes every export into one folder,
    // wrote both and kept the later, reporting success for each.
    const json taken = json::array({{{"format", "gguf"}, {"file", "a.gguf"}}});   // a's own entry
    QVERIFY(p.exportClashes({"base", "a", "b", "c"}).empty());
    const QString clash = errorOf([&] { p.setExports("c", taken); });
    QVERIFY2(clash.contains("'a.gguf' is written by two export entries (of variants 'a' and 'c')"), qPrintable(clash));
    QCOMPARE(p.variant("c").exports, json::array());   // left as it was
    const QString twice = errorOf([&] { p.setExports("b", json::array({taken[0], {{"format", "hf"}, {"file", "a.gguf"}}})); });
    QVERIFY2(twice.contains("'a.gguf' is written by two export entries"), qPrintable(twice));
    p.setExports("c", json::array({{{"format", "gguf"}, {"file", "c.gguf"}}}));
    p.save();
    // A file written before the check: opened as it is, refused where the exports are written together.
    QVERIFY(execRaw(path, R"(UPDATE variants SET exports = '[{"format":"hf","file":"a.gguf"}]' WHERE name = 'c')"));
    const Project old = Project::open(path.toStdString());
    QCOMPARE(old.exportClashes({"a", "c"}), std::string("'a.gguf' is written by two export entries (of variants 'a' and 'c'); "
                                                         "the later would replace the earlier"));
    QVERIFY(old.exportClashes({"c"}).empty());
    // Such a clash between two variants does not block an export entry of a third (review finding: nothing could be added).
    Project older = Project::open(path.toStdString());
    older.setExports("b", json::array({{{"format", "gguf"}, {"file", "b.gguf"}}}));
    QVERIFY_EXCEPTION_THROWN(older.setExports("b", json::array({{{"format", "gguf"}, {"file", "a.gguf"}}})), Error);
}

// Projects were kept in WAL mode, whose readers create -wal and -shm files beside the project: a colleague who only
// read it left files its owner could not write (saving then failed), and read-only media could not be read at all.
// Now: a rollback journal (readers create nothing), read-only opening for commands that only read, and a file an
// older build left in WAL mode is read without writing and switched over when it is next saved.
void TestProject::readersLeaveNoFilesBesideTheProject() {
    const QString path = file("journal.cwbproj");
    Project p = sampleProject(path);
    p.save();
    QCOMPARE(queryRaw(path, "PRAGMA journal_mode"), QStringList{"delete"});
    auto sideFiles = [&] {
        QStringList found;
        for (const char* suffix : {"-wal", "-shm", "-journal"})
            if (QFileInfo::exists(path + suffix)) found << suffix;
        return found;
    };
    QVERIFY(execRaw(path, "PRAGMA journal_mode = WAL"));   // as builds before this one left it
    const Project readOnly = Project::open(path.toStdString(), Project::Access::ReadOnly);
    QVERIFY(readOnly == p);
    QCOMPARE(sideFiles(), QStringList{});
    Project copy = readOnly;
    const QString refused = errorOf([&] { copy.save(); });
    QVERIFY2(refused.startsWith(path) && refused.contains("opened read-only"), qPrintable(refused));
    Project writable = Project::open(path.toStdString());
    writable.record("edit", {});
    writable.save();
    QCOMPARE(queryRaw(path, "PRAGMA journal_mode"), QStringList{"delete"});
    QCOMPARE(sideFiles(), QStringList{});
    QCOMPARE(Project::open(path.toStdString(), Project::Access::ReadOnly).journal().back().action, std::string("edit"));
}

// Regression: every save rewrites the whole file from memory, so a long `project run` saving its results dropped a
// variant another command had added meanwhile. A save over a file saved since it was read is now refused.
void TestProject::saveRefusesAFileChangedSinceItWasRead() {
    const QString path = file("revision.cwbproj");
    Project p = sampleProject(path);
    p.save();
    Project first = Project::open(path.toStdString()), second = Project::open(path.toStdString());
    first.addVariant({"added", "", rtnRecipe(4), "", json::array()});
    first.save();
    second.setResults("a", rows("perplexity", 1, 9.0));
    try {
        second.save();
        QFAIL("saved over another program's change");
    } catch (const ChangedOnDisk& e) {
        QVERIFY2(QString(e.what()).startsWith(path) && QString(e.what()).contains("changed by another program"), e.what());
    }
    QVERIFY(Project::open(path.toStdString()).hasVariant("added"));   // the other change is kept
    Project again = Project::open(path.toStdString());                // read again, the change goes in
    again.setResults("a", rows("perplexity", 1, 9.0));
    again.save();
    again.record("second save", {});
    again.save();                                                      // its own saves follow one another
    const Project last = Project::open(path.toStdString());
    QVERIFY(last.hasVariant("added"));
    QCOMPARE(last.results("a").size(), size_t(1));
}

// Before schema 3 a file kept no record of what its results were measured from: after the recipe or the settings
// changed, results of the old recipe were shown (and compared by --batch) as the new one's, once the GUI session that
// made the change had ended.
void TestProject::resultsKeepWhatTheyWereMeasuredFrom() {
    const QString path = file("basis.cwbproj");
    Project p = sampleProject(path);
    for (const char* v : {"base", "a", "b"}) p.setResults(v, rows("perplexity", 2, 1.0), p.measurementBasis(v));
    p.setResults("c", rows("perplexity", 1, 1.0));   // no basis given: not known, never claimed stale
    p.save();
    Project q = Project::open(path.toStdString());
    QVERIFY(q == p);
    for (const char* v : {"base", "a", "b", "c"}) QVERIFY2(q.resultsOutdatedBy(v).empty(), v);
    QCOMPARE(q.resultBasis("b"), p.measurementBasis("b"));
    QVERIFY(q.resultBasis("c").is_null());
    QCOMPARE(q.toJson()["result_basis"]["a"], p.measurementBasis("a"));

    // A description is not measured; a parent's steps are.
    json described = q.variant("a").recipe;
    described["description"] = "eight bits";
    q.setRecipe("a", described);
    QVERIFY(q.resultsOutdatedBy("a").empty());
    json steps = described;
    steps["steps"][0]["params"]["bits"] = 6;
    q.setRecipe("a", steps);
    const std::vector<std::string> recipe{"its recipe or one it derives from changed"};
    QCOMPARE(q.resultsOutdatedBy("a"), recipe);
    QCOMPARE(q.resultsOutdatedBy("b"), recipe);   // derives from a
    QVERIFY(q.resultsOutdatedBy("base").empty());
    q.setRecipe("a", described);
    QVERIFY(q.resultsOutdatedBy("b").empty());    // back as it was measured

    // Calibration concerns the variants only; evaluation everything; moving a file (same hash) nothing.
    ProjectSettings s = q.settings();
    s.calibrationSamples = 8;
    q.setSettings(s);
    QVERIFY(q.resultsOutdatedBy("base").empty());
    QCOMPARE(q.resultsOutdatedBy("a"), std::vector<std::string>{"the calibration text or windows changed"});
    s = q.settings();
    s.calibrationSamples = sampleSettings().calibrationSamples;
    s.evaluation.path = "/moved/eval.txt";
    q.setSettings(s);
    QVERIFY(q.resultsOutdatedBy("a").empty());
    s.evaluation.hash = "fnv1a64:3333333333333333";
    q.setSettings(s);
    QCOMPARE(q.resultsOutdatedBy("base"), std::vector<std::string>{"the evaluation text or windows changed"});
    QCOMPARE(q.resultsOutdatedBy("b").size(), size_t(1));
    q.setSettings(sampleSettings());

    // The model and the tokenizer: those of the project, or those a run used instead.
    ModelReference m = q.model();
    m.tokenizerHash = "fnv1a64:4444444444444444";
    q.setModel(m);
    QCOMPARE(q.resultsOutdatedBy("base"), std::vector<std::string>{"they were measured with another tokenizer"});
    q.setModel(sampleModel());
    q.setResults("a", rows("perplexity", 1, 2.0), q.measurementBasis("a", "fnv1a64:ffffffffffffffff", ""));
    QCOMPARE(q.resultsOutdatedBy("a"), std::vector<std::string>{"they were measured on another model file"});

    // Renaming moves the basis with the results; removing drops both; results set empty drop it.
    q.setResults("b", rows("perplexity", 1, 1.0), q.measurementBasis("b"));
    q.renameVariant("b", "b2");
    QCOMPARE(q.resultBasis("b2"), q.measurementBasis("b2"));
    QVERIFY(q.resultBasis("b").is_null());
    q.removeVariant("b2");
    QVERIFY(q.resultBasis("b2").is_null());
    q.setResults("base", {}, q.measurementBasis("base"));
    QVERIFY(q.resultBasis("base").is_null());
    q.save();
    QCOMPARE(queryRaw(path, "SELECT variant FROM result_basis ORDER BY variant"), QStringList{"a"});
    QVERIFY(Project::open(path.toStdString()) == q);
}

// A GUI holding a project while `cwb project run` stored results in it could only Save As: its save was refused
// (ChangedOnDisk) and nothing merged the two.
void TestProject::mergeTakesEachSidesChanges() {
    const QString path = file("merge.cwbproj");
    Project start = sampleProject(path);
    start.save();
    const Project base = Project::open(path.toStdString());
    Project mine = base;
    Project other = Project::open(path.toStdString());   // another program
    other.addVariant({"d", "a", rtnRecipe(3), "", json::array()});
    other.setResults("a", rows("perplexity", 2, 1.0), other.measurementBasis("a"));
    other.record("run", {{"variant", "a"}});
    other.save();
    mine.setRecipe("b", rtnRecipe(2));
    mine.setImportance({"heads", {"l0"}, {"h0"}, {0.5}});
    mine.record("edit", {});
    QVERIFY_THROWS_EXCEPTION(ChangedOnDisk, mine.save());
    const Project theirs = Project::open(path.toStdString());
    std::vector<std::string> conflicts;
    QVERIFY(Project::merge(base, mine, theirs, &conflicts));
    QVERIFY(conflicts.empty());
    QVERIFY(mine.hasVariant("d"));
    QCOMPARE(mine.variant("b").recipe, rtnRecipe(2));
    QCOMPARE(mine.results("a").size(), size_t(2));
    QCOMPARE(mine.resultBasis("a"), theirs.resultBasis("a"));
    QVERIFY(mine.importance("heads"));
    QCOMPARE(mine.journal().size(), size_t(2));
    QCOMPARE(mine.journal()[0].action, std::string("run"));
    QCOMPARE(mine.journal()[1].action, std::string("edit"));
    mine.save();   // over the file now
    const Project merged = Project::open(path.toStdString());
    QVERIFY(merged.hasVariant("d") && merged.importance("heads") && merged.variant("b").recipe == rtnRecipe(2));
    QCOMPARE(merged.lineage("d"), (std::vector<std::string>{"a", "d"}));

    // Both sides changed one part, differently: nothing merges, and the conflict is named.
    const Project base2 = merged;
    Project mine2 = merged, other2 = merged;
    mine2.setRecipe("c", rtnRecipe(8));
    mine2.setResults("base", rows("perplexity", 1, 5.0));
    other2.setRecipe("c", rtnRecipe(6));
    other2.setResults("base", rows("perplexity", 1, 6.0));
    other2.removeVariant("d");
    mine2.addVariant({"e", "d", rtnRecipe(4), "", json::array()});
    const Project before = mine2;
    QVERIFY(!Project::merge(base2, mine2, other2, &conflicts));
    QVERIFY(mine2 == before);
    const std::vector<std::string> expected{"variant 'c' (changed or removed on both sides)",
                                            "variant 'e' derives from 'd', which the other side removed",
                                            "the results of 'base' (measured on both sides)"};
    QCOMPARE(conflicts, expected);
    // Results measured on one side of a variant the other renamed (or removed) are not dropped without a word.
    Project mine4 = merged, other4 = merged;
    other4.setResults("c", rows("perplexity", 1, 7.0), other4.measurementBasis("c"));
    mine4.renameVariant("c", "c2");
    QVERIFY(!Project::merge(merged, mine4, other4, &conflicts));
    QCOMPARE(conflicts, std::vector<std::string>{"the results of 'c' (measured on one side; the variant was removed or renamed on the other)"});
    // Two sides that each give another variant the same export file: refused, as --batch would refuse the project.
    Project mine5 = merged, other5 = merged;
    mine5.setExports("b", json::array({{{"format", "gguf"}, {"file", "same.gguf"}}}));
    other5.setExports("c", json::array({{{"format", "gguf"}, {"file", "same.gguf"}}}));
    QVERIFY(!Project::merge(merged, mine5, other5, &conflicts));
    QCOMPARE(conflicts.size(), size_t(1));
    QVERIFY2(conflicts[0].find("exports: 'same.gguf' is written by two export entries") == 0, conflicts[0].c_str());
    // The same change on both sides is no conflict.
    Project mine3 = merged, other3 = merged;
    mine3.setRecipe("c", rtnRecipe(8));
    other3.setRecipe("c", rtnRecipe(8));
    QVERIFY(Project::merge(merged, mine3, other3, &conflicts));
    QCOMPARE(mine3.variant("c").recipe, rtnRecipe(8));
}

void TestProject::createRefusesExistingFile() {
    const QString path = file("exists.cwbproj");
    writeBytes(path, "keep me");
    const QString error = errorOf([&] { Project::create(path.toStdString(), sampleModel(), sampleSettings()); });
    QVERIFY2(error.startsWith(path) && error.contains("already exists"), qPrintable(error));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("keep me"));
}

void TestProject::migratesVersion1() {
    const QString path = file("v1.cwbproj");
    QVERIFY(execRaw(path, project_schema::ddlV1()));
    QVERIFY(execRaw(path,
                    "INSERT INTO model VALUES (1, '/m/old.gguf', 'gguf', 42, 'fnv1a64:00000000000000aa');"
                    "INSERT INTO settings (id, calibration_path, calibration_samples, eval_ctx) VALUES (1, '/c.txt', 16, 64);"
                    "INSERT INTO variants VALUES ('a', NULL, 0, '{\"steps\":[]}', '2023-05-05T00:00:00Z', '[]');"
                    "INSERT INTO variants VALUES ('b', 'a', 1, '{\"steps\":[{\"method\":\"quantize.rtn\"}]}', '', '[]');"
                    "INSERT INTO results (variant, metric, value, error, seconds, time, build) "
                    "  VALUES ('base', 'perplexity', 12.5, 0.25, 3.0, '2023-05-05T01:00:00Z', 'cwb 0.0.1');"
                    "INSERT INTO results (variant, metric, value) VALUES ('b', 'perplexity', 13.75);"));
    QCOMPARE(queryRaw(path, "SELECT value FROM meta WHERE key = 'schema_version'"), QStringList{"1"});
    QCOMPARE(queryRaw(path, "SELECT name FROM sqlite_master WHERE name IN ('journal', 'importance')"), QStringList{});

    // Read-only (show, --batch, export): migrated in a copy in memory, the file left as it is.
    const Project inMemory = Project::open(path.toStdString(), Project::Access::ReadOnly);
    QCOMPARE(queryRaw(path, "SELECT value FROM meta WHERE key = 'schema_version'"), QStringList{"1"});
    QCOMPARE(inMemory.writtenBy().schema, 1);
    QCOMPARE(inMemory.results("b")[0].value, 13.75);
    QVERIFY(inMemory.resultBasis("b").is_null());
    QVERIFY(inMemory.resultsOutdatedBy("b").empty());   // nothing recorded, nothing claimed

    Project p = Project::open(path.toStdString());
    QCOMPARE(queryRaw(path, "SELECT value FROM meta WHERE key = 'schema_version'"), QStringList{"3"});
    QCOMPARE(queryRaw(path, "SELECT name FROM sqlite_master WHERE name IN ('importance', 'journal', 'result_basis') ORDER BY name"),
             (QStringList{"importance", "journal", "result_basis"}));
    QCOMPARE(p.model().path, std::string("/m/old.gguf"));
    QCOMPARE(p.settings().calibrationSamples, int64_t(16));
    QCOMPARE(p.settings().calibrationSeqLen, int64_t(512));   // the v1 column default
    QCOMPARE(p.lineage("b"), (std::vector<std::string>{"a", "b"}));
    QCOMPARE(p.variant("b").recipe["steps"][0]["method"], json("quantize.rtn"));
    QCOMPARE(p.results().size(), size_t(2));
    QCOMPARE(p.results("base")[0].value, 12.5);
    QCOMPARE(p.results("base")[0].build, std::string("cwb 0.0.1"));
    QCOMPARE(p.results("base")[0].device, std::string(""));
    QCOMPARE(p.results("base")[0].threads, 0);
    QCOMPARE(p.results("b")[0].value, 13.75);
    QCOMPARE(p.journal().size(), size_t(1));
    QCOMPARE(p.journal()[0].action, std::string("project.migrate"));
    QCOMPARE(p.journal()[0].detail, (json{{"from", 1}, {"to", 3}}));
    QCOMPARE(p.writtenBy().schema, 3);
    QVERIFY(p.resultBasis("b").is_null());

    // The migrated layout has the same columns as a freshly created file.
    const QString fresh = file("v3-fresh.cwbproj");
    Project::create(fresh.toStdString(), sampleModel(), sampleSettings());
    for (const char* table : {"meta", "model", "settings", "variants", "results", "importance", "journal", "result_basis"}) {
        const std::string sql = std::string("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('") + table + "')";
        const QStringList migrated = queryRaw(path, sql);
        QVERIFY2(!migrated.isEmpty(), table);
        QCOMPARE(migrated, queryRaw(fresh, sql));
    }

    // New-schema data can now be stored, and opening again does not migrate twice.
    p.setImportance({"attention", {"l0"}, {"q"}, {0.5}});
    p.setResults("a", {{"", "kl", 0.125, 0, "cuda:0", 8, 1.5, "t", "cwb 1"}}, p.measurementBasis("a"));
    p.save();
    const Project q = Project::open(path.toStdString());
    QVERIFY(q == p);
    QCOMPARE(q.journal().size(), size_t(1));
    QCOMPARE(q.results("a")[0].device, std::string("cuda:0"));
    QCOMPARE(q.resultBasis("a"), p.measurementBasis("a"));
    QCOMPARE(queryRaw(path, "SELECT value FROM meta WHERE key = 'schema_version'"), QStringList{"3"});
}

void TestProject::badFilesAreRefused_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("expected");
    QTest::newRow("newer schema") << "newer" << "written by a newer cwb (schema 4); this build reads schema 1 to 3";
    QTest::newRow("older unknown schema") << "older" << "has schema 0, which is too old";
    QTest::newRow("garbage") << "garbage" << "is not a cwb project (not an SQLite database)";
    QTest::newRow("truncated") << "truncated" << "is damaged or truncated (database disk image is malformed)";
    QTest::newRow("empty file") << "empty" << "is not a cwb project (empty file)";
    QTest::newRow("other SQLite file") << "other" << "is not a cwb project (no meta table)";
    QTest::newRow("meta without version") << "noversion" << "is not a cwb project (no schema version)";
    QTest::newRow("missing file") << "missing" << "does not exist";
    QTest::newRow("folder") << "folder" << "is a folder";
}

void TestProject::badFilesAreRefused() {
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    const QString path = file("bad-" + kind + ".cwbproj");
    if (kind == "newer" || kind == "older" || kind == "truncated") {
        const QString real = file("real-" + kind + ".cwbproj");
        Project p = sampleProject(kind == "truncated" ? real : path);
        p.setResults("a", rows("kl", 500, 1.0));
        p.save();
        if (kind == "newer") QVERIFY(execRaw(path, "UPDATE meta SET value = '4' WHERE key = 'schema_version'"));
        if (kind == "older") QVERIFY(execRaw(path, "UPDATE meta SET value = '0' WHERE key = 'schema_version'"));
        if (kind == "truncated") {
            QFile f(real);
            QVERIFY(f.open(QIODevice::ReadOnly));
            writeBytes(path, f.read(100));
        }
    } else if (kind == "garbage") {
        QByteArray bytes;
        for (int i = 0; i < 10000; ++i) bytes.append(char((i * 7919) % 251));
        writeBytes(path, bytes);
    } else if (kind == "empty") {
        writeBytes(path, {});
    } else if (kind == "other") {
        QVERIFY(execRaw(path, "CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('hello');"));
    } else if (kind == "noversion") {
        QVERIFY(execRaw(path, "CREATE TABLE meta (key TEXT, value TEXT);"));
    } else if (kind == "folder") {
        QVERIFY(QDir().mkpath(path));
    }
    const QString error = errorOf([&] { Project::open(path.toStdString()); });
    QVERIFY2(error.startsWith(path + ": "), qPrintable(error));
    QVERIFY2(error.contains(expected), qPrintable(error));
    if (kind == "other")   // refusing must not have touched someone else's database
        QCOMPARE(queryRaw(path, "SELECT x FROM notes"), QStringList{"hello"});
}

namespace {

// A large state that differs in every table from the one it starts from, so a partial save would show.
Project bigState(Project p, int generation) {
    p.setResults("a", rows("kl", 20000, generation));
    p.setResults("base", rows("perplexity", 10, -generation));
    ModelReference m = p.model();
    m.hash = "fnv1a64:" + std::string(16, char('0' + generation));
    p.setModel(m);
    p.setImportance({"gen", {"r"}, {"c"}, {double(generation)}});
    p.setExports("b", json::array({{{"format", "gguf"}, {"file", "gen" + std::to_string(generation) + ".gguf"}}}));
    return p;
}

} // namespace

void TestProject::killDuringSave() {
    const QString path = file("kill.cwbproj");
    Project start = sampleProject(path);
    start.setResults("a", rows("kl", 5, 0.5));
    start.save();
    const Project states[] = {start, bigState(start, 1), bigState(start, 2)};
    int seen[3] = {0, 0, 0};
    for (int delayMs : {20, 90, 200, 350, 1500}) {
        const pid_t pid = fork();
        QVERIFY(pid >= 0);
        if (pid == 0) {
            try {
                Project current = Project::open(path.toStdString());
                for (int i = 0;; ++i) {   // each save builds on the last, as one program saving again and again
                    Project next = bigState(current, 1 + i % 2);
                    next.save();
                    current = next;
                }
            } catch (...) {
            }
            _exit(3);
        }
        usleep(useconds_t(delayMs) * 1000);
        QCOMPARE(kill(pid, SIGKILL), 0);
        int status = 0;
        QCOMPARE(waitpid(pid, &status, 0), pid);
        QVERIFY2(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the saving child stopped by itself");

        const Project after = Project::open(path.toStdString());
        int which = -1;
        for (int s = 0; s < 3; ++s)
            if (after == states[s]) which = s;
        QVERIFY2(which >= 0, qPrintable(QString("after a kill at %1 ms the project matches no complete state "
                                                "(%2 result rows)").arg(delayMs).arg(after.results().size())));
        ++seen[which];
    }
    qInfo("states seen after kills: old %d, new(1) %d, new(2) %d", seen[0], seen[1], seen[2]);
    QVERIFY2(seen[1] + seen[2] > 0, "no save completed before any kill; the test proved nothing");
}

void TestProject::hashKnownVectors_data() {
    // Published FNV-1a 64 test vectors (Landon Curt Noll's FNV test suite).
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");
    QTest::newRow("empty") << QByteArray() << "fnv1a64:cbf29ce484222325";
    QTest::newRow("a") << QByteArray("a") << "fnv1a64:af63dc4c8601ec8c";
    QTest::newRow("foobar") << QByteArray("foobar") << "fnv1a64:85944171f73967e8";
}

void TestProject::hashKnownVectors() {
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    const QString path = file("vector-" + QString(QTest::currentDataTag()) + ".bin");
    writeBytes(path, content);
    QCOMPARE(QString::fromStdString(hashFile(path.toStdString())), expected);
    QCOMPARE(fileBytes(path.toStdString()), uint64_t(content.size()));

    // More than one 1 MiB chunk; changing one byte in the second chunk changes the hash.
    QByteArray big(3 * 1024 * 1024 + 17, 'x');
    big.prepend(content);
    writeBytes(path, big);
    const std::string before = hashFile(path.toStdString());
    QCOMPARE(before, formatHash(fnv1a64(big.constData(), size_t(big.size()))));
    big[1536 * 1024] = 'y';
    writeBytes(path, big);
    QVERIFY(hashFile(path.toStdString()) != before);
}

// The regression: a command hashing a model without a Feedback (project create) went on to the end of a 13 GB file
// after Ctrl-C, since nothing checked the interrupt. Now every chunk checks it, with or without a Feedback.
void TestProject::hashingStopsAtAnInterrupt() {
    const QString path = file("interrupted.bin");
    writeBytes(path, QByteArray(2 * 1024 * 1024, 'z'));
    const std::string whole = hashFile(path.toStdString());
    requestInterrupt(2);
    bool stopped = false;
    try {
        hashFile(path.toStdString());
    } catch (const Cancelled&) {
        stopped = true;
    }
    bool folderStopped = false;
    try {
        hashFolder(mDir.path().toStdString());
    } catch (const Cancelled&) {
        folderStopped = true;
    }
    cwb::detail::interruptSignal.store(0);   // this process goes on with the other tests
    QVERIFY(stopped);
    QVERIFY(folderStopped);
    QCOMPARE(hashFile(path.toStdString()), whole);
}

void TestProject::hashFolderDependsOnNamesAndContents() {
    auto makeFolder = [&](const QString& name, const QList<QPair<QString, QByteArray>>& files) {
        const QString folder = file(name);
        QDir().mkpath(folder);
        for (const auto& f : files) writeBytes(folder + "/" + f.first, f.second);
        return folder.toStdString();
    };
    const std::string one = makeFolder("f1", {{"config.json", "{}"}, {"model.safetensors", "weights"}});
    const std::string sameReversed = makeFolder("f2", {{"model.safetensors", "weights"}, {"config.json", "{}"}});
    const std::string renamed = makeFolder("f3", {{"config.json", "{}"}, {"model2.safetensors", "weights"}});
    const std::string changed = makeFolder("f4", {{"config.json", "{}"}, {"model.safetensors", "weighty"}});
    const std::string moved = makeFolder("f5", {{"config.json", "{}w"}, {"model.safetensors", "eights"}});
    QCOMPARE(hashFolder(one), hashFolder(sameReversed));
    QVERIFY(hashFolder(one) != hashFolder(renamed));
    QVERIFY(hashFolder(one) != hashFolder(changed));
    QVERIFY(hashFolder(one) != hashFolder(moved));
    QVERIFY(QString::fromStdString(hashFolder(one)).contains(QRegularExpression("^fnv1a64:[0-9a-f]{16}$")));
    QCOMPARE(hashPath(one), hashFolder(one));
    QCOMPARE(fileBytes(one), uint64_t(2 + 7));
    QVERIFY(QDir().mkpath(QString::fromStdString(one) + "/sub"));   // sub-folders are not hashed
    QCOMPARE(hashFolder(one), hashFolder(sameReversed));
}

void TestProject::hashErrorsNameTheFile() {
    const std::string missing = file("no-such-file").toStdString();
    QVERIFY(errorOf([&] { hashFile(missing); }).startsWith(QString::fromStdString(missing) + ": does not exist"));
    QVERIFY(errorOf([&] { hashFolder(missing); }).startsWith(QString::fromStdString(missing)));
    QVERIFY(errorOf([&] { fileBytes(missing); }).startsWith(QString::fromStdString(missing)));
    QVERIFY(errorOf([&] { hashFile(mDir.path().toStdString()); }).contains("is not a regular file"));
}

void TestProject::autosaveKeepsTheSavedFileAndRecovers() {
    const QString path = file("autosave.cwbproj");
    Project p = sampleProject(path);
    p.save();
    const Project saved = Project::open(path.toStdString());
    QVERIFY(!Project::hasAutosave(path.toStdString()));
    p.setResults("a", rows("perplexity", 1, 7.0));
    p.record("edit", {{"what", "results"}});
    p.autosave();
    QVERIFY(Project::hasAutosave(path.toStdString()));
    QVERIFY(Project::open(path.toStdString()) == saved);             // the real file is as last saved
    Project recovered = Project::recoverAutosave(path.toStdString());
    QVERIFY(recovered == p);                                           // the autosave holds the edits
    QCOMPARE(QString::fromStdString(recovered.path()), path);
    QVERIFY(recovered.isModified());
    // Saving writes the real file and leaves the autosave: it may be another process's (a GUI's) unsaved work,
    // which a CLI save deleted before. The GUI drops its own when it saves.
    recovered.save();
    QVERIFY(Project::hasAutosave(path.toStdString()));
    QVERIFY(Project::open(path.toStdString()) == p);
    p.autosave();
    Project::discardAutosave(path.toStdString());
    QVERIFY(!Project::hasAutosave(path.toStdString()));
}

// A recovered autosave could not be merged with what another program saved since: the file as the editor read it was
// not kept. The editor now writes it beside the autosave, and recovery hands it back when it is of the same revision.
void TestProject::autosaveBaseIsRecoveredForItsRevisionOnly() {
    const QString path = file("autosave-base.cwbproj");
    Project p = sampleProject(path);
    p.save();
    const Project lastSaved = Project::open(path.toStdString());
    QVERIFY(Project::recoverAutosaveBase(path.toStdString()) == nullptr);   // none written
    p.setResults("a", rows("perplexity", 1, 7.0));
    p.autosaveBase(lastSaved);
    p.autosave();
    const std::string basePath = Project::autosaveBasePath(path.toStdString());
    QVERIFY(QFileInfo::exists(QString::fromStdString(basePath)));
    {
        const std::unique_ptr<Project> base = Project::recoverAutosaveBase(path.toStdString());
        QVERIFY(base != nullptr);
        QVERIFY(*base == lastSaved);
        QVERIFY(!(*base == p));
        QCOMPARE(QString::fromStdString(base->path()), path);
        // The merge it enables: another program stores a variant; the recovered edits and that variant both survive.
        Project theirs = Project::open(path.toStdString());
        theirs.addVariant({"from-cli", "", {{"steps", nlohmann::json::array()}}, "", nlohmann::json::array()});
        theirs.save();
        Project mine = Project::recoverAutosave(path.toStdString());
        QVERIFY_THROWS_EXCEPTION(ChangedOnDisk, Project(mine).save());
        std::vector<std::string> conflicts;
        QVERIFY(Project::merge(*base, mine, Project::open(path.toStdString()), &conflicts));
        mine.save();
        const Project merged = Project::open(path.toStdString());
        QVERIFY(merged.hasVariant("from-cli"));
        QCOMPARE(merged.results("a").size(), size_t(1));
    }
    // An autosave of a later revision than its base (the editor saved, then autosaved without writing the base again):
    // merging against the stale base would undo the save's changes, so there is none.
    Project again = Project::open(path.toStdString());
    again.setResults("b", rows("perplexity", 1, 8.0));
    again.autosave();
    QVERIFY(Project::recoverAutosaveBase(path.toStdString()) == nullptr);
    // Discarding the autosave removes its base too.
    Project::discardAutosave(path.toStdString());
    QVERIFY(!Project::hasAutosave(path.toStdString()));
    QVERIFY(!QFileInfo::exists(QString::fromStdString(basePath)));
}

QTEST_APPLESS_MAIN(TestProject)
#include "test_project.moc"
