// The real trained stories260K model: greedy generation from BOS reproduces the documented token ids,
// perplexity on the TinyStories sample is finite with an error, and the real 32k Llama-2 vocabulary
// round-trips WikiText.
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>

#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/runtime/generate.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "tests/support/test_paths.h"

using namespace cwb;

class TestStories260k : public QObject {
    Q_OBJECT
private slots:
    void greedyFromBosMatchesReadme_data();
    void greedyFromBosMatchesReadme();
    void continuationKeepsItsSpace();
    void generationEndsAtAGeneratedBos();
    void f16OnTheCpuRunsOrSaysWhy();
    void perplexityOnTinyStories();
    void llama2VocabularyRoundTripsWikiText();
};

void TestStories260k::greedyFromBosMatchesReadme_data() {
    QTest::addColumn<QString>("file");
    QTest::newRow("gguf") << "models/stories260K.gguf";
    QTest::newRow("llama2.c") << "models/stories260K.bin";
}

void TestStories260k::greedyFromBosMatchesReadme() {
    QFETCH(QString, file);
    CWB_REQUIRE_FIXTURE(path, file);
    auto model = loadModel(path.toStdString());
    QVERIFY(model->tokenizer);
    Transformer rt(*model);
    GenerateParams p;
    p.tokens = 40;
    GenerateResult r = generate(rt, *model->tokenizer, p);
    QCOMPARE(r.promptIds, (std::vector<TokenId>{1}));
    // The first 40 greedy ids from the fixtures README (a pure-Python run.c forward pass).
    const std::vector<TokenId> expected = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                           426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
                                           295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352};
    QCOMPARE(r.generatedIds, expected);
    QVERIFY(QString::fromStdString(r.text).startsWith("Once upon a time, there was a little girl named Lily."));
}

// The text of a prompt's continuation starts with the space its first word piece carries, so prompt + text reads as
// the model wrote it ("Once upon a time", not "Once upon atime"); a budget past the context is cut and says so.
void TestStories260k::continuationKeepsItsSpace() {
    CWB_REQUIRE_FIXTURE(path, "models/stories260K.gguf");
    auto model = loadModel(path.toStdString());
    Transformer rt(*model);
    GenerateParams p;
    p.prompt = "Once upon a";
    p.tokens = 8;
    GenerateResult r = generate(rt, *model->tokenizer, p);
    QVERIFY2(QString::fromStdString(r.text).startsWith(" time"), r.text.c_str());
    std::vector<TokenId> all = r.promptIds;
    all.insert(all.end(), r.generatedIds.begin(), r.generatedIds.end());
    QCOMPARE(p.prompt + r.text, model->tokenizer->decode(all));
    QVERIFY(!r.contextLimited);
    p.tokens = 100000;
    p.stopAtEos = false;
    r = generate(rt, *model->tokenizer, p);
    QVERIFY(r.contextLimited);
    QCOMPARE(int64_t(r.promptIds.size() + r.generatedIds.size()), model->spec.context);
    // A weight holding NaN: an error that says so, not "⁇" tokens.
    std::unique_ptr<Model> broken = model->clone();
    at::Tensor w = broken->floatTensor("model.layers.2.mlp.down_proj.weight");
    w.index_put_({0, 0}, std::nan(""));
    broken->replaceTensor("model.layers.2.mlp.down_proj.weight", w);
    Transformer brokenRuntime(*broken);
    p.tokens = 4;
    try {
        generate(brokenRuntime, *model->tokenizer, p);
        QFAIL("generated from NaN logits");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).startsWith("a variant built from " + QString::fromStdString(broken->path) +
                                              ": generate: the model's output is not finite"),
                 e.what());
    }
}

