// CPU-only test of the 2:4 sparse GEMM's references: the pattern checker finds the first group with more than two
// nonzeros (float and fp16 / bf16 bits, ±0 as zero), 2:4 pruning keeps the two largest magnitudes of every group,
// and the reference product equals a plain dense product of the pruned weight.
#include <cmath>
#include <vector>

#include "cwb/kernels/sparse24_gemm.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

int main() {
    // Checker on hand-made rows.
    std::vector<float> ok = {1, 0, 2, 0, /**/ 0, 0, 0, 0, /**/ 0, -3, 0, 4};   // 1 row of 12
    check(checkTwoFourRef(ok.data(), 1, 12).ok, "two nonzeros per group of 4 pass");
    std::vector<float> bad = ok;
    bad[5] = 1.0f;
    bad[6] = 2.0f;
    bad[7] = 3.0f;   // second group: 3 nonzeros
    const TwoFourCheck b = checkTwoFourRef(bad.data(), 1, 12);
    check(!b.ok && b.row == 0 && b.column == 4 && b.nonzeros == 3, "three nonzeros in columns 4..7 are found");
    check(b.describe() == "row 0, columns 4..7 hold 3 nonzeros (2:4 allows 2)", "the message names the row and columns");
    std::vector<float> twoRows(24, 0.0f);
    for (int j = 12; j < 16; ++j) twoRows[size_t(j)] = 1.0f;   // row 1, columns 0..3: 4 nonzeros
    const TwoFourCheck r = checkTwoFourRef(twoRows.data(), 2, 12);
    check(!r.ok && r.row == 1 && r.column == 0 && r.nonzeros == 4, "a dense group in the second row is found");
    check(!checkTwoFourRef(ok.data(), 2, 6).ok, "a column count that is not a multiple of 4 is refused");

    // Bits: -0 counts as zero for both 16-bit types; a denormal does not.
    for (ActType t : {ActType::Float16, ActType::BFloat16}) {
        std::vector<uint16_t> bits = {floatToActBits(-0.0f, t), floatToActBits(1.0f, t), floatToActBits(0.0f, t),
                                      floatToActBits(-2.0f, t)};
        check(checkTwoFourRef(bits.data(), 1, 4).ok, std::string(actTypeName(t)) == "fp16" ? "fp16 -0 is zero" : "bf16 -0 is zero");
        bits[0] = 1;   // smallest denormal
        check(!checkTwoFourRef(bits.data(), 1, 4).ok, "a denormal is a nonzero");
    }

    // Pruning: exactly 2 of every 4 kept, the largest magnitudes, ties to the earlier column.
    std::vector<float> w = gaussian(64 * 128, 5);
    std::vector<float> pruned = w;
    pruneTwoFourRef(pruned.data(), 64, 128);
    bool largestKept = true, exactlyTwo = true;
    for (size_t g = 0; g < w.size(); g += 4) {
        int kept = 0;
        float smallestKept = INFINITY, largestDropped = 0.0f;
        for (size_t j = g; j < g + 4; ++j) {
            if (pruned[j] != 0.0f) {
                ++kept;
                largestKept &= pruned[j] == w[j];
                smallestKept = std::min(smallestKept, std::fabs(w[j]));
            } else {
                largestDropped = std::max(largestDropped, std::fabs(w[j]));
            }
        }
        exactlyTwo &= kept == 2;
        largestKept &= smallestKept >= largestDropped;
    }
    check(exactlyTwo && checkTwoFourRef(pruned.data(), 64, 128).ok, "pruning keeps exactly 2 of every 4 and passes the check");
    check(largestKept, "pruning keeps the two largest magnitudes unchanged");
    std::vector<float> ties = {1, -1, 1, -1};
    pruneTwoFourRef(ties.data(), 1, 4);
    check(ties[0] == 1 && ties[1] == -1 && ties[2] == 0 && ties[3] == 0, "ties keep the earlier columns");

    // Reference product against a float dense product of the same rounded values.
    const int64_t m = 5, n = 12, k = 32;
    for (ActType t : {ActType::Float16, ActType::BFloat16}) {
        std::vector<float> xf = gaussian(size_t(m * k), 7), wf = gaussian(size_t(n * k), 8, 0.1f);
        pruneTwoFourRef(wf.data(), n, k);
        std::vector<uint16_t> xb(xf.size()), wb(wf.size());
        for (size_t i = 0; i < xf.size(); ++i) xb[i] = floatToActBits(xf[i], t);
        for (size_t i = 0; i < wf.size(); ++i) wb[i] = floatToActBits(wf[i], t);
        std::vector<float> y(size_t(m * n)), expect(size_t(m * n));
        sparse24GemmRef(xb.data(), wb.data(), t, m, n, k, y.data());
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                float acc = 0.0f;
                for (int64_t c = 0; c < k; ++c) acc += actBitsToFloat(xb[size_t(i * k + c)], t) * actBitsToFloat(wb[size_t(j * k + c)], t);
                expect[size_t(i * n + j)] = acc;
            }
        check(nmse(y, expect) < 1e-12, (std::string("reference product equals the dense product (") + actTypeName(t) + ")").c_str());
    }
    return finish();
}
