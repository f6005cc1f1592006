// Perplexity and divergence: llama.cpp's chunking and error formula checked by hand; a model with a zero
// output head (uniform predictions) has perplexity exactly equal to the vocabulary size.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include <cmath>
#include <functional>

#include "core/eval/divergence.h"
#include "core/eval/perplexity.h"
#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

namespace {

std::unique_ptr<Model> writeAndLoad(const QTemporaryDir& dir, const QString& name, const WeightMap& w) {
    QDir().mkdir(dir.filePath(name));
    writeHfFolder(dir.filePath(name).toStdString(), tinyLlamaSpec(), w, ggml::Type::F32);
    return loadModel(dir.filePath(name).toStdString());
}

std::vector<TokenId> someTokens(int n) {
    std::vector<TokenId> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 7 + 3) % 64);
    return t;
}

} // namespace

class TestEvaluation : public QObject {
    Q_OBJECT
private slots:
    void accumulatorByHand();
    void chunkCounts();
    void uniformModelHasPerplexityOfVocabulary();
    void tooShortTextIsRefused();
    void identicalModelsHaveZeroDivergence();
    void divergenceMatchesDirectComputation();
    void cancelStopsEvaluation();
    void nonFiniteOutputIsAnError();
    void folderGivenAsTextIsNamed();
    void worseThanChanceIsWarned();
};

void TestEvaluation::accumulatorByHand() {
    NllAccumulator acc;
    for (double v : {1.0, 2.0, 3.0}) acc.add(v);
    QCOMPARE(acc.count(), int64_t(3));
    QCOMPARE(acc.mean(), 2.0);
    QVERIFY(std::abs(acc.perplexity() - std::exp(2.0)) < 1e-12);
    // variance of {1,2,3} = 2/3; llama.cpp: sqrt(var / (n - 1)) * ppl
    QVERIFY(std::abs(acc.perplexityError() - std::sqrt(1.0 / 3.0) * std::exp(2.0)) < 1e-12);
}

void TestEvaluation::chunkCounts() {
    PerplexityParams p;
    p.ctx = 32;
    QCOMPARE(chunkCount(100, p), int64_t(3));
    QCOMPARE(chunkCount(31, p), int64_t(0));
    p.maxChunks = 2;
    QCOMPARE(chunkCount(100, p), int64_t(2));
}

void TestEvaluation::uniformModelHasPerplexityOfVocabulary() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 9);
    w["model.norm.weight"] = at::zeros({32});   // every logit 0: each token has probability 1/64
    auto model = writeAndLoad(dir, "uniform", w);
    Transformer rt(*model);
    PerplexityParams p;
    p.ctx = 16;
    PerplexityResult r = evaluatePerplexity(rt, someTokens(50), 1, p);
    QCOMPARE(r.chunks, int64_t(3));
    QCOMPARE(r.tokensScored, int64_t(3 * (16 - 1 - 8)));   // positions ctx/2 .. ctx-2 of each chunk
    QVERIFY(std::abs(r.perplexity - 64.0) < 1e-9);
    QVERIFY(r.error < 1e-6);
}

void TestEvaluation::tooShortTextIsRefused() {
    QTemporaryDir dir;
    auto model = writeAndLoad(dir, "m", randomWeights(tinyLlamaSpec(), 1));
    Transformer rt(*model);
    PerplexityParams p;
    p.ctx = 64;
    try {
        evaluatePerplexity(rt, someTokens(40), 1, p);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY(QString(e.what()).contains("less than one chunk"));
    }
    p.ctx = 1000;   // the synthetic model's context is 128
    QVERIFY_THROWS_EXCEPTION(Error, evaluatePerplexity(rt, someTokens(2000), 1, p));
    // A context cut to a sliding window says so (user probe: only the number was given).
    auto windowed = writeAndLoad(dir, "w", randomWeights(tinyLlamaSpec(), 1));
    windowed->spec.slidingWindow = windowed->spec.context;
    Transformer wrt(*windowed);
    try {
        evaluatePerplexity(wrt, someTokens(2000), 1, p);
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("exceeds the model's context of 128 tokens (its sliding_window"), e.what());
    }
}

