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
    QTest::newRow("int4 g32 sym (packed words read in place)") << 4 << qint64(32) << true << true << false << qint64(37) << qint64(128);
    QTest::newRow("int4 g48 asym, partial group, odd columns") << 4 << qint64(48) << false << true << false << qint64(37) << qint64(101);
    QTest::newRow("int4 g32 act-order") << 4 << qint64(32) << true << false << false << qint64(37) << qint64(128);
    QTest::newRow("int4 g32 AWQ input scales") << 4 << qint64(32) << false << true << true << qint64(37) << qint64(128);
    QTest::newRow("int8 per channel, 300 rows (two tiles)") << 8 << qint64(-1) << true << true << false << qint64(300) << qint64(96);
    QTest::newRow("int8 g64 act-order") << 8 << qint64(64) << false << false << false << qint64(40) << qint64(256);
    QTest::newRow("int3 g32 (one level per nibble)") << 3 << qint64(32) << false << true << false << qint64(33) << qint64(160);
    QTest::newRow("int2 per tensor") << 2 << qint64(0) << false << true << false << qint64(20) << qint64(64);
    QTest::newRow("int5 g16 (one level per byte)") << 5 << qint64(16) << true << true << false << qint64(24) << qint64(80);
}

void TestCpuIntLinear::matchesTheDequantizedProduct() {
    QFETCH(int, bits);
    QFETCH(qint64, group);
    QFETCH(bool, symmetric);
    QFETCH(bool, ordered);
    QFETCH(bool, awq);
    QFETCH(qint64, rows);
    QFETCH(qint64, cols);
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
    // The GEMV works outside autograd; an input that needs a gradient must take a path autograd follows.
    at::manual_seed(5);
    const quant::QuantizedWeight q = quant::quantizeRtn(at::randn({48, 64}), {4, false, 32});
    std::string reason;
    auto kernel = makeCpuIntLinear(q, at::Tensor(), reason);
    QVERIFY(kernel);
    const at::Tensor dense = q.dequantize();
    for (int64_t m : {1, 20}) {
        const at::Tensor base = at::randn({m, 64});
        at::Tensor x = base.clone().requires_grad_(true), xRef = base.clone().requires_grad_(true);
        const at::Tensor target = at::randn({m, 48});
        (kernel->forward(x) * target).sum().backward();
        (at::linear(xRef, dense) * target).sum().backward();
        QVERIFY(x.grad().defined());
        QVERIFY2(relativeError(x.grad(), xRef.grad()) < 2e-5, qPrintable(QString("%1 rows").arg(m)));
    }
}

void TestCpuIntLinear::refusesWhatItCannotHold() {
    quant::QuantizedWeight empty;
    empty.spec = {4, true, 32};
    std::string reason;
    QVERIFY(makeCpuIntLinear(empty, at::Tensor(), reason) == nullptr);
    QVERIFY(reason.find("incomplete") != std::string::npos);
}

QTEST_APPLESS_MAIN(TestCpuIntLinear)
#include "test_cpu_int_linear.moc"
