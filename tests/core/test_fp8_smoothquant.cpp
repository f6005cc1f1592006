// FP8 E4M3FN rounding and codes checked by hand and against a brute-force nearest-value search, FP8/int8
// weight quantization error bounds, per-token fake quantization, and SmoothQuant's scales and invariance.
// ATen before Qt: ATen uses `slots` as an identifier, which Qt's keyword macro would rewrite.
#include "core/compress/fp8_math.h"
#include "core/compress/smoothquant_math.h"
#include "core/util/error.h"

#include <QtTest/QtTest>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

using namespace cwb;
using namespace cwb::quant;

namespace {

QByteArray show(const at::Tensor& t) {
    std::ostringstream s;
    s << t;
    return QByteArray::fromStdString(s.str());
}

// Nearest of the 127 non-negative finite E4M3FN values by exhaustive search; ties go to the even code
// (its last bit is the mantissa's); above 448 saturates.
float nearestByScan(float x) {
    const double a = std::fabs(double(x));
    int best = 0;
    for (int c = 1; c <= 0x7E; ++c) {
        const double d = std::fabs(decodeE4m3(uint8_t(c)) - a), bestD = std::fabs(decodeE4m3(uint8_t(best)) - a);
        if (d < bestD || (d == bestD && c % 2 == 0)) best = c;
    }
    return std::copysign(decodeE4m3(uint8_t(best)), x);
}

at::Tensor rowsOf(std::vector<float> values, int64_t rows) {
    return at::tensor(values, at::kFloat).reshape({rows, -1});
}

} // namespace

class TestFp8SmoothQuant : public QObject {
    Q_OBJECT
private slots:
    void roundsToE4m3_data();
    void roundsToE4m3();
    void nanStaysNan();
    void encodesKnownCodes_data();
    void encodesKnownCodes();
    void everyCodeRoundTrips();
    void roundingMatchesNearestValue();
    void fp8WeightErrorBound_data();
    void fp8WeightErrorBound();
    void fp8PerChannelBeatsPerTensor();
    void fp8PerTokenActivations();
    void tensorEncoderMatchesScalar();
    void perTokenCodesMatchFakeQuantization();
    void smoothingScalesHand_data();
    void smoothingScalesHand();
    void smoothingScalesGuardsAndRefusals();
    void absMaxOverBatches();
    void int8PerTokenExactAndTies();
    void int8PerChannelErrorBound();
    void smoothingPreservesProduct();
    void smoothingHelpsW8A8();
};

void TestFp8SmoothQuant::roundsToE4m3_data() {
    QTest::addColumn<float>("input");
    QTest::addColumn<float>("expected");
    const float inf = std::numeric_limits<float>::infinity();
    QTest::newRow("0") << 0.0f << 0.0f;
    QTest::newRow("1") << 1.0f << 1.0f;
    QTest::newRow("1.125 representable") << 1.125f << 1.125f;
    QTest::newRow("1.0625 tie → 1 (even)") << 1.0625f << 1.0f;
    QTest::newRow("1.1875 tie → 1.25 (even)") << 1.1875f << 1.25f;
    QTest::newRow("1.07 nearest") << 1.07f << 1.125f;
    QTest::newRow("0.3 → 0.3125") << 0.3f << 0.3125f;
    QTest::newRow("17 tie → 16") << 17.0f << 16.0f;
    QTest::newRow("19 tie → 20") << 19.0f << 20.0f;
    QTest::newRow("1.9375 tie → 2 (next binade)") << 1.9375f << 2.0f;
    QTest::newRow("232 tie → 224") << 232.0f << 224.0f;
    QTest::newRow("448 max") << 448.0f << 448.0f;
    QTest::newRow("449 saturates") << 449.0f << 448.0f;
    QTest::newRow("500 saturates") << 500.0f << 448.0f;
    QTest::newRow("inf saturates") << inf << 448.0f;
    QTest::newRow("-inf saturates") << -inf << -448.0f;
    QTest::newRow("2^-9 smallest subnormal") << std::ldexp(1.0f, -9) << std::ldexp(1.0f, -9);
    QTest::newRow("2^-10 tie → 0 (even)") << std::ldexp(1.0f, -10) << 0.0f;
    QTest::newRow("just above 2^-10 → 2^-9") << std::ldexp(1.001f, -10) << std::ldexp(1.0f, -9);
    QTest::newRow("3·2^-10 tie → 2^-8 (even)") << std::ldexp(3.0f, -10) << std::ldexp(1.0f, -8);
    QTest::newRow("15·2^-10 tie → 2^-6 smallest normal") << std::ldexp(15.0f, -10) << std::ldexp(1.0f, -6);
    QTest::newRow("-1.0625 tie → -1") << -1.0625f << -1.0f;
    QTest::newRow("-300 → -288") << -300.0f << -288.0f;
    QTest::newRow("-1000 saturates") << -1000.0f << -448.0f;
}

