// Tests for core/compress/quant_math: round-to-nearest quantization against weights built on a known grid,
// the half-to-even tie rule, 1×4 examples worked by hand, groups that do not divide the input dimension,
// packing (bit layouts written out by hand, round trips for 2..8 bits), storage size and refusal of bad input.
#include <ATen/ATen.h>  // before Qt, whose `slots` macro breaks ATen headers (the PCH has the same order)
#include <QtTest/QtTest>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/compress/quant_math.h"
#include "core/util/error.h"

using namespace cwb::quant;

namespace {

at::Tensor matrix(const std::vector<float>& values, int64_t rows, int64_t cols) {
    return at::tensor(values, at::kFloat).reshape({rows, cols});
}

// True when f throws cwb::Error whose message contains `part`.
bool throwsWith(const std::function<void()>& f, const char* part) {
    try {
        f();
    } catch (const cwb::Error& e) {
        if (QString::fromStdString(e.what()).contains(QLatin1String(part))) return true;
        qWarning("unexpected message: %s", e.what());
        return false;
    }
    return false;
}

// A weight whose elements sit on the grid the min/max rule will pick: per unit (tensor, row, or row×group)
// a power-of-two scale s and zero z, levels L, value (L - z)·s. Asym: each unit holds levels 0 and maxq, so
// the range is exactly maxq·s. Sym: no grid point has |value| = maxq/2·s, which is what sets the scale, so
// each unit's first element is ±maxq/2·s: a tie that rounds to even (level maxq if positive after clamping,
// level 0 if negative). `expected` is the dequantized weight the rule must produce.
struct GridCase {
    at::Tensor weight, expected, levels, scales, zeros;
};

GridCase gridWeight(const QuantSpec& spec, int64_t rows, int64_t cols, unsigned seed) {
    std::mt19937 rng(seed);
    const int maxq = (1 << spec.bits) - 1, half = 1 << (spec.bits - 1);
    const int64_t width = groupWidth(cols, spec.groupSize), groups = groupCount(cols, spec.groupSize);
    const int64_t unitRows = spec.groupSize == 0 ? 1 : rows;
    std::vector<float> unitScale(size_t(unitRows * groups));
    std::vector<int> unitZero(unitScale.size());
    for (size_t u = 0; u < unitScale.size(); ++u) {
        unitScale[u] = std::ldexp(1.0f, -int(rng() % 5) - 2);
        unitZero[u] = spec.symmetric ? half : int(rng() % unsigned(maxq + 1));
    }
    std::vector<float> w(size_t(rows * cols)), expected(w.size());
    std::vector<int> levels(w.size());
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const size_t u = size_t((spec.groupSize == 0 ? 0 : r) * groups + c / width);
            const bool unitFirst = (spec.groupSize == 0 ? r == 0 && c == 0 : c % width == 0);
            const bool unitSecond = (spec.groupSize == 0 ? r == 0 && c == 1 : c % width == 1);
            const float s = unitScale[u];
            const int z = unitZero[u];
            int level;
            if (spec.symmetric && unitFirst) {
                const bool positive = rng() % 2;
                w[size_t(r * cols + c)] = (positive ? 0.5f : -0.5f) * float(maxq) * s;
                level = positive ? maxq : 0;
            } else {
                if (spec.symmetric) level = 1 + int(rng() % unsigned(maxq));
                else level = unitFirst ? 0 : unitSecond ? maxq : int(rng() % unsigned(maxq + 1));
                w[size_t(r * cols + c)] = float(level - z) * s;
            }
            levels[size_t(r * cols + c)] = level;
            expected[size_t(r * cols + c)] = float(level - z) * s;
        }
    }
    GridCase g;
    g.weight = matrix(w, rows, cols);
    g.expected = matrix(expected, rows, cols);
    g.levels = at::tensor(levels, at::kInt).reshape({rows, cols});
    at::Tensor scales = at::tensor(unitScale, at::kFloat).reshape({unitRows, groups});
    at::Tensor zeros = at::tensor(unitZero, at::kInt).reshape({unitRows, groups});
    g.scales = scales.expand({rows, groups}).contiguous();
    g.zeros = zeros.expand({rows, groups}).contiguous();
    return g;
}

} // namespace