// A BOS generated starts another story (llama2.c's run.c stops there); the GUI's panes went on into it (GUI probe).
// The text comes as it is generated, each piece the start of the next, the last one the result's.
void TestStories260k::generationEndsAtAGeneratedBos() {
    CWB_REQUIRE_FIXTURE(path, "models/stories260K.gguf");
    auto model = loadModel(path.toStdString());
    Transformer rt(*model);
    GenerateParams p;
    p.prompt = "Once upon a time";
    p.tokens = 480;
    p.stopAtEos = false;
    const GenerateResult whole = generate(rt, *model->tokenizer, p);
    const auto bos = std::find(whole.generatedIds.begin(), whole.generatedIds.end(), model->tokenizer->bos());
    QVERIFY2(bos != whole.generatedIds.end(), "no story ends within 480 greedy tokens: nothing to check");
    p.stopAtEos = true;
    p.textInterval = 0;
    std::vector<std::string> pieces;
    p.onText = [&](const std::string& text) { pieces.push_back(text); };
    const GenerateResult story = generate(rt, *model->tokenizer, p);
    QVERIFY(story.stopped);
    QCOMPARE(story.generatedIds, std::vector<TokenId>(whole.generatedIds.begin(), bos + 1));
    QCOMPARE(pieces.size(), story.generatedIds.size());
    for (size_t i = 1; i < pieces.size(); ++i) QVERIFY2(pieces[i].compare(0, pieces[i - 1].size(), pieces[i - 1]) == 0, pieces[i].c_str());
    QCOMPARE(pieces.back(), story.text);
    QVERIFY(!story.text.empty());
}

// f16 on the CPU: LibTorch 2.x computes it; 1.13 has no f16 matrix multiply there, and the runtime says so (naming
// the types that work) instead of failing inside LibTorch with its backtrace.
void TestStories260k::f16OnTheCpuRunsOrSaysWhy() {
    CWB_REQUIRE_FIXTURE(path, "models/stories260K.gguf");
    auto model = loadModel(path.toStdString());
    RuntimeOptions options;
    options.dtype = at::kHalf;
    try {
        Transformer rt(*model, options);
        const at::Tensor logits = rt.forward(at::tensor(std::vector<int64_t>{1, 403, 407}, at::kLong).unsqueeze(0));
        QVERIFY(at::all(at::isfinite(logits.to(at::kFloat))).item<bool>());
        qInfo("f16 on the CPU runs in this LibTorch");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("f16") && QString(e.what()).contains("f32"), e.what());
        qInfo("%s", e.what());
    }
}

void TestStories260k::perplexityOnTinyStories() {
    CWB_REQUIRE_FIXTURE(path, "models/stories260K.gguf");
    CWB_REQUIRE_FIXTURE(text, "text/tinystories_v2_valid_first100.txt");
    auto model = loadModel(path.toStdString());
    Transformer rt(*model);
    std::vector<TokenId> tokens = model->tokenizer->encode(readTextFile(text.toStdString()), true);
    PerplexityParams p;
    p.ctx = 256;
    PerplexityResult r = evaluatePerplexity(rt, tokens, model->tokenizer->bos(), p);
    QCOMPARE(r.chunks, int64_t(tokens.size()) / 256);
    QCOMPARE(r.tokensScored, r.chunks * 127);
    // A trained model scores far below the uniform 512 and above 1; the error is positive and small.
    QVERIFY2(r.perplexity > 1.0 && r.perplexity < 20.0, qPrintable(QString::number(r.perplexity)));
    QVERIFY(r.error > 0 && r.error < 0.1 * r.perplexity);
    qInfo("stories260K TinyStories ctx 256: PPL %.4f +/- %.4f over %lld tokens", r.perplexity, r.error,
          static_cast<long long>(r.tokensScored));
}

void TestStories260k::llama2VocabularyRoundTripsWikiText() {
    CWB_REQUIRE_FIXTURE(path, "models/llama-2-tiny-random.gguf");
    CWB_REQUIRE_FIXTURE(text, "text/wiki.test.raw");
    auto model = loadModel(path.toStdString());
    QVERIFY(model->tokenizer);
    QCOMPARE(model->tokenizer->vocabSize(), 32000);
    std::string wiki = readTextFile(text.toStdString()).substr(0, 200000);
    wiki = wiki.substr(0, wiki.rfind('\n') + 1);   // whole lines, so no UTF-8 sequence is cut
    std::vector<TokenId> ids = model->tokenizer->encode(wiki, true);
    QCOMPARE(ids.front(), TokenId(1));
    QVERIFY(ids.size() > wiki.size() / 6 && ids.size() < wiki.size() / 2);   // subword tokens, not bytes
    QVERIFY(model->tokenizer->decode(ids) == wiki);
}

QTEST_APPLESS_MAIN(TestStories260k)
#include "test_stories260k.moc"
