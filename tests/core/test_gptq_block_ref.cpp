// The CPU references of the GPTQ and SparseGPT column-block kernels (kernels/cpu/gptq_block_ref.cpp,
// sparsegpt_block_ref.cpp), driven block by block over a whole layer with the GEMM update between blocks, against
// core's gptqQuantize / sparseGpt on the CPU. The kernels are compared with these references bit for bit on the GPU
// (tests/gpu/test_kernel_*_block); this test ties the references to core's rules.
//  - No coupling (diagonal Hessian): no error propagates, so GPTQ is RTN: the reference gives quantizeRtn's levels,
//    scales and zeros exactly.
//  - Correlated inputs: the reference runs in float32, core in float64, so a near-tie can round the other way and
//    change the rest of that row; the bounds are those of tests/gpu/test_cuda_gptq_sparsegpt (>= 99% equal levels or
//    mask, reconstruction error within 1%), far above what a wrong group rule, order or update gives (GPTQ and RTN
//    differ in about a third of the levels).
//  - A 2:4-pruned weight with keepZeros: every pruned place keeps its group's zero point in both, and the rest agree
//    as above.
#include <ATen/ATen.h>  // before Qt, whose `slots` macro breaks ATen headers
#include <QtTest/QtTest>

#include <cmath>

#include "core/compress/gptq_math.h"
#include "core/compress/sparsegpt_math.h"
#include "cwb/kernels/gptq_block.h"
#include "cwb/kernels/sparsegpt_block.h"

using namespace cwb;

namespace {

at::Tensor correlatedInputs(int64_t n, int64_t in, uint64_t seed) {
    at::manual_seed(seed);
    const at::Tensor mixing = at::eye(in) + at::randn({in, in}) * (0.5 / std::sqrt(double(in)));
    return at::randn({n, in}).mm(mixing).mul(at::exp(at::randn({in}) * 0.5));
}

at::Tensor hessianOf(const at::Tensor& x) {
    quant::HessianAccumulator acc(x.size(1));
    acc.add(x);
    return acc.hessian();
}

// Upper Cholesky factor of the damped inverse (core's first attempt), float32, in the order `perm`.
at::Tensor inverseFactor(const at::Tensor& hessian, const at::Tensor& perm, double dampPercent = 0.01) {
    at::Tensor h = hessian.to(at::kDouble).index_select(0, perm).index_select(1, perm);
    h.diagonal().add_(dampPercent * h.diagonal().mean().item<double>());
    const at::Tensor lower = at::linalg_cholesky(h);
    return at::linalg_cholesky(at::cholesky_inverse(lower), /*upper=*/true).to(at::kFloat).contiguous();
}

double outputError(const at::Tensor& w, const at::Tensor& q, const at::Tensor& x) {
    const at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble);
    return xd.mm((wd - q.to(at::kDouble)).t()).pow(2).sum().item<double>() / xd.mm(wd.t()).pow(2).sum().item<double>();
}

struct RefGptq {
    at::Tensor levels, scales, zeros;  // levels in the original column order
};

// GPTQ through gptqBlockRef, as gptq_math.cpp drives the kernel on CUDA.
RefGptq gptqByBlocks(const at::Tensor& w, const at::Tensor& hessian, const quant::GptqOptions& o) {
    const int64_t rows = w.size(0), cols = w.size(1);
    const quant::QuantSpec& spec = o.quant;
    const int64_t width = quant::groupWidth(cols, spec.groupSize), groups = quant::groupCount(cols, spec.groupSize);
    const bool dynamicGroups = spec.groupSize > 0 && !o.staticGroups;
    at::Tensor perm = at::arange(cols, at::kLong);
    if (o.actOrder) perm = std::get<1>(at::sort(hessian.diagonal(), /*stable=*/true, 0, /*descending=*/true));
    const at::Tensor u = inverseFactor(hessian, perm, o.dampPercent);
    at::Tensor W = w.to(at::kFloat).index_select(1, perm).contiguous();
    const at::Tensor keep = o.keepZeros ? (W == 0).to(at::kByte).contiguous() : at::Tensor();
    RefGptq r;
    r.scales = at::zeros({rows, groups}, at::kFloat);
    r.zeros = at::zeros({rows, groups}, at::kInt);
    at::Tensor columnGroup = at::zeros({cols}, at::kInt);
    if (!dynamicGroups) {   // fixed up front from the original weight, in original column order
        at::Tensor scale, zero;
        for (int64_t g = 0; g < groups; ++g) {
            quant::groupParams(w.to(at::kFloat).slice(1, g * width, std::min((g + 1) * width, cols)), spec, scale, zero);
            r.scales.select(1, g).copy_(scale);
            r.zeros.select(1, g).copy_(zero);
        }
        columnGroup = at::div(perm, width, "floor").to(at::kInt).contiguous();
    }
    at::Tensor levels = at::zeros({rows, cols}, at::kInt), errors = at::zeros({rows, cols}, at::kFloat);
    kernels::GptqBlockArgs a;
    a.weight = W.data_ptr<float>();
    a.hinvUpper = u.data_ptr<float>();
    a.rows = rows;
    a.cols = cols;
    a.bits = spec.bits;
    a.symmetric = spec.symmetric;
    a.groupWidth = width;
    a.groups = groups;
    a.scales = r.scales.data_ptr<float>();
    a.zeros = r.zeros.data_ptr<int32_t>();
    a.columnGroup = dynamicGroups ? nullptr : columnGroup.data_ptr<int32_t>();
    a.levels = levels.data_ptr<int32_t>();
    a.keepZero = keep.defined() ? keep.data_ptr<uint8_t>() : nullptr;
    a.errors = errors.data_ptr<float>();
    a.errorStride = cols;
    for (int64_t i1 = 0; i1 < cols; i1 += o.blockSize) {
        const int64_t i2 = std::min(i1 + o.blockSize, cols);
        a.begin = i1;
        a.end = i2;
        a.errorOffset = i1;
        kernels::gptqBlockRef(a);
        if (i2 < cols) W.slice(1, i2).addmm_(errors.slice(1, i1, i2), u.slice(0, i1, i2).slice(1, i2), 1, -1);
    }
    r.levels = levels.index_select(1, at::argsort(perm));
    return r;
}