void TestFp8SmoothQuant::roundsToE4m3() {
    QFETCH(float, input);
    QFETCH(float, expected);
    const float got = roundToE4m3(input);   // exact: QCOMPARE on floats is fuzzy
    QVERIFY2(got == expected && std::signbit(got) == std::signbit(expected), qPrintable(QString::number(got, 'g', 9)));
}

void TestFp8SmoothQuant::nanStaysNan() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    QVERIFY(std::isnan(roundToE4m3(nan)));
    QCOMPARE(int(encodeE4m3(nan)), 0x7F);
    QCOMPARE(int(encodeE4m3(-nan)), 0xFF);
    QVERIFY(std::isnan(decodeE4m3(0x7F)));
    QVERIFY(std::isnan(decodeE4m3(0xFF)));
    QVERIFY(std::signbit(roundToE4m3(-0.0f)));
}

void TestFp8SmoothQuant::encodesKnownCodes_data() {
    QTest::addColumn<float>("value");
    QTest::addColumn<int>("code");
    QTest::newRow("0") << 0.0f << 0x00;
    QTest::newRow("-0") << -0.0f << 0x80;
    QTest::newRow("1 = 0.0111.000") << 1.0f << 0x38;
    QTest::newRow("-1") << -1.0f << 0xB8;
    QTest::newRow("1.125") << 1.125f << 0x39;
    QTest::newRow("448 = 0.1111.110") << 448.0f << 0x7E;
    QTest::newRow("-448") << -448.0f << 0xFE;
    QTest::newRow("1000 saturates") << 1000.0f << 0x7E;
    QTest::newRow("2^-9") << std::ldexp(1.0f, -9) << 0x01;
    QTest::newRow("7·2^-9 largest subnormal") << std::ldexp(7.0f, -9) << 0x07;
    QTest::newRow("2^-6 smallest normal") << std::ldexp(1.0f, -6) << 0x08;
    QTest::newRow("tiny negative → -0") << -1e-9f << 0x80;
}

void TestFp8SmoothQuant::encodesKnownCodes() {
    QFETCH(float, value);
    QFETCH(int, code);
    QCOMPARE(int(encodeE4m3(value)), code);
}

void TestFp8SmoothQuant::everyCodeRoundTrips() {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F) continue;
        const float v = decodeE4m3(uint8_t(c));
        QVERIFY2(std::isfinite(v), qPrintable(QString("code %1").arg(c)));
        QCOMPARE(int(encodeE4m3(v)), c);
        QVERIFY(roundToE4m3(v) == v);
    }
    for (int c = 1; c <= 0x7E; ++c) QVERIFY(decodeE4m3(uint8_t(c)) > decodeE4m3(uint8_t(c - 1)));
    QCOMPARE(decodeE4m3(0x7E), 448.0f);
    QCOMPARE(decodeE4m3(0x01), std::ldexp(1.0f, -9));
}

