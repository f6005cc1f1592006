// CPU-only test of the 2:4 GEMV's packed rows (dense_gemv.h): the bit layout on a hand-made row (kept values in
// column order, positions in 4-bit fields, the first free columns filled where a group keeps fewer than two), the
// round trip on a random 2:4 weight, and the refusals (a column count not a multiple of 16, three non-zeros).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cwb/kernels/dense_gemv.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

int main() {
    // One row of 16 columns, four groups: {a, 0, b, 0}, {0, 0, 0, c}, {0, 0, 0, 0}, {0, d, e, 0}.
    const std::vector<float> row = {1, 0, 2, 0, /**/ 0, 0, 0, 3, /**/ 0, 0, 0, 0, /**/ 0, -4, 5, 0};
    std::vector<float> values(8);
    std::vector<uint16_t> meta(1);
    std::string why;
    check(packSparse24Rows(row.data(), 1, 16, values.data(), meta.data(), &why), "a 2:4 row packs");
    check(values == std::vector<float>({1, 2, 0, 3, 0, 0, -4, 5}), "kept values in column order, zeros where filled");
    // Positions per group (first | second << 2): (0, 2) = 8; (0, 3) = 12, the first free column filled; (0, 1) = 4;
    // (1, 2) = 9. Group j in bits 4j..4j+3.
    const uint16_t expected = uint16_t(8 | (12 << 4) | (4 << 8) | (9 << 12));
    check(meta[0] == expected, ("positions word " + std::to_string(meta[0]) + " in 4-bit fields, group 0 lowest").c_str());
    std::vector<float> back(16);
    unpackSparse24Rows(values.data(), meta.data(), 1, 16, back.data());
    check(back == row, "the hand-made row unpacks to itself");

    // A random 2:4 weight of 5 rows x 48 columns: each group keeps the two of largest magnitude.
    std::vector<float> w = gaussian(5 * 48, 7);
    for (size_t g = 0; g < w.size() / 4; ++g) {
        float* e = w.data() + 4 * g;
        int small[2] = {0, 1};
        for (int i = 0; i < 4; ++i)   // the two smallest magnitudes
            if (i != small[0] && i != small[1]) {
                const int larger = std::abs(e[small[0]]) > std::abs(e[small[1]]) ? 0 : 1;
                if (std::abs(e[i]) < std::abs(e[small[larger]])) small[larger] = i;
            }
        e[small[0]] = e[small[1]] = 0.0f;
    }
    std::vector<float> wValues(5 * 24);
    std::vector<uint16_t> wMeta(5 * 3);
    check(packSparse24Rows(w.data(), 5, 48, wValues.data(), wMeta.data(), &why), "a random 2:4 weight packs");
    std::vector<float> wBack(w.size());
    unpackSparse24Rows(wValues.data(), wMeta.data(), 5, 48, wBack.data());
    check(wBack == w, "and unpacks to itself");

    // Refusals.
    std::vector<float> wide(24, 0.0f), v12(12);
    std::vector<uint16_t> m2(2);
    const bool wideRefused = !packSparse24Rows(wide.data(), 1, 24, v12.data(), m2.data(), &why);
    check(wideRefused && why.find("24 columns") != std::string::npos, ("24 columns are refused: " + why).c_str());
    std::vector<float> crowded = row;
    crowded[13] = crowded[14] = crowded[15] = 1.0f;   // group 3: three non-zeros
    const bool crowdedRefused = !packSparse24Rows(crowded.data(), 1, 16, values.data(), meta.data(), &why);
    check(crowdedRefused && why == "row 0, columns 12..15: more than two non-zeros",
          ("three non-zeros are refused, where named: " + why).c_str());
    return finish();
}