// SparseGPT through sparseGptBlockRef; returns the pruned weight and fills the mask.
at::Tensor sparseGptByBlocks(const at::Tensor& w, const at::Tensor& hessian, const prune::SparseGptOptions& o, at::Tensor& mask) {
    const int64_t rows = w.size(0), cols = w.size(1);
    const at::Tensor u = inverseFactor(hessian, at::arange(cols, at::kLong), o.dampPercent);
    at::Tensor W = w.to(at::kFloat).contiguous().clone();
    at::Tensor kept = at::zeros({rows, cols}, at::kByte), errors = at::zeros({rows, cols}, at::kFloat);
    const int64_t block = o.m > 0 ? (o.blockSize + o.m - 1) / o.m * o.m : o.blockSize;
    kernels::SparseGptBlockArgs a;
    a.weight = W.data_ptr<float>();
    a.hinvUpper = u.data_ptr<float>();
    a.rows = rows;
    a.cols = cols;
    a.n = o.n;
    a.m = o.m;
    a.mask = kept.data_ptr<uint8_t>();
    a.errors = errors.data_ptr<float>();
    a.errorStride = cols;
    for (int64_t i1 = 0; i1 < cols; i1 += block) {
        const int64_t count = std::min(block, cols - i1);
        a.begin = i1;
        a.end = i1 + count;
        a.errorOffset = i1;
        a.pruneCount = o.m ? 0 : std::llround(o.sparsity * double(count));
        kernels::sparseGptBlockRef(a);
        if (i1 + count < cols)
            W.slice(1, i1 + count).addmm_(errors.slice(1, i1, i1 + count), u.slice(0, i1, i1 + count).slice(1, i1 + count), 1, -1);
    }
    mask = kept.to(at::kBool);
    return W;
}

} // namespace