void TestFp8SmoothQuant::roundingMatchesNearestValue() {
    std::vector<float> inputs;
    for (int c = 0; c < 0x7E; ++c) {   // every midpoint, and just either side of it
        const float mid = 0.5f * (decodeE4m3(uint8_t(c)) + decodeE4m3(uint8_t(c + 1)));
        inputs.insert(inputs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)});
    }
    at::manual_seed(7);
    at::Tensor random = at::exp2(at::rand({4000}) * 22.0 - 12.0) * (at::rand({4000}) - 0.5).sign();
    for (int64_t i = 0; i < random.numel(); ++i) inputs.push_back(random[i].item<float>());
    for (float x : inputs)
        QVERIFY2(roundToE4m3(x) == nearestByScan(x) && roundToE4m3(-x) == -nearestByScan(x),
                 qPrintable(QString("%1 → %2, scan says %3").arg(double(x), 0, 'g', 9).arg(roundToE4m3(x)).arg(nearestByScan(x))));
    // The tensor version agrees with the scalar one everywhere, specials included.
    const float inf = std::numeric_limits<float>::infinity();
    inputs.insert(inputs.end(), {inf, -inf, 449.0f, 1e30f, -0.0f});
    at::Tensor all = at::tensor(inputs, at::kFloat);
    all = at::cat({all, -all, at::full({1}, std::numeric_limits<float>::quiet_NaN())});
    at::Tensor vectorised = roundToE4m3(all);
    for (int64_t i = 0; i < all.numel(); ++i) {
        const float scalar = roundToE4m3(all[i].item<float>()), tensor = vectorised[i].item<float>();
        QVERIFY2((std::isnan(scalar) && std::isnan(tensor)) || (scalar == tensor && std::signbit(scalar) == std::signbit(tensor)),
                 qPrintable(QString("%1: scalar %2, tensor %3").arg(all[i].item<float>()).arg(scalar).arg(tensor)));
    }
}

void TestFp8SmoothQuant::fp8WeightErrorBound_data() {
    QTest::addColumn<bool>("perChannel");
    QTest::newRow("per channel") << true;
    QTest::newRow("per tensor") << false;
}

void TestFp8SmoothQuant::fp8WeightErrorBound() {
    QFETCH(bool, perChannel);
    at::manual_seed(8);
    at::Tensor w = at::randn({16, 32}) * at::linspace(0.01, 3.0, 16).unsqueeze(1);
    w[3].zero_();
    Fp8Weight q = quantizeFp8(w, perChannel);
    QCOMPARE(q.codes.scalar_type(), at::kByte);
    QCOMPARE(q.scales.numel(), perChannel ? int64_t(16) : int64_t(1));
    QCOMPARE(q.storageBytes(), size_t(16 * 32) + size_t(q.scales.numel()) * 4);
    at::Tensor scale = (perChannel ? w.abs().amax(1) : w.abs().amax().reshape({1})) / 448.0f;
    if (perChannel) scale[3] = 1.0f;
    QVERIFY(at::allclose(q.scales, scale));
    // 3 mantissa bits: half a step is at most 1/16 of the value, or 2^-10·scale among subnormals.
    at::Tensor err = (q.dequantize() - w).abs();
    at::Tensor bound = at::maximum(w.abs() / 16.0f, at::ldexp(at::ones({1}), at::tensor({-10})) * q.scales.reshape({-1, 1}));
    QVERIFY2((err <= bound * (1 + 1e-5)).all().item<bool>(), show((err - bound).max()).constData());
    // The largest weight of each row (or of the matrix) lands on ±448.
    at::Tensor rowMax = w.abs().argmax(1);
    for (int64_t r = 0; r < 16; ++r) {
        const int code = q.codes[r][rowMax[r]].item<uint8_t>() & 0x7F;
        if (perChannel && r != 3) QCOMPARE(code, 0x7E);
    }
    QCOMPARE(int(q.codes.bitwise_and(0x7F).max().item<uint8_t>()), 0x7E);
    QVERIFY((q.dequantize()[3] == 0).all().item<bool>());
    QVERIFY_THROWS_EXCEPTION(Error, quantizeFp8(at::ones({4}), perChannel));
    at::Tensor bad = w.clone();
    bad[0][0] = std::numeric_limits<float>::infinity();
    QVERIFY_THROWS_EXCEPTION(Error, quantizeFp8(bad, perChannel));
}

