// Variants that keep what they own in a scratch file instead of anonymous memory: the bytes come back exactly,
// variants built with and without one compute the same logits, and the streaming global magnitude threshold
// equals kthvalue over all weights at once.
#include <cstdlib>

#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "core/compress/compressed_layers.h"
#include "core/compress/pipeline.h"
#include "core/compress/prune_math.h"
#include "core/io/model_format.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/scratch_file.h"
#include "tests/support/synthetic_models.h"

using namespace cwb;
using namespace cwb::test;

namespace {

at::Tensor logitsOf(const Model& model) {
    Transformer rt(model);
    return rt.forward(at::tensor(std::vector<int64_t>{1, 7, 3, 9, 22, 41, 5, 60}, at::kLong).unsqueeze(0));
}

at::Tensor windows() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    at::Tensor w = at::randint(2, 64, {6, 24}, gen, at::kLong);
    w.select(1, 0).fill_(1);
    return w;
}

} // namespace

class TestScratchFile : public QObject {
    Q_OBJECT
private slots:
    void storedBytesComeBackExactly();
    void writesToAStoredTensorStayPrivate();
    void missingDirectoryIsNamed();
    void chooseScratchFollowsTheChoice();
    void variantsWithAndWithoutScratchAgree_data();
    void variantsWithAndWithoutScratchAgree();
    void streamingThresholdEqualsKthValue_data();
    void streamingThresholdEqualsKthValue();
    void thresholdRankOutOfRangeIsRefused();
};

void TestScratchFile::storedBytesComeBackExactly() {
    QTemporaryDir dir;
    auto scratch = ScratchFile::create(dir.path().toStdString());
    // Sizes around the page size: every mapping starts at a page-aligned offset of the one file.
    for (size_t bytes : {size_t(1), size_t(4095), size_t(4096), size_t(4097), size_t(100000)}) {
        std::vector<uint8_t> data(bytes);
        for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 131 + bytes);
        auto stored = scratch->store(data.data(), bytes);
        QVERIFY(std::equal(data.begin(), data.end(), stored.get()));
    }
    QCOMPARE(scratch->bytesStored(), uint64_t(1 + 4095 + 4096 + 4097 + 100000));
    at::Tensor t = at::randn({33, 17}).to(at::kHalf);
    at::Tensor back = scratch->store(t);
    QCOMPARE(back.scalar_type(), at::kHalf);
    QCOMPARE(back.sizes().vec(), t.sizes().vec());
    QVERIFY(at::equal(back, t));
    QVERIFY(!scratch->store(at::Tensor()).defined());
    // The file has no name: the directory stays empty.
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 0);
}

void TestScratchFile::writesToAStoredTensorStayPrivate() {
    QTemporaryDir dir;
    auto scratch = ScratchFile::create(dir.path().toStdString());
    at::Tensor a = scratch->store(at::ones({1024}));
    at::Tensor b = scratch->store(at::ones({1024}));
    a.mul_(3);   // copy-on-write pages: no crash, and nothing else changes
    QCOMPARE(a.sum().item<double>(), 3072.0);
    QCOMPARE(b.sum().item<double>(), 1024.0);
}

void TestScratchFile::missingDirectoryIsNamed() {
    try {
        ScratchFile::create("/nonexistent/cwb-scratch-dir");
        QFAIL("expected an error");
    } catch (const Error& e) {
        QVERIFY(QString(e.what()).contains("/nonexistent/cwb-scratch-dir"));
    }
}

void TestScratchFile::chooseScratchFollowsTheChoice() {
    QTemporaryDir dir;
    std::string note;
    QVERIFY(!chooseScratch("off", uint64_t(1) << 62, &note));
    QVERIFY(!chooseScratch("auto", 1024, &note));   // small models stay in memory
    QVERIFY(note.empty());
    QVERIFY(chooseScratch(dir.path().toStdString(), 1024, &note));
    QVERIFY(QString::fromStdString(note).contains(dir.path()));
    // A model larger than the memory there is goes to CWB_SCRATCH_DIR on "auto".
    QTemporaryDir other;
    qputenv("CWB_SCRATCH_DIR", other.path().toUtf8());
    auto automatic = chooseScratch("auto", uint64_t(1) << 62, &note);
    qunsetenv("CWB_SCRATCH_DIR");
    QVERIFY(automatic);
    QCOMPARE(QString::fromStdString(automatic->directory()), other.path());
}

