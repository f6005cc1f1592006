// Transformer runtime: KV-cache decode equals full prefill, batches equal single runs, observers see the
// real activations, uncached weights and attention in query blocks give the same logits, and bad input is refused.
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

namespace {

struct Fixture {
    QTemporaryDir dir;
    std::unique_ptr<Model> model;
    explicit Fixture(const ArchSpec& spec) {
        writeHfFolder(dir.path().toStdString(), spec, randomWeights(spec, 5), ggml::Type::F32);
        model = loadModel(dir.path().toStdString());
    }
};

at::Tensor ids(std::vector<int64_t> v) { return at::tensor(v, at::kLong).unsqueeze(0); }

class Recorder : public ActivationObserver {
public:
    bool wantsLinear(const std::string& name) const override { return name.find("layers.1.mlp.down_proj") != std::string::npos ||
                                                                      name.find("h.1.mlp.c_proj") != std::string::npos; }
    void onLinear(const std::string& name, const at::Tensor& in, const at::Tensor& out) override {
        names.push_back(name);
        inputs.push_back(in.clone());
        outputs.push_back(out.clone());
    }
    bool wantsHeads() const override { return true; }
    void onAttentionHeads(int64_t layer, const at::Tensor& heads) override { headShapes.push_back(heads.sizes().vec()); }
    std::vector<std::string> names;
    std::vector<at::Tensor> inputs, outputs;
    std::vector<std::vector<int64_t>> headShapes;
};

// Wants the attention probabilities (as distillation's attention loss does): they come whole, [B, H, T, keys].
class ProbsRecorder : public ActivationObserver {
public:
    bool wantsAttentionProbs() const override { return true; }
    void onAttentionProbs(int64_t layer, const at::Tensor& probs) override { shapes.push_back(probs.sizes().vec()); }
    std::vector<std::vector<int64_t>> shapes;
};

} // namespace

class TestTransformer : public QObject {
    Q_OBJECT
private slots:
    void cachedDecodeEqualsPrefill_data();
    void cachedDecodeEqualsPrefill();
    void batchEqualsSingleRuns();
    void observerSeesActivations();
    void uncachedWeightsGiveSameLogits();
    void attentionInQueryBlocksGivesSameLogits_data();
    void attentionInQueryBlocksGivesSameLogits();
    void badInputIsRefused();
};

void TestTransformer::cachedDecodeEqualsPrefill_data() {
    QTest::addColumn<bool>("gpt2");
    QTest::newRow("llama gqa") << false;
    QTest::newRow("gpt2") << true;
}

void TestTransformer::cachedDecodeEqualsPrefill() {
    QFETCH(bool, gpt2);
    Fixture f(gpt2 ? tinyGpt2Spec() : tinyLlamaSpec());
    Transformer rt(*f.model);
    const std::vector<int64_t> tokens = {3, 14, 15, 9, 26, 5, 35, 8};
    at::Tensor full = rt.forward(ids(tokens));
    auto cache = rt.makeCache(1, 16);
    at::Tensor first = rt.forward(ids({tokens[0], tokens[1], tokens[2]}), cache.get());   // prefill 3
    QCOMPARE(cache->length(), int64_t(3));
    QVERIFY(at::allclose(first, full.narrow(1, 0, 3), 1e-5, 1e-5));
    for (size_t i = 3; i < tokens.size(); ++i) {
        at::Tensor step = rt.forward(ids({tokens[i]}), cache.get());
        QVERIFY2(at::allclose(step[0][0], full[0][static_cast<int64_t>(i)], 1e-5, 1e-5), qPrintable(QString("position %1").arg(i)));
    }
    QCOMPARE(cache->length(), int64_t(tokens.size()));
}

void TestTransformer::batchEqualsSingleRuns() {
    Fixture f(tinyLlamaSpec());
    Transformer rt(*f.model);
    at::Tensor a = ids({1, 2, 3, 4, 5}), b = ids({60, 50, 40, 30, 20});
    at::Tensor both = rt.forward(at::cat({a, b}, 0));
    QVERIFY(at::allclose(both[0], rt.forward(a)[0], 1e-5, 1e-5));
    QVERIFY(at::allclose(both[1], rt.forward(b)[0], 1e-5, 1e-5));
}