void TestFp8SmoothQuant::fp8PerChannelBeatsPerTensor() {
    // E4M3 spans ~2^17, so a row 1000× smaller keeps its relative precision under a shared scale; a row
    // 10^5× smaller falls below the subnormals' 2^-9·scale step and mostly rounds to zero.
    at::manual_seed(9);
    at::Tensor w = at::randn({2, 64}) * at::tensor({1.0f, 1e-5f}).unsqueeze(1);
    const double channel = (quantizeFp8(w, true).dequantize() - w)[1].norm().item<double>();
    const double tensor = (quantizeFp8(w, false).dequantize() - w)[1].norm().item<double>();
    QVERIFY2(channel < 0.2 * tensor, qPrintable(QString("per channel %1, per tensor %2").arg(channel).arg(tensor)));
}

void TestFp8SmoothQuant::fp8PerTokenActivations() {
    // Row 0: scale 896/448 = 2, so 2.125 → 1.0625 → 1 (tie to even) → 2. Row 1: scale 7/448 = 1/64,
    // 17/64 → 17 → 16 (tie to even) → 0.25. Row 2: zeros stay zeros.
    at::Tensor x = rowsOf({2, 4, 896, 2.125f, 7, 17.0f / 64, -0.5f, 0, 0, 0, 0, 0}, 3);
    at::Tensor expected = rowsOf({2, 4, 896, 2, 7, 0.25f, -0.5f, 0, 0, 0, 0, 0}, 3);
    at::Tensor got = fakeQuantizeFp8PerToken(x);
    QVERIFY2(at::equal(got, expected), show(got).constData());
    at::Tensor batched = fakeQuantizeFp8PerToken(x.to(at::kDouble).reshape({1, 3, 4}));
    QCOMPARE(batched.scalar_type(), at::kDouble);
    QVERIFY(at::equal(batched.reshape({3, 4}).to(at::kFloat), expected));
}

void TestFp8SmoothQuant::smoothingScalesHand_data() {
    QTest::addColumn<double>("alpha");
    QTest::addColumn<QList<double>>("expected");
    // act max [4, 1, 9]; weight column max over both rows [2, 4, 0.5].
    QTest::newRow("0.5") << 0.5 << QList<double>{2.0 / std::sqrt(2.0), 1.0 / 2.0, 3.0 / std::sqrt(0.5)};
    QTest::newRow("1 = act max") << 1.0 << QList<double>{4, 1, 9};
    QTest::newRow("0 = 1/weight max") << 0.0 << QList<double>{0.5, 0.25, 2};
}

void TestFp8SmoothQuant::smoothingScalesHand() {
    QFETCH(double, alpha);
    QFETCH(QList<double>, expected);
    at::Tensor w = rowsOf({1, -4, 0.5f, -2, 1, 0.25f}, 2);
    at::Tensor s = smoothingScales(at::tensor({4.0f, 1.0f, 9.0f}), w, alpha);
    std::vector<double> e(expected.begin(), expected.end());
    QVERIFY2(at::allclose(s, at::tensor(e, at::kDouble).to(at::kFloat), 1e-6, 1e-6), show(s).constData());
}