void TestEvaluation::identicalModelsHaveZeroDivergence() {
    QTemporaryDir dir;
    auto model = writeAndLoad(dir, "m", randomWeights(tinyLlamaSpec(), 2));
    Transformer a(*model), b(*model);
    PerplexityParams p;
    p.ctx = 32;
    DivergenceResult r = compareModels(a, b, someTokens(100), 1, p);
    QCOMPARE(r.klMean, 0.0);
    QCOMPARE(r.top1Agreement, 1.0);
    QCOMPARE(r.positions, int64_t(3 * 15));
    QCOMPARE(r.base.perplexity, r.variant.perplexity);
    QCOMPARE(r.base.perplexity, evaluatePerplexity(a, someTokens(100), 1, p).perplexity);
}

void TestEvaluation::divergenceMatchesDirectComputation() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 2);
    auto base = writeAndLoad(dir, "base", w);
    w["model.layers.0.mlp.down_proj.weight"] = w["model.layers.0.mlp.down_proj.weight"] * 0.5;
    auto variant = writeAndLoad(dir, "variant", w);
    Transformer a(*base), b(*variant);
    PerplexityParams p;
    p.ctx = 32;
    p.maxChunks = 1;
    std::vector<TokenId> tokens = someTokens(40);
    DivergenceResult r = compareModels(a, b, tokens, 1, p);

    // Directly: one chunk, BOS first, positions 16..30 scored.
    std::vector<int64_t> chunk(tokens.begin(), tokens.begin() + 32);
    chunk[0] = 1;
    at::Tensor in = at::tensor(chunk, at::kLong).unsqueeze(0);
    at::Tensor pa = at::softmax(a.forward(in)[0].to(at::kDouble), -1).narrow(0, 16, 15);
    at::Tensor pb = at::softmax(b.forward(in)[0].to(at::kDouble), -1).narrow(0, 16, 15);
    at::Tensor kl = (pa * (pa.log() - pb.log())).sum(-1);
    QVERIFY(r.klMean > 0);
    QVERIFY(std::abs(r.klMean - kl.mean().item<double>()) < 1e-9);
    QVERIFY(std::abs(r.klMax - kl.max().item<double>()) < 1e-9);
    const double agree = (pa.argmax(-1) == pb.argmax(-1)).to(at::kDouble).mean().item<double>();
    QCOMPARE(r.top1Agreement, agree);
}

void TestEvaluation::cancelStopsEvaluation() {
    QTemporaryDir dir;
    auto model = writeAndLoad(dir, "m", randomWeights(tinyLlamaSpec(), 1));
    Transformer rt(*model);
    Feedback feedback;
    feedback.cancel();
    PerplexityParams p;
    p.ctx = 16;
    QVERIFY_THROWS_EXCEPTION(Cancelled, evaluatePerplexity(rt, someTokens(100), 1, p, &feedback));
}

// A model whose weights hold NaN: perplexity, the comparison (where max(0, NaN) once read as a KL of 0) and generation
// fail with a sentence saying what is wrong, not a NaN figure.
void TestEvaluation::nonFiniteOutputIsAnError() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 3);
    auto base = writeAndLoad(dir, "base", w);
    w["model.layers.1.mlp.down_proj.weight"].index_put_({0, 0}, std::nan(""));
    auto broken = writeAndLoad(dir, "broken", w);
    Transformer a(*base), b(*broken);
    PerplexityParams p;
    p.ctx = 32;
    // The error names the file of the model whose output it is (user probe: it named none).
    const auto expectNotFinite = [&](const std::function<void()>& run, const char* who) {
        try {
            run();
            QFAIL("a NaN output gave a result");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("not finite") && QString(e.what()).contains(who), e.what());
            QVERIFY2(e.file() == broken->path && QString(e.what()).startsWith(QString::fromStdString(broken->path) + ": "), e.what());
        }
    };
    expectNotFinite([&] { evaluatePerplexity(b, someTokens(100), 1, p); }, "perplexity");
    expectNotFinite([&] { compareModels(a, b, someTokens(100), 1, p); }, "variant");
    expectNotFinite([&] { compareModels(b, a, someTokens(100), 1, p); }, "base");
    // A variant built in memory (a clone with a broken weight) is named as built from its base's file, not as the
    // file (review: a diverged variant read as a damaged base).
    std::unique_ptr<Model> variant = base->clone();
    variant->replaceTensor("model.layers.0.mlp.up_proj.weight", variant->floatTensor("model.layers.0.mlp.up_proj.weight").fill_(INFINITY));
    Transformer c(*variant);
    try {
        compareModels(a, c, someTokens(100), 1, p);
        QFAIL("an infinite output gave a result");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).startsWith("a variant built from " + QString::fromStdString(base->path) + ": compare: the variant's") &&
                     e.file().empty(),
                 e.what());
    }
    QVERIFY(std::isfinite(evaluatePerplexity(a, someTokens(100), 1, p).perplexity));
}