class TestQuantMath : public QObject {
    Q_OBJECT

private slots:
    void rtnExactOnGrid_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<qint64>("groupSize");
        for (int bits : {3, 4, 8}) {
            for (bool sym : {true, false}) {
                for (qint64 g : {qint64(0), qint64(-1), qint64(16)}) {
                    const QByteArray name = QByteArray(sym ? "sym" : "asym") + QByteArray::number(bits) +
                                            (g == 0 ? " per tensor" : g < 0 ? " per channel" : " g16");
                    QTest::newRow(name.constData()) << bits << sym << g;
                }
            }
        }
    }
    void rtnExactOnGrid() {
        QFETCH(int, bits);
        QFETCH(bool, symmetric);
        QFETCH(qint64, groupSize);
        const QuantSpec spec{bits, symmetric, groupSize};
        const GridCase g = gridWeight(spec, 6, 40, 7u + unsigned(bits));  // 40 = 2 groups of 16 + one of 8
        const QuantizedWeight q = quantizeRtn(g.weight, spec);
        QVERIFY(at::equal(q.scales, g.scales));
        QVERIFY(at::equal(q.zeros, g.zeros));
        QVERIFY(at::equal(q.levels(), g.levels));
        QVERIFY(at::equal(q.dequantize(), g.expected));
        // Apart from the sym range-setting ties, the weight comes back bit-identical.
        const int64_t changed = (q.dequantize() != g.weight).sum().item<int64_t>();
        const int64_t units = symmetric ? (groupSize == 0 ? 1 : 6 * groupCount(40, groupSize)) : 0;
        QCOMPARE(changed, units);
    }

    // Rule: round half to even, then add the zero point and clamp to [0, 2^bits - 1].
    void roundingTies_data() {
        QTest::addColumn<float>("value");
        QTest::addColumn<float>("scale");
        QTest::addColumn<int>("zero");
        QTest::addColumn<int>("expected");
        QTest::newRow("0.5 -> 0") << 0.5f << 1.0f << 8 << 8;
        QTest::newRow("1.5 -> 2") << 1.5f << 1.0f << 8 << 10;
        QTest::newRow("2.5 -> 2") << 2.5f << 1.0f << 8 << 10;
        QTest::newRow("3.5 -> 4") << 3.5f << 1.0f << 8 << 12;
        QTest::newRow("-0.5 -> 0") << -0.5f << 1.0f << 8 << 8;
        QTest::newRow("-1.5 -> -2") << -1.5f << 1.0f << 8 << 6;
        QTest::newRow("-2.5 -> -2") << -2.5f << 1.0f << 8 << 6;
        QTest::newRow("0.375/0.25 = 1.5 -> 2") << 0.375f << 0.25f << 8 << 10;
        QTest::newRow("asym 4.5 -> 4, zero 3") << 4.5f << 1.0f << 3 << 7;
        QTest::newRow("7.5 -> 8, clamped to 15") << 7.5f << 1.0f << 8 << 15;
        QTest::newRow("-8.5 -> -8, level 0") << -8.5f << 1.0f << 8 << 0;
        QTest::newRow("-9.5 -> -10, clamped to 0") << -9.5f << 1.0f << 8 << 0;
    }
    void roundingTies() {
        QFETCH(float, value);
        QFETCH(float, scale);
        QFETCH(int, zero);
        QFETCH(int, expected);
        const at::Tensor level = quantizeLevels(at::full({1}, value), at::full({1}, scale), at::full({1}, zero, at::kInt), 4);
        QCOMPARE(level.item<int>(), expected);
    }

    void rtnRoundsTiesToEven() {
        // max|w| = 7.5 gives scale 2·7.5/15 = 1 exactly, so every element is a tie.
        const QuantizedWeight q = quantizeRtn(matrix({0.5f, 1.5f, 2.5f, -2.5f, 7.5f}, 1, 5), {4, true, -1});
        QCOMPARE(q.scales.item<float>(), 1.0f);
        QVERIFY(at::equal(q.levels(), at::tensor(std::vector<int>{8, 10, 10, 6, 15}, at::kInt).reshape({1, 5})));
    }

    void handWorked_data() {
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<QList<float>>("weight");
        QTest::addColumn<float>("scale");
        QTest::addColumn<int>("zero");
        QTest::addColumn<QList<int>>("levels");
        QTest::addColumn<QList<float>>("dequantized");
        // sym: max|w| = 3 -> scale 2·3/15 = 0.4, rounded up to fp16: 0.400146484375 (0x3667; 0x3666 is below 0.4);
        // zero 8; w/s = 7.497, -3.249, 1.250, -4.998 -> 7, -3, 1, -5; dequantized (level - 8) · s.
        QTest::newRow("sym 4-bit") << true << QList<float>{3.0f, -1.3f, 0.5f, -2.0f} << 0.400146484375f << 8
                                   << QList<int>{15, 5, 9, 3}
                                   << QList<float>{2.801025390625f, -1.200439453125f, 0.400146484375f, -2.000732421875f};
        // asym: range [-1, 2] -> scale 3/15 = 0.2, rounded up to fp16: 0.2000732421875 (0x3267); zero round(4.998) = 5;
        // w/s = 9.996, -3.299, 4.698, -4.998 -> 10, -3, 5, -5; dequantized (level - 5) · s.
        QTest::newRow("asym 4-bit") << false << QList<float>{2.0f, -0.66f, 0.94f, -1.0f} << 0.2000732421875f << 5
                                    << QList<int>{15, 2, 10, 0}
                                    << QList<float>{2.000732421875f, -0.6002197265625f, 1.0003662109375f, -1.0003662109375f};
    }
    void handWorked() {
        QFETCH(bool, symmetric);
        QFETCH(QList<float>, weight);
        QFETCH(float, scale);
        QFETCH(int, zero);
        QFETCH(QList<int>, levels);
        QFETCH(QList<float>, dequantized);
        const QuantizedWeight q = quantizeRtn(matrix(std::vector<float>(weight.begin(), weight.end()), 1, 4),
                                              {4, symmetric, 128});
        QCOMPARE(q.scales.sizes().vec(), (std::vector<int64_t>{1, 1}));
        QCOMPARE(q.scales.item<float>(), scale);
        QCOMPARE(q.zeros.item<int>(), zero);
        const at::Tensor l = q.levels(), d = q.dequantize();
        for (int i = 0; i < 4; ++i) {
            QCOMPARE(l[0][i].item<int>(), levels[i]);
            QVERIFY2(std::abs(d[0][i].item<float>() - dequantized[i]) < 1e-6f, qPrintable(QString::number(i)));
        }
    }

    void unevenGroups_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<bool>("symmetric");
        QTest::newRow("sym 4") << 4 << true;
        QTest::newRow("asym 4") << 4 << false;
        QTest::newRow("asym 3") << 3 << false;
    }
    void unevenGroups() {
        QFETCH(int, bits);
        QFETCH(bool, symmetric);
        at::manual_seed(11);
        const at::Tensor w = at::randn({5, 172});
        const QuantSpec spec{bits, symmetric, 32};
        const QuantizedWeight q = quantizeRtn(w, spec);
        QCOMPARE(q.scales.sizes().vec(), (std::vector<int64_t>{5, 6}));
        QCOMPARE(q.zeros.sizes().vec(), (std::vector<int64_t>{5, 6}));
        QCOMPARE(q.groupIndex.size(0), int64_t(172));
        QCOMPARE(q.groupIndex[0].item<int>(), 0);
        QCOMPARE(q.groupIndex[31].item<int>(), 0);
        QCOMPARE(q.groupIndex[32].item<int>(), 1);
        QCOMPARE(q.groupIndex[159].item<int>(), 4);
        QCOMPARE(q.groupIndex[160].item<int>(), 5);
        QCOMPARE(q.groupIndex[171].item<int>(), 5);
        // The last group's parameters come from its 12 columns only.
        at::Tensor scale, zero;
        groupParams(w.slice(1, 160, 172), spec, scale, zero);
        QVERIFY(at::equal(q.scales.select(1, 5), scale));
        QVERIFY(at::equal(q.zeros.select(1, 5), zero));
        // Every element within half a step of its group's scale (float slack only).
        const at::Tensor perElementScale = q.scales.index_select(1, q.groupIndex.to(at::kLong));
        const at::Tensor excess = (q.dequantize() - w).abs() - perElementScale * (0.5f + 1e-5f);
        QVERIFY2(excess.max().item<float>() <= 0, qPrintable(QString::number(excess.max().item<float>())));
    }

    void scalesRoundUpToFp16() {
        // 0.4 lies between the fp16 values 0x3666 (0.39990234375) and 0x3667 (0.400146484375): up, never down.
        const at::Tensor x = at::tensor(std::vector<float>{0.4f, 0.5f, 5.9604645e-08f, 65504.0f, 1e-3f});
        const at::Tensor r = roundUpToFp16(x);
        QCOMPARE(r[0].item<float>(), 0.400146484375f);
        QCOMPARE(r[1].item<float>(), 0.5f);              // exactly representable: unchanged
        QCOMPARE(r[2].item<float>(), 5.9604645e-08f);    // smallest subnormal
        QCOMPARE(r[3].item<float>(), 65504.0f);          // largest finite
        QVERIFY(r[4].item<float>() >= 1e-3f);
        QVERIFY(at::equal(r.to(at::kHalf).to(at::kFloat), r));
    }

    void packHandWorked() {
        // 4 bits, 8 per word, low bits first: levels 1..8 -> 0x87654321.
        const at::Tensor four = at::tensor(std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}, at::kInt).reshape({1, 8});
        const at::Tensor p4 = packLevels(four, 4);
        QCOMPARE(p4.sizes().vec(), (std::vector<int64_t>{1, 1}));
        QCOMPARE(uint32_t(p4.item<int>()), 0x87654321u);
        // 3 bits, 10 per word (two bits unused): octal digits are the levels, highest first; level 11 starts word 2.
        const at::Tensor three =
            at::tensor(std::vector<int>{1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 5}, at::kInt).reshape({1, 11});
        const at::Tensor p3 = packLevels(three, 3);
        QCOMPARE(p3.sizes().vec(), (std::vector<int64_t>{1, 2}));
        QCOMPARE(p3[0][0].item<int>(), 02107654321);
        QCOMPARE(p3[0][1].item<int>(), 5);
        // 8 bits: a top byte of 128 sets the int32 sign bit.
        const at::Tensor eight = at::tensor(std::vector<int>{255, 0, 1, 128}, at::kInt).reshape({1, 4});
        QCOMPARE(uint32_t(packLevels(eight, 8).item<int>()), 0x800100FFu);
        QVERIFY(at::equal(unpackLevels(packLevels(eight, 8), 8, 4), eight));
    }

    void packRoundTrip_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<qint64>("cols");
        QTest::addColumn<qint64>("words");
        for (int bits = 2; bits <= 8; ++bits) {
            const qint64 perWord = 32 / bits;
            for (qint64 cols : {qint64(1), qint64(10), qint64(11), qint64(33), qint64(172)})
                QTest::newRow(qPrintable(QString("%1 bits, %2 cols").arg(bits).arg(cols)))
                    << bits << cols << (cols + perWord - 1) / perWord;
        }
    }
    void packRoundTrip() {
        QFETCH(int, bits);
        QFETCH(qint64, cols);
        QFETCH(qint64, words);
        at::manual_seed(bits * 1000 + cols);
        at::Tensor levels = at::randint(0, 1 << bits, {3, cols}, at::kInt);
        levels[0][0] = (1 << bits) - 1;  // both extremes present
        levels[1][cols - 1] = 0;
        const at::Tensor packed = packLevels(levels, bits);
        QCOMPARE(packed.scalar_type(), at::kInt);
        QCOMPARE(packed.sizes().vec(), (std::vector<int64_t>{3, words}));
        QVERIFY(at::equal(unpackLevels(packed, bits, cols), levels));
    }

    // Words another writer packed: kept as they are, except the bits past the last level, which are cleared (a writer
    // may leave anything there); the same words cwb's own packer gives for those levels.
    void adoptPackedWordsClearsPadding() {
        for (int bits : {2, 4, 8}) {
            for (int64_t cols : {int64_t(16), int64_t(172), int64_t(33)}) {
                at::manual_seed(bits + cols);
                const at::Tensor levels = at::randint(0, 1 << bits, {5, cols}, at::kInt);
                const at::Tensor packed = packLevels(levels, bits);
                at::Tensor dirty = packed.clone();
                // Bits 30 and 31 lie past the last level whenever the last word is partial (at most 30 bits used).
                if (cols % (32 / bits)) dirty.select(1, dirty.size(1) - 1).bitwise_or_(static_cast<int32_t>(0xC0000000u));
                const at::Tensor adopted = adoptPackedWords(dirty, bits, cols);
                QVERIFY2(at::equal(adopted, packed), qPrintable(QString("%1 bits, %2 cols").arg(bits).arg(cols)));
                QVERIFY(at::equal(unpackLevels(adopted, bits, cols), levels));
            }
        }
        try {
            adoptPackedWords(at::zeros({2, 3}, at::kInt), 4, 33);   // 33 levels need 5 words
            QFAIL("a wrong word count was accepted");
        } catch (const cwb::Error& e) {
            QVERIFY2(QString(e.what()).contains("need int32 words"), e.what());
        }
    }

    void storageBytes_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<qint64>("groupSize");
        QTest::addColumn<qint64>("expected");
        // [4, 172]: packed words·4 + scales·2 (fp16) + zero words (groups × ceil(4 / perWord))·4.
        QTest::newRow("4 bits g32") << 4 << qint64(32) << qint64(4 * 22 * 4 + 4 * 6 * 2 + 6 * 1 * 4);   // 424
        QTest::newRow("3 bits per channel") << 3 << qint64(-1) << qint64(4 * 18 * 4 + 4 * 2 + 1 * 4);    // 300
        QTest::newRow("8 bits per tensor") << 8 << qint64(0) << qint64(4 * 43 * 4 + 2 + 4);               // 694
        QTest::newRow("2 bits g128") << 2 << qint64(128) << qint64(4 * 11 * 4 + 4 * 2 * 2 + 2 * 1 * 4);  // 200
    }
    void storageBytes() {
        QFETCH(int, bits);
        QFETCH(qint64, groupSize);
        QFETCH(qint64, expected);
        at::manual_seed(3);
        const QuantizedWeight q = quantizeRtn(at::randn({4, 172}), {bits, true, groupSize});
        QCOMPARE(qint64(q.storageBytes()), expected);
    }

    // roundTrip is what a search calls many times on the GPU; it must give quantizeRtn's weights exactly.
    void roundTripEqualsQuantizeDequantize_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<qint64>("groupSize");
        QTest::newRow("int4 sym g32") << 4 << true << qint64(32);
        QTest::newRow("int4 asym g32, a short last group") << 4 << false << qint64(32);
        QTest::newRow("int3 asym g128, one short group") << 3 << false << qint64(128);
        QTest::newRow("int8 sym per channel") << 8 << true << qint64(-1);
        QTest::newRow("int2 asym per tensor") << 2 << false << qint64(0);
        QTest::newRow("int5 sym g7") << 5 << true << qint64(7);
    }
    void roundTripEqualsQuantizeDequantize() {
        QFETCH(int, bits);
        QFETCH(bool, symmetric);
        QFETCH(qint64, groupSize);
        at::manual_seed(5);
        at::Tensor w = at::randn({9, 172}) * at::rand({9, 1}) * 3;
        w[2].zero_();                          // an all-zero row
        w[4].clamp_min_(0.f);                  // no negative value
        w.slice(1, 0, 40)[6].fill_(0.25f);     // a flat group
        const QuantSpec spec{bits, symmetric, groupSize};
        const at::Tensor expected = quantizeRtn(w, spec).dequantize();
        const at::Tensor got = roundTrip(w, spec);
        QCOMPARE(got.sizes().vec(), expected.sizes().vec());
        QVERIFY(at::equal(got, expected));
        QVERIFY(at::equal(roundTrip(w.to(at::kDouble), spec), expected));
        QVERIFY(throwsWith([&] { roundTrip(w, {9, true, 4}); }, "bits"));
        QVERIFY(throwsWith([&] { roundTrip(at::randn({8}), spec); }, "2-D"));
    }

    void storageCountsPermutedGroupIndex() {
        at::manual_seed(3);
        QuantizedWeight q = quantizeRtn(at::randn({4, 172}), {4, true, 32});
        q.groupIndex = q.groupIndex.clone();
        q.groupIndex[0] = 1;
        q.groupIndex[32] = 0;
        QCOMPARE(qint64(q.storageBytes()), qint64(424 + 172 * 4));
    }

    void badInput() {
        const at::Tensor w = at::randn({4, 8});
        QVERIFY(throwsWith([&] { quantizeRtn(w, {1, true, 4}); }, "bits"));
        QVERIFY(throwsWith([&] { quantizeRtn(w, {9, true, 4}); }, "bits"));
        QVERIFY(throwsWith([&] { quantizeRtn(w, {4, true, -2}); }, "group size"));
        QVERIFY(throwsWith([&] { quantizeRtn(at::randn({8}), {4, true, 4}); }, "2-D"));
        QVERIFY(throwsWith([&] { quantizeRtn(at::randn({2, 4, 8}), {4, true, 4}); }, "2-D"));
        QVERIFY(throwsWith([&] { quantizeRtn(at::randn({0, 8}), {4, true, 4}); }, "empty"));
        QVERIFY(throwsWith([&] { quantizeRtn(at::Tensor(), {4, true, 4}); }, "no weight"));
        QVERIFY(throwsWith([&] { quantizeRtn(at::full({2, 2}, NAN), {4, true, 4}); }, "non-finite"));
        QVERIFY(throwsWith([&] { packLevels(at::full({1, 3}, 16, at::kInt), 4); }, "outside"));
        QVERIFY(throwsWith([&] { packLevels(at::full({1, 3}, -1, at::kInt), 4); }, "outside"));
        QVERIFY(throwsWith([&] { unpackLevels(at::zeros({1, 1}, at::kInt), 4, 9); }, "cannot hold"));
        QVERIFY(throwsWith([&] { quantizeLevels(w, at::ones({1}), at::ones({1}), 9); }, "bits"));
    }
};

QTEST_APPLESS_MAIN(TestQuantMath)
#include "test_quant_math.moc"