class TestGptqBlockRef : public QObject {
    Q_OBJECT

private slots:
    void noCouplingIsRtn_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<int>("groupSize");
        QTest::newRow("int4 sym g128") << 4 << true << 128;
        QTest::newRow("int3 asym g32") << 3 << false << 32;
        QTest::newRow("int2 sym g96 (groups past a block)") << 2 << true << 96;
        QTest::newRow("int8 asym g64") << 8 << false << 64;
    }
    void noCouplingIsRtn() {
        QFETCH(int, bits);
        QFETCH(bool, symmetric);
        QFETCH(int, groupSize);
        at::manual_seed(5);
        const at::Tensor w = at::randn({48, 320}) * 0.05;
        const at::Tensor hessian = at::diag(at::rand({320}, at::kDouble) + 0.5);
        quant::GptqOptions o;
        o.quant = {bits, symmetric, groupSize};
        const RefGptq ref = gptqByBlocks(w, hessian, o);
        const quant::QuantizedWeight rtn = quant::quantizeRtn(w, o.quant);
        QVERIFY(at::equal(ref.levels, rtn.levels()));
        QVERIFY(at::equal(ref.scales, rtn.scales));
        QVERIFY(at::equal(ref.zeros, rtn.zeros));
    }

    void gptqMatchesCore_data() {
        QTest::addColumn<int>("bits");
        QTest::addColumn<bool>("symmetric");
        QTest::addColumn<int>("groupSize");
        QTest::addColumn<bool>("actOrder");
        QTest::addColumn<bool>("staticGroups");
        QTest::addColumn<bool>("pruned");
        QTest::newRow("int4 sym g128") << 4 << true << 128 << false << false << false;
        QTest::newRow("int3 asym g32") << 3 << false << 32 << false << false << false;
        QTest::newRow("int4 sym g128 act-order") << 4 << true << 128 << true << false << false;
        QTest::newRow("int4 asym g64 act-order static groups") << 4 << false << 64 << true << true << false;
        QTest::newRow("int3 asym g96 (groups past a block)") << 3 << false << 96 << false << false << false;
        QTest::newRow("int4 sym per channel") << 4 << true << -1 << false << false << false;
        QTest::newRow("int4 sym g128, 2:4 pruned, keep zeros") << 4 << true << 128 << false << false << true;
        QTest::newRow("int3 asym g96 act-order, 2:4 pruned, keep zeros") << 3 << false << 96 << true << false << true;
    }
    void gptqMatchesCore() {
        QFETCH(int, bits);
        QFETCH(bool, symmetric);
        QFETCH(int, groupSize);
        QFETCH(bool, actOrder);
        QFETCH(bool, staticGroups);
        QFETCH(bool, pruned);
        const at::Tensor x = correlatedInputs(2048, 384, 7);
        at::manual_seed(8);
        at::Tensor w = at::randn({96, 384}) * 0.05;
        if (pruned) {   // 2:4 by magnitude: the two smallest of every 4 consecutive weights of a row are zero
            const at::Tensor quads = w.view({96, -1, 4});
            const at::Tensor smallest = std::get<1>(quads.abs().topk(2, -1, /*largest=*/false));
            quads.scatter_(-1, smallest, 0.0);
        }
        const at::Tensor hessian = hessianOf(x);
        quant::GptqOptions o;
        o.quant = {bits, symmetric, groupSize};
        o.actOrder = actOrder;
        o.staticGroups = staticGroups;
        o.keepZeros = pruned;
        const quant::GptqResult core = quant::gptqQuantize(w, hessian, o);
        const RefGptq ref = gptqByBlocks(w, hessian, o);
        const double same = ref.levels.eq(core.weight.levels()).to(at::kDouble).mean().item<double>();
        quant::QuantizedWeight refWeight = core.weight;
        refWeight.packed = quant::packLevels(ref.levels, bits);
        refWeight.scales = ref.scales;
        refWeight.zeros = ref.zeros;
        if (pruned) {   // the pruned places hold their group's zero point, so both dequantize them to exactly 0
            const at::Tensor zeroPlaces = w == 0;
            QCOMPARE(zeroPlaces.sum().item<int64_t>(), w.numel() / 2);
            QVERIFY(core.weight.dequantize().masked_select(zeroPlaces).eq(0).all().item<bool>());
            QVERIFY(refWeight.dequantize().masked_select(zeroPlaces).eq(0).all().item<bool>());
            QVERIFY(!refWeight.dequantize().masked_select(~zeroPlaces).eq(0).all().item<bool>());
        }
        const double eCore = outputError(w, core.weight.dequantize(), x), eRef = outputError(w, refWeight.dequantize(), x);
        const double eRtn = outputError(w, quant::quantizeRtn(w, o.quant).dequantize(), x);
        qInfo("levels equal %.4f%%, error core %.5g, reference %.5g, RTN %.5g", 100 * same, eCore, eRef, eRtn);
        QVERIFY(same >= 0.99);
        QVERIFY(std::fabs(eRef - eCore) <= 0.01 * eCore);
        QVERIFY(eRef < eRtn);
    }

    void sparseGptMatchesCore_data() {
        QTest::addColumn<int>("n");
        QTest::addColumn<int>("m");
        QTest::newRow("50% unstructured") << 0 << 0;
        QTest::newRow("2:4") << 2 << 4;
        QTest::newRow("1:3") << 1 << 3;
    }
    void sparseGptMatchesCore() {
        QFETCH(int, n);
        QFETCH(int, m);
        const at::Tensor x = correlatedInputs(2048, 384, 9);
        at::manual_seed(10);
        const at::Tensor w = at::randn({96, 384}) * 0.05;
        const at::Tensor hessian = hessianOf(x);
        prune::SparseGptOptions o;
        o.sparsity = 0.5;
        o.n = n;
        o.m = m;
        if (m == 3) o.blockSize = 126;   // the kernel takes at most 128 columns: 128 would round up to 129
        const prune::SparseGptResult core = prune::sparseGpt(w, hessian, o);
        at::Tensor mask;
        const at::Tensor pruned = sparseGptByBlocks(w, hessian, o, mask);
        const double same = mask.eq(core.mask).to(at::kDouble).mean().item<double>();
        const double eCore = outputError(w, core.weight, x), eRef = outputError(w, pruned, x);
        qInfo("mask equal %.4f%%, error core %.5g, reference %.5g", 100 * same, eCore, eRef);
        QCOMPARE(mask.logical_not().sum().item<int64_t>(), core.mask.logical_not().sum().item<int64_t>());
        QVERIFY(at::equal(pruned.masked_select(mask.logical_not()), at::zeros({mask.logical_not().sum().item<int64_t>()})));
        QVERIFY(same >= 0.99);
        QVERIFY(std::fabs(eRef - eCore) <= 0.01 * eCore);
    }
};

QTEST_APPLESS_MAIN(TestGptqBlockRef)
#include "test_gptq_block_ref.moc"