void TestEvaluation::folderGivenAsTextIsNamed() {
    QTemporaryDir dir;
    try {
        readTextFile(dir.path().toStdString());
        QFAIL("a folder was read as text");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).startsWith(dir.path()) && QString(e.what()).contains("folder"), e.what());
    }
    try {
        readTextFile(dir.filePath("missing.txt").toStdString());
        QFAIL("a missing file was read");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("No such file"), e.what());
    }
    // Regression (user probe): --text /dev/zero read until memory ran out. A text past the limit is refused.
    try {
        readTextFile("/dev/zero", size_t(3) << 20);
        QFAIL("a text without end was read");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).startsWith("/dev/zero") && QString(e.what()).contains("is longer than 3"), e.what());
    }
    const QString small = dir.filePath("small.txt");
    QFile f(small);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray(3 << 20, 'a'));   // exactly the limit, over several read pieces
    f.close();
    QCOMPARE(readTextFile(small.toStdString(), size_t(3) << 20).size(), size_t(3) << 20);
    try {   // a file past the limit is refused from its size, before it is read
        readTextFile(small.toStdString(), (size_t(3) << 20) - 1);
        QFAIL("a text past the limit was read");
    } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("is longer than"), e.what());
    }
}

// A model that predicts worse than a uniform guess (user probe: broken weights gave "PPL = inf" and nothing else) is
// warned of; a uniform model, exactly at the vocabulary size, and a plausible one are not.
void TestEvaluation::worseThanChanceIsWarned() {
    QTemporaryDir dir;
    WeightMap w = randomWeights(tinyLlamaSpec(), 9);
    PerplexityParams p;
    p.ctx = 16;
    const auto measure = [&](const char* name, const WeightMap& weights) {
        auto model = writeAndLoad(dir, name, weights);
        Transformer rt(*model);
        return evaluatePerplexity(rt, someTokens(50), 1, p);
    };
    // Random weights predict worse than chance (PPL 279 over 64 tokens): warned. A trained model's figure is not.
    const PerplexityResult random = measure("random", w);
    QVERIFY2(random.perplexity > 64 && perplexityWarning(random, 64).find(" is above the vocabulary size 64") != std::string::npos,
             qPrintable(QString::number(random.perplexity)));
    PerplexityResult plausible = random;
    plausible.perplexity = 20;
    plausible.meanNll = std::log(20.0);
    QCOMPARE(perplexityWarning(plausible, 64), std::string());
    WeightMap uniform = w;
    uniform["model.norm.weight"] = at::zeros({32});
    QCOMPARE(perplexityWarning(measure("uniform", uniform), 64), std::string());
    WeightMap loud = w;
    loud["model.norm.weight"] = at::full({32}, 1e4);   // logits in the tens of thousands: confident and mostly wrong
    const PerplexityResult broken = measure("loud", loud);
    const std::string warning = perplexityWarning(broken, 64);
    QVERIFY2(broken.meanNll > std::log(64.0), qPrintable(QString::number(broken.meanNll)));
    QVERIFY2(warning.find(std::isfinite(broken.perplexity) ? " is above the vocabulary size 64" : "the perplexity overflows") !=
                 std::string::npos,
             warning.c_str());
    PerplexityResult overflow = broken;
    overflow.meanNll = 800;
    overflow.perplexity = std::exp(800.0);
    QVERIFY(std::isinf(overflow.perplexity));
    QVERIFY2(perplexityWarning(overflow, 64).find("the perplexity overflows (mean NLL 800 nats per token") == 0,
             perplexityWarning(overflow, 64).c_str());
}

QTEST_APPLESS_MAIN(TestEvaluation)
#include "test_evaluation.moc"
