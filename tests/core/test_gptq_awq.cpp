// Tests for core/compress/gptq_math and awq_math: GPTQ reduces to RTN when the Hessian has no off-diagonal
// terms, beats RTN on correlated inputs, reports the OBS loss it minimises, keeps act-order results in the
// original column order, survives dead columns and refuses bad Hessians; the Hessian accumulator matches
// 2/n·XᵀX; AWQ's α = 0 candidate is plain RTN and salient input channels make it choose α > 0.
#include <ATen/ATen.h>  // before Qt, whose `slots` macro breaks ATen headers (the PCH has the same order)
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/compress/awq_math.h"
#include "core/compress/gptq_math.h"
#include "core/util/error.h"

using namespace cwb::quant;

namespace {

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

// Calibration rows with correlated features: a shared low-rank part, mixing, and uneven channel scales.
at::Tensor correlatedInputs(int64_t n, int64_t in, uint64_t seed) {
    at::manual_seed(seed);
    const at::Tensor mixing = at::eye(in) + at::randn({in, in}) * (0.5 / std::sqrt(double(in)));
    const at::Tensor shared = at::randn({n, 4}).mm(at::randn({4, in}));
    const at::Tensor channelScale = at::exp(at::randn({in}) * 0.5);
    return (at::randn({n, in}).mm(mixing) + shared).mul(channelScale);
}

at::Tensor hessianOf(const at::Tensor& x) {
    HessianAccumulator acc(x.size(1));
    acc.add(x);
    return acc.hessian();
}

// ‖X·(W - Q)ᵀ‖² in float64: how far the quantized layer's outputs are from the original's.
double outputError(const at::Tensor& w, const at::Tensor& q, const at::Tensor& x) {
    return x.to(at::kDouble).mm((w - q).t().to(at::kDouble)).pow(2).sum().item<double>();
}

} // namespace