void TestTransformer::observerSeesActivations() {
    for (bool gpt2 : {false, true}) {
        Fixture f(gpt2 ? tinyGpt2Spec() : tinyLlamaSpec());
        Transformer rt(*f.model);
        Recorder rec;
        rt.forward(ids({1, 2, 3, 4}), nullptr, &rec);
        QCOMPARE(rec.names.size(), size_t(1));
        const std::string layer = gpt2 ? "transformer.h.1.mlp.c_proj" : "model.layers.1.mlp.down_proj";
        QCOMPARE(rec.names[0], layer);
        at::Tensor w = f.model->floatTensor(layer + ".weight");
        at::Tensor expected = at::matmul(rec.inputs[0], w.t());
        if (gpt2) expected = expected + f.model->floatTensor(layer + ".bias");
        QVERIFY(at::allclose(rec.outputs[0], expected, 1e-5, 1e-5));
        QCOMPARE(rec.inputs[0].size(-1), f.model->spec.ffn);
        QCOMPARE(rec.headShapes.size(), size_t(f.model->spec.layers));
        QCOMPARE(rec.headShapes[0], (std::vector<int64_t>{1, 4, f.model->spec.heads, f.model->spec.headDim}));
    }
}

void TestTransformer::uncachedWeightsGiveSameLogits() {
    Fixture f(tinyLlamaSpec());
    RuntimeOptions streaming;
    streaming.cacheWeights = false;
    Transformer cached(*f.model), uncached(*f.model, streaming);
    at::Tensor t = ids({7, 8, 9, 10});
    QVERIFY(at::equal(cached.forward(t), uncached.forward(t)));
}

void TestTransformer::attentionInQueryBlocksGivesSameLogits_data() {
    QTest::addColumn<bool>("gpt2");
    QTest::newRow("llama gqa") << false;
    QTest::newRow("gpt2") << true;
}

// The CPU reference attention splits long windows into blocks of queries (RuntimeOptions::cpuAttentionBlockBytes);
// each block's causal mask starts at its own first query, also after a cached prefix.
void TestTransformer::attentionInQueryBlocksGivesSameLogits() {
    QFETCH(bool, gpt2);
    Fixture f(gpt2 ? tinyGpt2Spec() : tinyLlamaSpec());
    const int64_t tokens = 41, heads = f.model->spec.heads;
    at::Tensor window = at::randint(0, f.model->spec.vocab, {2, tokens}, at::TensorOptions().dtype(at::kLong));
    RuntimeOptions whole, blocks;
    whole.cpuAttentionBlockBytes = 0;
    // 3 query rows of a batch of 2 over all 41 keys per block: 14 blocks, the last of 2 rows.
    blocks.cpuAttentionBlockBytes = 3 * 2 * heads * tokens * int64_t(sizeof(float));
    Transformer wholeRuntime(*f.model, whole), blockRuntime(*f.model, blocks);
    const at::Tensor expected = wholeRuntime.forward(window);
    QVERIFY(at::allclose(blockRuntime.forward(window), expected, 1e-5, 1e-5));
    // An observer of the probabilities gets them for every query at once.
    ProbsRecorder probs;
    QVERIFY(at::allclose(blockRuntime.forward(window, nullptr, &probs), expected, 1e-5, 1e-5));
    QCOMPARE(probs.shapes.size(), size_t(f.model->spec.layers));
    QCOMPARE(probs.shapes[0], (std::vector<int64_t>{2, heads, tokens, tokens}));
    // After a cached prefix of 11 tokens the 30 queries see keys 0 .. 11 + i.
    auto cache = blockRuntime.makeCache(2, tokens);
    blockRuntime.forward(window.narrow(1, 0, 11), cache.get());
    const at::Tensor rest = blockRuntime.forward(window.narrow(1, 11, tokens - 11), cache.get());
    QVERIFY(at::allclose(rest, expected.narrow(1, 11, tokens - 11), 1e-5, 1e-5));
}

void TestTransformer::badInputIsRefused() {
    Fixture f(tinyGpt2Spec());
    Transformer rt(*f.model);
    QVERIFY_THROWS_EXCEPTION(Error, rt.forward(ids({1, 64})));        // vocab is 64
    QVERIFY_THROWS_EXCEPTION(Error, rt.forward(ids({-1})));
    QVERIFY_THROWS_EXCEPTION(Error, rt.forward(at::zeros({3}, at::kLong)));
    QVERIFY_THROWS_EXCEPTION(Error, rt.forward(at::zeros({1, 65}, at::kLong)));   // 64 learned positions
    auto cache = rt.makeCache(1, 4);
    rt.forward(ids({1, 2, 3}), cache.get());
    QVERIFY_THROWS_EXCEPTION(Error, rt.forward(ids({4, 5}), cache.get()));
}

QTEST_APPLESS_MAIN(TestTransformer)
#include "test_transformer.moc"