void TestScratchFile::variantsWithAndWithoutScratchAgree_data() {
    QTest::addColumn<QString>("recipe");
    QTest::newRow("magnitude global") << R"({"steps":[{"method":"prune.magnitude","params":{"sparsity":0.5,"scope":"global"}}]})";
    QTest::newRow("wanda then rtn") << R"({"steps":[{"method":"prune.wanda","params":{"sparsity":0.5}},{"method":"quantize.rtn","params":{"bits":4,"group_size":16}}]})";
    QTest::newRow("awq") << R"({"steps":[{"method":"quantize.awq","params":{"bits":4,"group_size":16}}]})";
    QTest::newRow("fp8") << R"({"steps":[{"method":"quantize.fp8","params":{}}]})";
    QTest::newRow("smoothquant") << R"({"steps":[{"method":"quantize.smoothquant","params":{}}]})";
}

void TestScratchFile::variantsWithAndWithoutScratchAgree() {
    QFETCH(QString, recipe);
    QTemporaryDir modelDir, scratchDir;
    writeHfFolder(modelDir.path().toStdString(), tinyLlamaSpec(), randomWeights(tinyLlamaSpec(), 21), ggml::Type::F16);
    auto base = loadModel(modelDir.path().toStdString());
    const Recipe r = Recipe::fromJson(nlohmann::json::parse(recipe.toStdString()), "test recipe");
    CompressionResult inMemory = compressModel(*base, r, windows());

    auto scratch = ScratchFile::create(scratchDir.path().toStdString());
    base->setScratch(scratch);
    CompressionResult spilled = compressModel(*base, r, windows());
    QVERIFY(at::equal(logitsOf(*inMemory.model), logitsOf(*spilled.model)));
    QVERIFY(scratch->bytesStored() > 0);
    // Every tensor or compressed layer the variant owns lives in the scratch file, not in anonymous memory.
    int owned = 0;
    for (const auto& name : spilled.model->tensorNames()) {
        const TensorRecord& rec = spilled.model->tensor(name);
        if (rec.file == "(in memory)") QFAIL(qPrintable("tensor kept in memory: " + QString::fromStdString(name)));
        if (QString::fromStdString(rec.file).startsWith("(scratch file")) ++owned;
    }
    size_t expected = 0;
    for (const auto& [layer, linear] : spilled.model->compressedLayers()) {
        (void)layer;
        if (auto* integer = dynamic_cast<const IntLinear*>(linear.get()))
            expected += size_t(integer->quantized().packed.numel()) * 4;
    }
    QVERIFY(owned > 0 || !spilled.model->compressedLayers().empty());
    QVERIFY(scratch->bytesStored() >= expected);
}

void TestScratchFile::streamingThresholdEqualsKthValue_data() {
    QTest::addColumn<int>("seed");
    QTest::addColumn<bool>("ties");
    QTest::addColumn<double>("fraction");
    QTest::newRow("random 10%") << 1 << false << 0.1;
    QTest::newRow("random 50%") << 2 << false << 0.5;
    QTest::newRow("ties and zeros 50%") << 3 << true << 0.5;
    QTest::newRow("ties 99%") << 4 << true << 0.99;
    QTest::newRow("first") << 5 << false << 0.0;
}

void TestScratchFile::streamingThresholdEqualsKthValue() {
    QFETCH(int, seed);
    QFETCH(bool, ties);
    QFETCH(double, fraction);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    std::vector<at::Tensor> layers = {at::randn({40, 30}, gen), at::randn({7, 300}, gen) * 1e-3, at::randn({64, 16}, gen) * 50};
    if (ties)
        for (auto& t : layers) t = at::round(t * 4) / 4;   // many equal magnitudes, zeros, both signs
    std::vector<at::Tensor> flat;
    for (const auto& t : layers) flat.push_back(t.abs().flatten());
    at::Tensor all = at::cat(flat);
    const int64_t k = std::max<int64_t>(1, int64_t(fraction * double(all.numel())));
    const float expected = std::get<0>(all.kthvalue(k)).item<float>();
    int reads = 0;
    const float got = prune::kthSmallestMagnitude([&](size_t i) { ++reads; return layers[i]; }, layers.size(), k);
    QCOMPARE(got, expected);
    QCOMPARE(reads, 6);   // two passes, one layer at a time
}

void TestScratchFile::thresholdRankOutOfRangeIsRefused() {
    std::vector<at::Tensor> layers = {at::ones({2, 2})};
    auto layerAt = [&](size_t i) { return layers[i]; };
    QVERIFY_THROWS_EXCEPTION(Error, prune::kthSmallestMagnitude(layerAt, 1, 5));
    QVERIFY_THROWS_EXCEPTION(Error, prune::kthSmallestMagnitude(layerAt, 1, 0));
}

QTEST_GUILESS_MAIN(TestScratchFile)
#include "test_scratch_file.moc"
