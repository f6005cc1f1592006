// Which integer weights the CUDA runtime may run as one packed matrix (q/k/v, gate/up), and that the stacked
// weight is exactly the parts one under another (core/runtime/cuda_linear.h). Runs on the CPU: the rules and the
// concatenation need no GPU; tests/gpu/test_cuda_native_linear checks the fused kernels' logits.
#include <QtTest/QtTest>

#include "core/compress/quant_math.h"
#include "core/runtime/cuda_linear.h"

using namespace cwb;

class TestNativeFusion : public QObject {
    Q_OBJECT
private slots:
    void stackedWeightIsThePartsInOrder_data();
    void stackedWeightIsThePartsInOrder();
    void refusesPartsThatDiffer_data();
    void refusesPartsThatDiffer();
};

namespace {
quant::QuantizedWeight rtn(int64_t rows, int64_t cols, quant::QuantSpec spec, uint64_t seed) {
    at::manual_seed(seed);
    return quant::quantizeRtn(at::randn({rows, cols}), spec);
}
} // namespace

void TestNativeFusion::stackedWeightIsThePartsInOrder_data() {
    QTest::addColumn<int>("bits");
    QTest::addColumn<bool>("symmetric");
    QTest::addColumn<qint64>("group");
    QTest::newRow("int4 g32 sym") << 4 << true << qint64(32);
    QTest::newRow("int4 g128 asym, partial group") << 4 << false << qint64(128);
    QTest::newRow("int8 per channel") << 8 << true << qint64(-1);
}

void TestNativeFusion::stackedWeightIsThePartsInOrder() {
    QFETCH(int, bits);
    QFETCH(bool, symmetric);
    QFETCH(qint64, group);
    const quant::QuantSpec spec{bits, symmetric, group};
    const auto q = rtn(64, 200, spec, 1), k = rtn(16, 200, spec, 2), v = rtn(24, 200, spec, 3);
    std::string reason;
    QVERIFY2(canConcatenateRows({&q, &k, &v}, {at::Tensor(), at::Tensor(), at::Tensor()}, reason), reason.c_str());
    const quant::QuantizedWeight whole = concatenateRows({&q, &k, &v});
    QCOMPARE(whole.rows, int64_t(104));
    QCOMPARE(whole.cols, int64_t(200));
    QVERIFY(at::equal(whole.dequantize(), at::cat({q.dequantize(), k.dequantize(), v.dequantize()}, 0)));
    QVERIFY(at::equal(whole.levels().narrow(0, 80, 24), v.levels()));
}

void TestNativeFusion::refusesPartsThatDiffer_data() {
    QTest::addColumn<QString>("difference");
    QTest::newRow("bits") << "bits";
    QTest::newRow("group size") << "group";
    QTest::newRow("symmetry") << "symmetric";
    QTest::newRow("act-order column order") << "order";
    QTest::newRow("input scales") << "scales";
    QTest::newRow("one part without input scales") << "missing scale";
    QTest::newRow("input width") << "cols";
}

void TestNativeFusion::refusesPartsThatDiffer() {
    QFETCH(QString, difference);
    const quant::QuantSpec spec{4, true, 32};
    quant::QuantizedWeight a = rtn(32, 128, spec, 4);
    quant::QuantizedWeight b = rtn(32, 128, spec, 5);
    at::Tensor scaleA = at::ones({128}), scaleB = at::ones({128});
    if (difference == "bits") b = rtn(32, 128, {8, true, 32}, 5);
    if (difference == "group") b = rtn(32, 128, {4, true, 64}, 5);
    if (difference == "symmetric") b = rtn(32, 128, {4, false, 32}, 5);
    if (difference == "order") b.groupIndex = b.groupIndex.flip(0).contiguous();
    if (difference == "scales") scaleB = scaleB * 2;
    if (difference == "missing scale") scaleB = at::Tensor();
    if (difference == "cols") b = rtn(32, 96, spec, 5);
    std::string reason;
    QVERIFY(!canConcatenateRows({&a, &b}, {scaleA, scaleB}, reason));
    QVERIFY(!reason.empty());
    QVERIFY(canConcatenateRows({&a, &a}, {scaleA, scaleA}, reason));   // the same part twice always fits
}

QTEST_APPLESS_MAIN(TestNativeFusion)
#include "test_native_fusion.moc"