void TestFp8SmoothQuant::smoothingScalesGuardsAndRefusals() {
    at::Tensor w = rowsOf({1, 0, 1e-12f, 2, 0, 1}, 2);   // column 1 is all zero
    at::Tensor s = smoothingScales(at::tensor({0.0f, 5.0f, 1e-20f}), w, 0.5);
    QCOMPARE(s[0].item<float>(), 1.0f);                   // silent activation
    QCOMPARE(s[1].item<float>(), 1.0f);                   // all-zero weight column
    QCOMPARE(s[2].item<float>(), 1e-5f);                  // 1e-10 / 1 clamped up
    at::Tensor act = at::ones({3});
    QVERIFY_THROWS_EXCEPTION(Error, smoothingScales(act, w, -0.1));
    QVERIFY_THROWS_EXCEPTION(Error, smoothingScales(act, w, 1.1));
    QVERIFY_THROWS_EXCEPTION(Error, smoothingScales(act, w, std::nan("")));
    QVERIFY_THROWS_EXCEPTION(Error, smoothingScales(at::ones({4}), w, 0.5));
    QVERIFY_THROWS_EXCEPTION(Error, smoothingScales(at::tensor({1.0f, -1.0f, 1.0f}), w, 0.5));
}

void TestFp8SmoothQuant::absMaxOverBatches() {
    at::manual_seed(10);
    at::Tensor a = at::randn({2, 3, 5}), b = at::randn({4, 5}) * 3;
    AbsMaxAccumulator acc(5);
    acc.add(a);
    acc.add(b);
    at::Tensor direct = at::cat({a.reshape({-1, 5}), b}).abs().amax(0);
    QVERIFY(at::equal(acc.absMax(), direct));
    QVERIFY_THROWS_EXCEPTION(Error, acc.add(at::ones({2, 4})));
}

void TestFp8SmoothQuant::tensorEncoderMatchesScalar() {
    // Every finite code's value, and NaN of both signs, through the tensor encoder (the one the CUDA runtime uses).
    std::vector<float> values;
    std::vector<int> codes;
    for (int c = 0; c < 256; ++c) {
        values.push_back((c & 0x7F) == 0x7F ? std::copysign(std::numeric_limits<float>::quiet_NaN(), (c & 0x80) ? -1.0f : 1.0f)
                                            : decodeE4m3(uint8_t(c)));
        codes.push_back(c);
    }
    at::Tensor got = encodeE4m3(at::tensor(values)).to(at::kInt);
    QVERIFY2(at::equal(got, at::tensor(codes, at::kInt)), show(got.to(at::kFloat)).constData());
}

void TestFp8SmoothQuant::perTokenCodesMatchFakeQuantization() {
    at::manual_seed(3);
    at::Tensor x = at::randn({5, 48}) * at::rand({5, 1}) * 10;
    x.select(0, 2).zero_();
    at::Tensor codes, scales;
    quantizeFp8PerToken(x, codes, scales);
    QCOMPARE(codes.scalar_type(), at::kByte);
    QCOMPARE(scales.sizes().vec(), std::vector<int64_t>({5}));
    Fp8Weight asWeight{codes, scales};   // decode(codes) · row scale, as the FP8 GEMM's epilogue computes it
    QVERIFY(at::equal(asWeight.dequantize(), fakeQuantizeFp8PerToken(x)));
    quantizeInt8PerToken(x, codes, scales);
    QCOMPARE(codes.scalar_type(), at::kChar);
    QVERIFY(at::equal(codes.to(at::kFloat) * scales.unsqueeze(1), fakeQuantizeInt8PerToken(x)));
    QCOMPARE(scales[2].item<float>(), 1.0f);   // an all-zero row keeps scale 1
}

