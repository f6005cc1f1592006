// Integer layers computed on the CPU from their packed levels (core/runtime/cpu_int_linear.h) against the dense path
// they replace: at::linear of the layer's prepared input and its dequantized weight. Every bit width from 2 to 8,
// group sizes that divide the columns and one that leaves a partial group, per channel and per tensor, act-order,
// AWQ input scales; the GEMV (up to 8 input rows) and the dequantized tiles (more rows, more than one tile of weight
// rows); an input of large mean (the zero is subtracted before the product, so nothing cancels); the gradient that
// flows back to an input that needs one.
#include <QtTest/QtTest>

#include <ATen/ATen.h>

#include "core/compress/compressed_layers.h"
#include "core/compress/quant_math.h"
#include "core/runtime/cpu_int_linear.h"

using namespace cwb;

class TestCpuIntLinear : public QObject {
    Q_OBJECT
private slots:
    void matchesTheDequantizedProduct_data();
    void matchesTheDequantizedProduct();
    void gradientReachesTheInput();
    void refusesWhatItCannotHold();
};

namespace {

// GPTQ's act-order form: groups formed over a random column order.
quant::QuantizedWeight actOrder(const at::Tensor& w, const quant::QuantSpec& spec) {
    const at::Tensor order = at::randperm(w.size(1), at::kLong);
    quant::QuantizedWeight q = quant::quantizeRtn(w.index_select(1, order), spec);
    const at::Tensor permuted = quant::unpackLevels(q.packed, spec.bits, q.cols);
    at::Tensor levels = at::empty_like(permuted), groups = at::empty_like(q.groupIndex);
    levels.index_copy_(1, order, permuted);
    groups.index_copy_(0, order, q.groupIndex);
    q.packed = quant::packLevels(levels, spec.bits);
    q.groupIndex = groups;
    return q;
}

// Largest |a - b| over the largest |b|.
double relativeError(const at::Tensor& a, const at::Tensor& b) {
    return (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

} // namespace

void TestCpuIntLinear::matchesTheDequantizedProduct_data() {
    QTest::addColumn<int>("bits");
    QTest::addColumn<qint64>("group");
    QTest::addColumn<bool>("symmetric");
    QTest::addColumn<bool>("ordered");   // false: act-order
    QTest::addColumn<bool>("awq");
    QTest::addColumn<qint64>("rows");
    QTest::addColumn<qint64>("cols");
    QTest::addColumn<bool>("inPlace");   // the layer's packed words are read as they are (no copy of the levels)
    QTest::newRow("int4 g32 sym (packed words read in place)") << 4 << qint64(32) << true << true << false << qint64(37) << qint64(128) << true;
    QTest::newRow("int4 g48 asym, partial group, odd columns") << 4 << qint64(48) << false << true << false << qint64(37) << qint64(101) << true;
    QTest::newRow("int4 g13: groups start off multiples of 8 and on odd columns") << 4 << qint64(13) << false << true << false << qint64(21) << qint64(100) << true;
    QTest::newRow("int4 g32 act-order") << 4 << qint64(32) << true << false << false << qint64(37) << qint64(128) << false;
    QTest::newRow("int4 g32 AWQ input scales") << 4 << qint64(32) << false << true << true << qint64(37) << qint64(128) << true;
    QTest::newRow("int8 per channel, 1100 rows (two tiles)") << 8 << qint64(-1) << true << true << false << qint64(1100) << qint64(40) << true;
    QTest::newRow("int8 g64 act-order") << 8 << qint64(64) << false << false << false << qint64(40) << qint64(256) << false;
    QTest::newRow("int8 g12 (groups off multiples of 8)") << 8 << qint64(12) << false << true << false << qint64(19) << qint64(96) << true;
    QTest::newRow("int3 g32 (one level per nibble)") << 3 << qint64(32) << false << true << false << qint64(33) << qint64(160) << false;
    QTest::newRow("int3 g13 act-order, uneven groups") << 3 << qint64(13) << false << false << false << qint64(17) << qint64(90) << false;
    QTest::newRow("int2 per tensor") << 2 << qint64(0) << false << true << false << qint64(20) << qint64(64) << false;
    QTest::newRow("int5 g16 (one level per byte)") << 5 << qint64(16) << true << true << false << qint64(24) << qint64(80) << false;
}

void TestCpuIntLinear::matchesTheDequantizedProduct() {
    QFETCH(int, bits);
    QFETCH(qint64, group);
    QFETCH(bool, symmetric);
    QFETCH(bool, ordered);
    QFETCH(bool, awq);
    QFETCH(qint64, rows);
    QFETCH(qint64, cols);
    QFETCH(bool, inPlace);
    at::manual_seed(uint64_t(bits * 1000 + rows));
    const quant::QuantSpec spec{bits, symmetric, group};
    const at::Tensor w = at::randn({rows, cols});
    const at::Tensor inputScale = awq ? at::rand({cols}) * 1.5 + 0.5 : at::Tensor();
    const quant::QuantizedWeight q = ordered ? quant::quantizeRtn(awq ? w * inputScale.unsqueeze(0) : w, spec) : actOrder(w, spec);
    const IntLinear layer(q, inputScale, "rtn");
    std::string reason;
    auto kernel = makeCpuIntLinear(q, inputScale, reason);
    QVERIFY2(kernel != nullptr, reason.c_str());
    QVERIFY(kernel->kernelName().find("CPU INT" + std::to_string(bits)) == 0);
    // Read in place, the kernel holds only the float scales and zeros beside the layer's own words.
    const size_t inPlaceBytes = size_t(q.packed.nbytes() + 2 * q.scales.numel() * 4 + (awq ? cols * 4 : 0));
    QCOMPARE(kernel->deviceBytes() == inPlaceBytes, inPlace);
    const at::Tensor dense = layer.weight();
    for (int64_t m : {1, 3, 8, 9, 40}) {   // the GEMV up to 8 rows, the tiles above
        for (double mean : {0.0, 4.0}) {
            const at::Tensor x = at::randn({m, cols}) + mean;
            const at::Tensor reference = at::linear(layer.prepareInput(x), dense);
            const at::Tensor y = kernel->forward(x);
            QCOMPARE(y.sizes().vec(), reference.sizes().vec());
            const double error = relativeError(y, reference);
            QVERIFY2(error < 2e-5, qPrintable(QString("%1 rows, mean %2: relative error %3").arg(m).arg(mean).arg(error)));
        }
    }
    // Leading dimensions are kept: [batch, tokens, cols] -> [batch, tokens, rows].
    const at::Tensor x3 = at::randn({2, 3, cols});
    QCOMPARE(kernel->forward(x3).sizes().vec(), (std::vector<int64_t>{2, 3, rows}));
    QVERIFY(relativeError(kernel->forward(x3), at::linear(layer.prepareInput(x3), dense)) < 2e-5);
}

void TestCpuIntLinear::gradientReachesTheInput() {
    // The GEMV works outside autograd; an input that needs a gradient must take a path autograd follows, through
    // act-order's column order and AWQ's input scales as well.
    at::manual_seed(5);
    const at::Tensor inputScale = at::rand({64}) + 0.5;
    for (bool permuted : {false, true}) {
        const at::Tensor w = at::randn({48, 64});
        const quant::QuantizedWeight q = permuted ? actOrder(w, {4, false, 32}) : quant::quantizeRtn(w, {4, false, 32});
        const at::Tensor scale = permuted ? inputScale : at::Tensor();
        const IntLinear layer(q, scale, "rtn");
        std::string reason;
        auto kernel = makeCpuIntLinear(q, scale, reason);
        QVERIFY(kernel);
        const at::Tensor dense = layer.weight();
        for (int64_t m : {1, 20}) {
            const at::Tensor base = at::randn({m, 64});
            at::Tensor x = base.clone().requires_grad_(true), xRef = base.clone().requires_grad_(true);
            const at::Tensor target = at::randn({m, 48});
            (kernel->forward(x) * target).sum().backward();
            (at::linear(layer.prepareInput(xRef), dense) * target).sum().backward();
            QVERIFY(x.grad().defined());
            QVERIFY2(relativeError(x.grad(), xRef.grad()) < 2e-5,
                     qPrintable(QString("%1 rows%2").arg(m).arg(permuted ? ", act-order and input scales" : "")));
        }
    }
}

void TestCpuIntLinear::refusesWhatItCannotHold() {
    quant::QuantizedWeight empty;
    empty.spec = {4, true, 32};
    std::string reason;
    QVERIFY(makeCpuIntLinear(empty, at::Tensor(), reason) == nullptr);
    QVERIFY(reason.find("incomplete") != std::string::npos);
    // Malformed weights (a hostile or careless file) take the dequantized path, which reports them; the kernel
    // never indexes past what it holds.
    quant::QuantizedWeight outside = quant::quantizeRtn(at::randn({8, 64}), {4, true, 32});
    outside.groupIndex = outside.groupIndex.clone();
    outside.groupIndex[63] = 2;   // two groups only
    QVERIFY(makeCpuIntLinear(outside, at::Tensor(), reason) == nullptr);
    QVERIFY(reason.find("group index outside") != std::string::npos);
    quant::QuantizedWeight shortZeros = quant::quantizeRtn(at::randn({8, 64}), {4, true, 32});
    shortZeros.zeros = shortZeros.zeros.narrow(1, 0, 1);
    QVERIFY(makeCpuIntLinear(shortZeros, at::Tensor(), reason) == nullptr);
    quant::QuantizedWeight fewWords = quant::quantizeRtn(at::randn({8, 64}), {4, true, 32});
    fewWords.packed = fewWords.packed.narrow(0, 0, 7);
    QVERIFY(makeCpuIntLinear(fewWords, at::Tensor(), reason) == nullptr);
    // An input of the wrong width is refused with a clear error.
    auto kernel = makeCpuIntLinear(quant::quantizeRtn(at::randn({8, 64}), {4, true, 32}), at::Tensor(), reason);
    QVERIFY(kernel);
    bool refused = false;
    try {
        kernel->forward(at::randn({2, 63}));
    } catch (const std::exception& e) {
        refused = std::string(e.what()).find("63 features, the layer 64") != std::string::npos;
    }
    QVERIFY(refused);
}

QTEST_APPLESS_MAIN(TestCpuIntLinear)
#include "test_cpu_int_linear.moc"