class TestGptqAwq : public QObject {
    Q_OBJECT

private slots:
    // With no off-diagonal Hessian terms no error is propagated, so GPTQ is RTN (same levels and scales).
    void noCouplingEqualsRtn_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<qint64>("groupSize");
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<bool>("actOrder");
        QTest::addColumn<qint64>("blockSize");
        QTest::addColumn<bool>("diagonal");  // false: identity; true: distinct diagonal entries
        QTest::newRow("identity sym4 g32") << 4 << qint64(32) << true << false << qint64(128) << false;
        QTest::newRow("identity asym4 g32") << 4 << qint64(32) << false << false << qint64(128) << false;
        QTest::newRow("identity sym4 g32 block 20") << 4 << qint64(32) << true << false << qint64(20) << false;
        QTest::newRow("identity sym3 per channel") << 3 << qint64(-1) << true << false << qint64(16) << false;
        QTest::newRow("identity asym4 per tensor") << 4 << qint64(0) << false << false << qint64(64) << false;
        QTest::newRow("identity sym4 per channel act-order") << 4 << qint64(-1) << true << true << qint64(128) << false;
        QTest::newRow("diagonal asym3 per channel act-order") << 3 << qint64(-1) << false << true << qint64(32) << true;
        QTest::newRow("diagonal sym4 g32") << 4 << qint64(32) << true << false << qint64(128) << true;
    }
    void noCouplingEqualsRtn() {
        QFETCH(int, bits);
        QFETCH(qint64, groupSize);
        QFETCH(bool, symmetric);
        QFETCH(bool, actOrder);
        QFETCH(qint64, blockSize);
        QFETCH(bool, diagonal);
        at::manual_seed(5);
        const at::Tensor w = at::randn({8, 96});
        const at::Tensor h = diagonal ? at::diag(at::rand({96}, at::kDouble) + 0.5) : at::eye(96, at::kDouble);
        GptqOptions options;
        options.quant = {bits, symmetric, groupSize};
        options.dampPercent = 0;
        options.actOrder = actOrder;
        options.blockSize = blockSize;
        const GptqResult g = gptqQuantize(w, h, options);
        const QuantizedWeight r = quantizeRtn(w, options.quant);
        QVERIFY(at::equal(g.weight.levels(), r.levels()));
        QVERIFY(at::equal(g.weight.scales, r.scales));
        QVERIFY(at::equal(g.weight.zeros, r.zeros));
        QVERIFY(at::equal(g.weight.groupIndex, r.groupIndex));
        QVERIFY(at::equal(g.weight.dequantize(), r.dequantize()));
        if (diagonal && actOrder)  // the permutation really was not the identity
            QVERIFY(!at::equal(g.permutation, at::arange(96, at::kLong)));
    }

    void beatsRtnOnCorrelatedInputs_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<bool>("actOrder");
        QTest::addColumn<bool>("staticGroups");
        QTest::addColumn<qint64>("blockSize");
        QTest::newRow("sym3 g32") << 3 << true << false << false << qint64(128);
        QTest::newRow("sym4 g32") << 4 << true << false << false << qint64(128);
        QTest::newRow("asym4 g32 block 48") << 4 << false << false << false << qint64(48);
        QTest::newRow("asym3 g32 act-order") << 3 << false << true << false << qint64(128);
        QTest::newRow("sym4 g32 act-order static") << 4 << true << true << true << qint64(128);
    }
    void beatsRtnOnCorrelatedInputs() {
        QFETCH(int, bits);
        QFETCH(bool, symmetric);
        QFETCH(bool, actOrder);
        QFETCH(bool, staticGroups);
        QFETCH(qint64, blockSize);
        const at::Tensor x = correlatedInputs(1024, 128, 21);
        at::manual_seed(22);
        const at::Tensor w = at::randn({64, 128});
        const at::Tensor h = hessianOf(x);
        GptqOptions options;
        options.quant = {bits, symmetric, 32};
        options.actOrder = actOrder;
        options.staticGroups = staticGroups;
        options.blockSize = blockSize;
        const GptqResult g = gptqQuantize(w, h, options);
        const QuantizedWeight r = quantizeRtn(w, options.quant);
        const at::Tensor q = g.weight.dequantize();
        const double gptqError = outputError(w, q, x), rtnError = outputError(w, r.dequantize(), x);
        qInfo("output error ‖X(W-Q)ᵀ‖²: GPTQ %.1f, RTN %.1f (ratio %.3f)", gptqError, rtnError, gptqError / rtnError);
        QVERIFY(gptqError < rtnError);
        // The OBS losses add up to ½·tr(ΔW (H + λI) ΔWᵀ), the objective GPTQ minimises.
        const at::Tensor delta = (w - q).to(at::kDouble);
        const at::Tensor damped = h + at::eye(128, at::kDouble) * g.damping;
        const double objective = delta.mm(damped).mul(delta).sum().item<double>() / 2;
        QVERIFY2(std::abs(g.squaredError - objective) <= 1e-9 * objective,
                 qPrintable(QString("%1 vs %2").arg(g.squaredError).arg(objective)));
        QCOMPARE(g.damping, 0.01 * h.diagonal().mean().item<double>());
        if (staticGroups) {  // groups fixed from the original weight: RTN's parameters, original columns
            QVERIFY(at::equal(g.weight.scales, r.scales));
            QVERIFY(at::equal(g.weight.zeros, r.zeros));
            QVERIFY(at::equal(g.weight.groupIndex, r.groupIndex));
        }
    }

    // Lazy batch updates are exact, and group parameters come from the current weights, so any block size
    // gives the column-at-a-time (block 1) result up to float64 rounding, also when groups straddle blocks.
    void blockSizeInvariant_data() {
        QTest::addColumn<qint64>("blockSize");
        QTest::newRow("block 48 (groups straddle blocks)") << qint64(48);
        QTest::newRow("block 128") << qint64(128);
    }
    void blockSizeInvariant() {
        QFETCH(qint64, blockSize);
        const at::Tensor x = correlatedInputs(512, 128, 25);
        at::manual_seed(26);
        const at::Tensor w = at::randn({32, 128});
        const at::Tensor h = hessianOf(x);
        GptqOptions options;
        options.quant = {4, false, 32};
        options.blockSize = 1;
        const GptqResult one = gptqQuantize(w, h, options);
        options.blockSize = blockSize;
        const GptqResult lazy = gptqQuantize(w, h, options);
        const double scaleDiff = (lazy.weight.scales / one.weight.scales - 1).abs().max().item<double>();
        const int64_t levelDiff = (lazy.weight.levels() != one.weight.levels()).sum().item<int64_t>();
        qInfo("largest relative scale difference %.3g, differing levels %lld of %d", scaleDiff,
              static_cast<long long>(levelDiff), 32 * 128);
        QVERIFY(scaleDiff < 1e-6);
        QVERIFY(levelDiff <= 4);
        QVERIFY(std::abs(lazy.squaredError / one.squaredError - 1) < 1e-3);
    }

    // Act-order equals quantizing the permuted problem without act-order, then un-permuting the columns.
    void actOrderKeepsOriginalOrder() {
        const at::Tensor x = correlatedInputs(512, 96, 31);
        at::manual_seed(32);
        const at::Tensor w = at::randn({32, 96});
        const at::Tensor h = hessianOf(x);
        const at::Tensor perm = std::get<1>(at::sort(h.diagonal(), /*stable=*/true, 0, /*descending=*/true));
        QVERIFY(!at::equal(perm, at::arange(96, at::kLong)));
        GptqOptions options;
        options.quant = {4, true, 32};
        options.actOrder = true;
        const GptqResult act = gptqQuantize(w, h, options);
        options.actOrder = false;
        const GptqResult manual = gptqQuantize(w.index_select(1, perm), h.index_select(0, perm).index_select(1, perm), options);
        QVERIFY(at::equal(act.permutation, perm));
        QVERIFY(at::equal(act.weight.dequantize().index_select(1, perm), manual.weight.dequantize()));
        QVERIFY(at::equal(act.weight.scales, manual.weight.scales));
        QCOMPARE(act.squaredError, manual.squaredError);
        for (int64_t p = 0; p < 96; ++p)  // groups formed in processing order, recorded per original column
            QCOMPARE(act.weight.groupIndex[perm[p].item<int64_t>()].item<int>(), int(p / 32));
        QVERIFY(act.weight.storageBytes() == manual.weight.storageBytes() + 96 * 4);
        const double actError = outputError(w, act.weight.dequantize(), x);
        const double rtnError = outputError(w, quantizeRtn(w, options.quant).dequantize(), x);
        qInfo("act-order output error %.1f, RTN %.1f", actError, rtnError);
        QVERIFY(actError < rtnError);
    }

    // Regression (user probe): GPTQ after 2:4 pruning filled about a tenth of the pruned places through its error updates,
    // so the 2:4 kernels could not use the result. keepZeros holds them at the zero point, with or without act-order,
    // symmetric or not, and the output error stays below RTN's.
    void keepZerosKeepsAPruningMask_data() {
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<bool>("actOrder");
        QTest::newRow("sym") << true << false;
        QTest::newRow("asym act-order") << false << true;
    }
    void keepZerosKeepsAPruningMask() {
        QFETCH(bool, symmetric);
        QFETCH(bool, actOrder);
        const at::Tensor x = correlatedInputs(512, 96, 41);
        at::manual_seed(42);
        at::Tensor w = at::randn({32, 96});
        // 2:4 along each row: the two smallest of every four set to zero.
        const at::Tensor groups = w.reshape({32, 24, 4});
        const at::Tensor smallest = std::get<1>(groups.abs().topk(2, -1, /*largest=*/false));
        w = groups.scatter(-1, smallest, 0.0).reshape({32, 96});
        const at::Tensor mask = w == 0;
        QCOMPARE(mask.sum().item<int64_t>(), int64_t(32 * 48));
        GptqOptions options;
        options.quant = {4, symmetric, 32};
        options.actOrder = actOrder;
        const at::Tensor h = hessianOf(x);
        const at::Tensor filled = gptqQuantize(w, h, options).weight.dequantize();
        QVERIFY2((filled.masked_select(mask) != 0).sum().item<int64_t>() > 0, "the updates are expected to fill pruned places");
        options.keepZeros = true;
        const at::Tensor kept = gptqQuantize(w, h, options).weight.dequantize();
        QCOMPARE((kept.masked_select(mask) != 0).sum().item<int64_t>(), int64_t(0));
        const double keptError = outputError(w, kept, x), rtnError = outputError(w, quantizeRtn(w, options.quant).dequantize(), x);
        qInfo("output error with the mask kept %.1f, RTN %.1f", keptError, rtnError);
        QVERIFY(keptError < rtnError);
    }

    // Accumulated block by block below the diagonal and mirrored: the same H as the full product, exactly symmetric.
    void hessianAccumulator_data() {
        QTest::addColumn<qint64>("columns");
        QTest::addColumn<qint64>("blockColumns");
        QTest::newRow("one block") << qint64(8) << qint64(2048);
        QTest::newRow("two blocks") << qint64(8) << qint64(4);
        QTest::newRow("uneven blocks") << qint64(23) << qint64(5);   // 4 blocks of 5 or 6 columns
        QTest::newRow("one column per block") << qint64(6) << qint64(1);
    }
    void hessianAccumulator() {
        QFETCH(qint64, columns);
        QFETCH(qint64, blockColumns);
        at::manual_seed(41);
        const at::Tensor x1 = at::randn({5, columns}), x2 = at::randn({1, 3, columns});
        HessianAccumulator acc(columns, blockColumns);
        acc.add(x1);
        acc.add(x2);
        QCOMPARE(acc.samples(), int64_t(8));
        const at::Tensor x = at::cat({x1, x2.reshape({3, columns})}).to(at::kDouble);
        const at::Tensor expected = x.t().mm(x).mul(2.0 / 8.0);
        const at::Tensor h = acc.hessian();
        QVERIFY(at::allclose(h, expected, 1e-12, 1e-12));
        QVERIFY(at::equal(h, h.t()));
        QVERIFY(throwsWith([&] { acc.add(at::randn({2, columns - 1})); }, "features"));
        QVERIFY(throwsWith([&] { HessianAccumulator(columns, 0); }, "at least one column"));
    }

    void deadColumn_data() {
        QTest::addColumn<double>("damp");
        QTest::addColumn<bool>("actOrder");
        QTest::addColumn<bool>("symmetric");
        QTest::newRow("damp 1%") << 0.01 << false << true;
        QTest::newRow("no damping") << 0.0 << false << false;
        QTest::newRow("no damping, act-order") << 0.0 << true << true;
    }
    void deadColumn() {
        QFETCH(double, damp);
        QFETCH(bool, actOrder);
        QFETCH(bool, symmetric);
        at::Tensor x = correlatedInputs(256, 48, 51);
        x.select(1, 5).zero_();
        at::manual_seed(52);
        const at::Tensor w = at::randn({16, 48});
        GptqOptions options;
        options.quant = {4, symmetric, 16};
        options.dampPercent = damp;
        options.actOrder = actOrder;
        const GptqResult g = gptqQuantize(w, hessianOf(x), options);
        const at::Tensor q = g.weight.dequantize();
        QVERIFY(q.isfinite().all().item<bool>());
        QVERIFY(std::isfinite(g.squaredError));
        QVERIFY(at::equal(q.select(1, 5), at::zeros({16})));  // the dead column's weight is zeroed
        QVERIFY(outputError(w, q, x) < outputError(w, quantizeRtn(w, options.quant).dequantize(), x));
    }

    void dampingRetries() {
        const at::Tensor w = at::tensor(std::vector<float>{0.3f, -0.2f, 0.1f, 0.4f}).reshape({2, 2});
        // Eigenvalues 1 ± 1.05: 1% damping is not enough, 10% is.
        const at::Tensor mild = at::tensor(std::vector<double>{1.0, 1.05, 1.05, 1.0}).reshape({2, 2});
        GptqOptions options;
        options.quant = {4, true, -1};
        const GptqResult g = gptqQuantize(w, mild, options);
        QCOMPARE(g.damping, 0.1);
        QVERIFY(g.weight.dequantize().isfinite().all().item<bool>());
        // Eigenvalue -99: still indefinite after damping 10 × the mean diagonal.
        const at::Tensor bad = at::tensor(std::vector<double>{1.0, 100.0, 100.0, 1.0}).reshape({2, 2});
        QVERIFY(throwsWith([&] { gptqQuantize(w, bad, options); }, "not positive definite"));
    }

    void awqAlphaZeroIsRtn() {
        at::manual_seed(61);
        const at::Tensor w = at::randn({96, 128}), x = at::randn({256, 128});
        AwqOptions options;
        options.quant = {4, false, 32};
        const double rtnError = outputError(w, quantizeRtn(w, options.quant).dequantize(), x) / (256.0 * 96.0);
        const AwqResult full = awqSearch(w, x, options);
        QCOMPARE(int(full.errors.size()), 20);
        QVERIFY(std::abs(full.errors.front() / rtnError - 1) < 1e-9);  // same quantity, summed another way
        options.grid = 1;  // only α = 0
        const AwqResult zero = awqSearch(w, x, options);
        QVERIFY(at::equal(zero.inputScales, at::ones({128})));
        QCOMPARE(zero.alpha, 0.0);
        QCOMPARE(zero.bestError, full.errors.front());
        // Fewer rows than features takes the direct path; it must agree too.
        const at::Tensor few = x.slice(0, 0, 64);
        const double fewRtn = outputError(w, quantizeRtn(w, options.quant).dequantize(), few) / (64.0 * 96.0);
        QVERIFY(std::abs(awqSearch(w, few, options).bestError / fewRtn - 1) < 1e-9);
    }

    void awqSearchPicksMinimum() {
        const at::Tensor x = correlatedInputs(256, 64, 71);
        at::manual_seed(72);
        const at::Tensor w = at::randn({48, 64});
        AwqOptions options;
        options.quant = {3, true, 16};
        options.grid = 10;
        const AwqResult a = awqSearch(w, x, options);
        const auto best = std::min_element(a.errors.begin(), a.errors.end());
        QCOMPARE(a.bestError, *best);
        QVERIFY(a.bestError <= a.errors.front());
        QCOMPARE(a.alpha, double(best - a.errors.begin()) / 10.0);
        const double centre = std::sqrt(a.inputScales.max().item<double>() * a.inputScales.min().item<double>());
        QVERIFY(std::abs(centre - 1.0) < 1e-5);
    }

    // The search runs over slices of rows (a large head's temporaries stay slice-sized); any slicing, uneven
    // ones included, must give the same errors, choice and scales as one slice.
    void awqSlicesAgreeWithOneSlice_data() {
        QTest::addColumn<qint64>("samples");
        QTest::newRow("gram (more rows than inputs)") << qint64(256);
        QTest::newRow("direct (fewer rows than inputs)") << qint64(48);
    }
    void awqSlicesAgreeWithOneSlice() {
        QFETCH(qint64, samples);
        at::Tensor x = correlatedInputs(samples, 64, 73);
        for (int64_t c : {5, 33}) x.select(1, c).mul_(20);
        at::manual_seed(74);
        const at::Tensor w = at::randn({100, 64}).to(at::kBFloat16);   // converted a slice at a time
        AwqOptions options;
        options.quant = {4, false, 16};
        const AwqResult whole = awqSearch(w, x, options);
        QVERIFY(whole.alpha > 0);   // a real choice, so the scales compared below are not all ones
        for (int64_t rows : {1, 7, 32, 99}) {
            options.sliceWeights = rows * 64;
            const AwqResult sliced = awqSearch(w, x, options);
            QCOMPARE(sliced.alpha, whole.alpha);
            QVERIFY(at::equal(sliced.inputScales, whole.inputScales));
            QCOMPARE(int(sliced.errors.size()), int(whole.errors.size()));
            for (size_t i = 0; i < whole.errors.size(); ++i)
                QVERIFY2(std::abs(sliced.errors[i] / whole.errors[i] - 1) < 1e-12,
                         qPrintable(QString("%1 rows a slice, candidate %2: %3 against %4").arg(rows).arg(i)
                                        .arg(sliced.errors[i], 0, 'g', 17).arg(whole.errors[i], 0, 'g', 17)));
        }
        options.sliceWeights = 0;
        QVERIFY(throwsWith([&] { awqSearch(w, x, options); }, "sliceWeights"));
    }

    void awqSalientChannels_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<qint64>("groupSize");
        QTest::newRow("asym4 g32") << 4 << qint64(32);
        QTest::newRow("asym3 g32") << 3 << qint64(32);
        QTest::newRow("asym4 per channel") << 4 << qint64(-1);
    }
    void awqSalientChannels() {
        QFETCH(int, bits);
        QFETCH(qint64, groupSize);
        at::manual_seed(81);
        const at::Tensor w = at::randn({96, 128});  // e.g. q, k, v of 32 rows each
        at::Tensor x = at::randn({256, 128});
        for (int64_t c : {3, 40, 77, 120}) x.select(1, c).mul_(50);
        AwqOptions options;
        options.quant = {bits, false, groupSize};
        const AwqResult a = awqSearch(w, x, options);
        qInfo("AWQ alpha %.2f, error %.4g vs RTN %.4g (ratio %.3f)", a.alpha, a.bestError, a.errors.front(),
              a.bestError / a.errors.front());
        QVERIFY(a.alpha > 0);
        QVERIFY(a.bestError < a.errors.front());
        QVERIFY(a.inputScales[40].item<float>() > a.inputScales[41].item<float>());  // salient channels scaled up
    }

    void badInput() {
        at::manual_seed(91);
        const at::Tensor w = at::randn({4, 8}), h = at::eye(8, at::kDouble), x = at::randn({16, 8});
        GptqOptions options;
        options.quant = {1, true, 4};
        QVERIFY(throwsWith([&] { gptqQuantize(w, h, options); }, "bits"));
        options.quant = {9, true, 4};
        QVERIFY(throwsWith([&] { gptqQuantize(w, h, options); }, "bits"));
        options.quant = {4, true, 4};
        QVERIFY(throwsWith([&] { gptqQuantize(at::randn({2, 4, 8}), h, options); }, "2-D"));
        QVERIFY(throwsWith([&] { gptqQuantize(w, at::eye(7, at::kDouble), options); }, "Hessian must be [8, 8]"));
        QVERIFY(throwsWith([&] { gptqQuantize(w, at::ones({8}), options); }, "Hessian must be"));
        QVERIFY(throwsWith([&] { gptqQuantize(w, -h, options); }, "negative diagonal"));
        QVERIFY(throwsWith([&] { gptqQuantize(w, h * NAN, options); }, "non-finite"));
        options.blockSize = 0;
        QVERIFY(throwsWith([&] { gptqQuantize(w, h, options); }, "block size"));
        QVERIFY(throwsWith([] { HessianAccumulator(0); }, "at least one column"));
        AwqOptions awq;
        awq.quant = {9, false, 4};
        QVERIFY(throwsWith([&] { awqSearch(w, x, awq); }, "bits"));
        awq.quant = {4, false, 4};
        QVERIFY(throwsWith([&] { awqSearch(w, at::randn({16, 7}), awq); }, "calibration inputs"));
        QVERIFY(throwsWith([&] { awqSearch(at::randn({8}), x, awq); }, "2-D"));
        awq.grid = 0;
        QVERIFY(throwsWith([&] { awqSearch(w, x, awq); }, "grid"));
    }
};

QTEST_APPLESS_MAIN(TestGptqAwq)
#include "test_gptq_awq.moc"
