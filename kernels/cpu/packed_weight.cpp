// CPU pack / unpack between the core's integer weight format and the tiled16x64 kernel layout (packed_weight.h).
#include <algorithm>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "cwb/kernels/packed_weight.h"

namespace cwb::kernels {

namespace {

// Column of the chunk that lane `tig` holds as value j (0..15) of k-step s: c0 + 16·tig + 4s + j.
// For one k-step the lane's 8 values e0..e7 are (row g, +0), (g, +1), (g+8, +0), (g+8, +1), (g, +2), (g, +3),
// (g+8, +2), (g+8, +3): value i -> row offset kRowOf[i], column offset kColOf[i].
constexpr int kRowOf[8] = {0, 0, 8, 8, 0, 0, 8, 8};
constexpr int kColOf[8] = {0, 1, 0, 1, 2, 3, 2, 3};

// Word index of value i of k-step s for a lane, and the bit shift inside it.
void slotOf(int bits, int s, int i, int lane, int64_t tileChunk, int64_t& word, int& shift) {
    if (bits == 4) {
        word = (tileChunk * 32 + lane) * 4 + s;
        shift = (i % 2 == 0) ? 4 * (i / 2) : 16 + 4 * (i / 2);
    } else {
        const int w = 2 * s + i / 4;  // the lane's 8 words; vector v = w / 4 holds words 4v..4v+3
        word = ((tileChunk * 2 + w / 4) * 32 + lane) * 4 + w % 4;
        shift = 8 * (i % 4);
    }
}

uint32_t coreLevel(const CoreIntWeightView& c, int64_t r, int64_t col) {
    const int per = 32 / c.bits;
    const int64_t wordsPerRow = (c.cols + per - 1) / per;
    const uint32_t word = uint32_t(c.packed[r * wordsPerRow + col / per]);
    return (word >> ((col % per) * c.bits)) & ((1u << c.bits) - 1u);
}

void checkView(const CoreIntWeightView& c) {
    if (c.bits != 4 && c.bits != 8)
        throw KernelError("packTiled: the GEMM kernels take 4- or 8-bit weights, got " + std::to_string(c.bits) + " bits");
    if (!c.packed || !c.scales || !c.zeros || !c.groupIndex)
        throw KernelError("packTiled: packed words, scales, zeros and group index are all required");
    if (c.rows <= 0 || c.cols <= 0 || c.groups <= 0)
        throw KernelError("packTiled: rows, cols and groups must be positive");
}

} // namespace

TiledIntWeight packTiled(const CoreIntWeightView& core, ActType act, int threads) {
    checkView(core);
    TiledIntWeight t;
    t.bits = core.bits;
    t.act = act;
    t.rows = core.rows;
    t.cols = core.cols;
    t.groups = core.groups;
    t.paddedRows = (core.rows + kTileRows - 1) / kTileRows * kTileRows;

    // Group order: stable sort of the columns by group, each group padded to a multiple of 64 columns.
    std::vector<int64_t> order(size_t(core.cols));
    std::iota(order.begin(), order.end(), int64_t(0));
    for (int64_t c = 0; c < core.cols; ++c)
        if (core.groupIndex[c] < 0 || core.groupIndex[c] >= core.groups)
            throw KernelError("packTiled: group index " + std::to_string(core.groupIndex[c]) + " of column " +
                              std::to_string(c) + " is outside [0, " + std::to_string(core.groups) + ")");
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return core.groupIndex[a] < core.groupIndex[b]; });
    std::vector<int32_t> columnOf;
    for (size_t i = 0; i < order.size();) {
        const int32_t g = core.groupIndex[order[i]];
        size_t j = i;
        while (j < order.size() && core.groupIndex[order[j]] == g) columnOf.push_back(int32_t(order[j++]));
        while (columnOf.size() % kChunkCols) columnOf.push_back(-1);
        for (size_t k = 0; k < (j - i + kChunkCols - 1) / kChunkCols; ++k) t.chunkGroup.push_back(g);
        i = j;
    }
    t.paddedCols = int64_t(columnOf.size());
    bool identity = t.paddedCols == core.cols;
    for (int64_t p = 0; identity && p < t.paddedCols; ++p) identity = columnOf[size_t(p)] == p;
    if (!identity) t.columnOf = columnOf;

    const int64_t chunks = t.chunks();
    t.words.assign(size_t(t.tiles() * chunks * 32 * (core.bits == 4 ? 4 : 8)), 0u);
    // Each row tile owns its own words, so tiles pack in parallel (a 7B model's layers took minutes on one thread).
    auto packTiles = [&](int64_t firstTile, int64_t endTile) {
    for (int64_t tile = firstTile; tile < endTile; ++tile)
        for (int64_t chunk = 0; chunk < chunks; ++chunk)
            for (int lane = 0; lane < 32; ++lane)
                for (int s = 0; s < 4; ++s)
                    for (int i = 0; i < 8; ++i) {
                        const int64_t r = tile * kTileRows + lane / 4 + kRowOf[i];
                        const int64_t p = chunk * kChunkCols + 16 * (lane % 4) + 4 * s + kColOf[i];
                        const int32_t col = columnOf[size_t(p)];
                        uint32_t level = 0;
                        if (r < core.rows && col >= 0) {
                            level = coreLevel(core, r, col);
                        } else if (r < core.rows) {  // padding column: the zero point dequantizes to 0
                            level = uint32_t(core.zeros[r * core.groups + t.chunkGroup[size_t(chunk)]]);
                        }
                        int64_t word;
                        int shift;
                        slotOf(core.bits, s, i, lane, tile * chunks + chunk, word, shift);
                        t.words[size_t(word)] |= level << shift;
                    }
    };
    const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(
        t.tiles(), threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency())));
    if (workers == 1) {
        packTiles(0, t.tiles());
    } else {
        std::vector<std::thread> pool;
        const int64_t per = (t.tiles() + workers - 1) / workers;
        for (int64_t w = 0; w < workers; ++w)
            pool.emplace_back(packTiles, w * per, std::min(t.tiles(), (w + 1) * per));
        for (auto& thread : pool) thread.join();
    }

    t.scaleZero.assign(size_t(t.tiles() * t.groups * kTileRows), 0u);
    for (int64_t r = 0; r < core.rows; ++r)
        for (int64_t g = 0; g < core.groups; ++g) {
            const int32_t zero = core.zeros[r * core.groups + g];
            if (zero < 0 || zero >= (1 << core.bits))
                throw KernelError("packTiled: zero point " + std::to_string(zero) + " of row " + std::to_string(r) +
                                  " is outside the level range");
            const uint32_t s = floatToActBits(core.scales[r * core.groups + g], act);
            const uint32_t z = floatToActBits(float(zero), act);
            t.scaleZero[size_t(((r / kTileRows) * t.groups + g) * kTileRows + r % kTileRows)] = s | (z << 16);
        }
    return t;
}