void TestFp8SmoothQuant::int8PerTokenExactAndTies() {
    // Row 0: scale 31.75/127 = 0.25, every value is a multiple of it, so nothing moves.
    // Row 1: scale 1, halves round to even. Row 2: zeros.
    at::Tensor x = rowsOf({31.75f, -31.75f, 0.25f, -5.5f, 0, 7.75f, 127, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f, 0, 0, 0, 0, 0, 0}, 3);
    at::Tensor expected = rowsOf({31.75f, -31.75f, 0.25f, -5.5f, 0, 7.75f, 127, 0, 2, 2, -2, 0, 0, 0, 0, 0, 0, 0}, 3);
    at::Tensor got = fakeQuantizeInt8PerToken(x);
    QVERIFY2(at::equal(got, expected), show(got).constData());
    // Off-grid values land on the nearest multiple of the row's scale.
    at::Tensor coarse = fakeQuantizeInt8PerToken(rowsOf({127, 3.3f, -3.7f}, 1));
    QVERIFY2(at::equal(coarse, rowsOf({127, 3, -4}, 1)), show(coarse).constData());
}

void TestFp8SmoothQuant::int8PerChannelErrorBound() {
    at::manual_seed(11);
    at::Tensor w = at::randn({12, 40}) * at::linspace(0.05, 4.0, 12).unsqueeze(1);
    w[5].zero_();
    Int8Weight q = quantizeInt8PerChannel(w);
    QCOMPARE(q.q.scalar_type(), at::kChar);
    QCOMPARE(q.storageBytes(), size_t(12 * 40 + 12 * 4));
    QCOMPARE(q.scales[5].item<float>(), 1.0f);
    QVERIFY((q.q[5] == 0).all().item<bool>());
    at::Tensor err = (q.dequantize() - w).abs();
    QVERIFY2((err <= q.scales.unsqueeze(1) * 0.5f * (1 + 1e-5)).all().item<bool>(), show(err.amax(1)).constData());
    QVERIFY((q.q.abs().amax(1).index({at::arange(12) != 5}) == 127).all().item<bool>());
    QVERIFY_THROWS_EXCEPTION(Error, quantizeInt8PerChannel(at::ones({3})));
}

void TestFp8SmoothQuant::smoothingPreservesProduct() {
    at::manual_seed(12);
    at::Tensor x = at::randn({6, 8});
    x.select(1, 2) *= 60.0f;   // an outlier channel, the case SmoothQuant is for
    at::Tensor w = at::randn({5, 8});
    AbsMaxAccumulator acc(8);
    acc.add(x);
    at::Tensor s = smoothingScales(acc.absMax(), w, 0.5);
    QVERIFY(s[2].item<float>() > 3.0f);   // the outlier channel is scaled down the most
    at::Tensor reference = x.to(at::kDouble).matmul(w.to(at::kDouble).t());
    at::Tensor smoothed = (x / s).matmul((w * s).t()).to(at::kDouble);
    const double relative = ((smoothed - reference).abs().max() / reference.abs().max()).item<double>();
    QVERIFY2(relative <= 1e-5, qPrintable(QString::number(relative)));
}

void TestFp8SmoothQuant::smoothingHelpsW8A8() {
    at::manual_seed(13);
    at::Tensor x = at::randn({64, 32});
    x.select(1, 7) *= 50.0f;
    x.select(1, 20) *= 30.0f;
    at::Tensor w = at::randn({16, 32});
    AbsMaxAccumulator acc(32);
    acc.add(x);
    at::Tensor reference = x.matmul(w.t());
    auto w8a8Error = [&](const at::Tensor& s) {
        at::Tensor y = fakeQuantizeInt8PerToken(x / s).matmul(quantizeInt8PerChannel(w * s).dequantize().t());
        return (y - reference).norm().item<double>();
    };
    const double plain = w8a8Error(at::ones({32})), smoothed = w8a8Error(smoothingScales(acc.absMax(), w, 0.5));
    qInfo("W8A8 output error: plain %.4g, smoothed %.4g", plain, smoothed);
    QVERIFY(smoothed < 0.7 * plain);
}

QTEST_APPLESS_MAIN(TestFp8SmoothQuant)
#include "test_fp8_smoothquant.moc"