UnpackedIntWeight unpackTiled(const TiledIntWeight& t) {
    UnpackedIntWeight u;
    u.levels.assign(size_t(t.rows * t.cols), 0);
    u.scales.assign(size_t(t.rows * t.groups), 0.0f);
    u.zeros.assign(size_t(t.rows * t.groups), 0);
    u.groupIndex.assign(size_t(t.cols), 0);
    const int64_t chunks = t.chunks();
    for (int64_t p = 0; p < t.paddedCols; ++p) {
        const int32_t col = t.columnOf.empty() ? int32_t(p) : t.columnOf[size_t(p)];
        if (col >= 0) u.groupIndex[size_t(col)] = t.chunkGroup[size_t(p / kChunkCols)];
    }
    for (int64_t tile = 0; tile < t.tiles(); ++tile)
        for (int64_t chunk = 0; chunk < chunks; ++chunk)
            for (int lane = 0; lane < 32; ++lane)
                for (int s = 0; s < 4; ++s)
                    for (int i = 0; i < 8; ++i) {
                        const int64_t r = tile * kTileRows + lane / 4 + kRowOf[i];
                        const int64_t p = chunk * kChunkCols + 16 * (lane % 4) + 4 * s + kColOf[i];
                        const int32_t col = t.columnOf.empty() ? int32_t(p) : t.columnOf[size_t(p)];
                        if (r >= t.rows || col < 0) continue;
                        int64_t word;
                        int shift;
                        slotOf(t.bits, s, i, lane, tile * chunks + chunk, word, shift);
                        u.levels[size_t(r * t.cols + col)] = uint8_t((t.words[size_t(word)] >> shift) & ((1u << t.bits) - 1u));
                    }
    for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t g = 0; g < t.groups; ++g) {
            const uint32_t sz = t.scaleZero[size_t(((r / kTileRows) * t.groups + g) * kTileRows + r % kTileRows)];
            u.scales[size_t(r * t.groups + g)] = actBitsToFloat(uint16_t(sz & 0xffffu), t.act);
            u.zeros[size_t(r * t.groups + g)] = int32_t(actBitsToFloat(uint16_t(sz >> 16), t.act));
        }
    return u;
}

std::vector<int32_t> packCoreWords(const uint8_t* levels, int64_t rows, int64_t cols, int bits) {
    const int per = 32 / bits;
    const int64_t wordsPerRow = (cols + per - 1) / per;
    std::vector<int32_t> out(size_t(rows * wordsPerRow), 0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            uint32_t& w = reinterpret_cast<uint32_t&>(out[size_t(r * wordsPerRow + c / per)]);
            w |= uint32_t(levels[r * cols + c]) << ((c % per) * bits);
        }
    return out;
}

std::vector<float> dequantizeTiledRef(const TiledIntWeight& t, bool roundToAct) {
    const UnpackedIntWeight u = unpackTiled(t);
    std::vector<float> out(size_t(t.rows * t.cols));
    for (int64_t r = 0; r < t.rows; ++r)
        for (int64_t c = 0; c < t.cols; ++c) {
            const size_t g = size_t(r * t.groups + u.groupIndex[size_t(c)]);
            const float v = float(int32_t(u.levels[size_t(r * t.cols + c)]) - u.zeros[g]) * u.scales[g];
            out[size_t(r * t.cols + c)] = roundToAct ? actBitsToFloat(floatToActBits(v, t.act), t.act) : v;
        }
    return out;
}

} // namespace cwb::kernels
