// CPU references of the fused decode kernels (decode_ops.h): plain loops in double, rounded to the activation type
// wherever the kernels store a value in it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cwb/kernels/decode_ops.h"

namespace cwb::kernels {

namespace {

float rounded(double v, ActType type) { return actBitsToFloat(floatToActBits(float(v), type), type); }

int64_t ropePartner(int64_t i, int64_t headDim, RopeLayout layout) {
    return layout == RopeLayout::AdjacentPairs ? (i ^ 1) : (i + headDim / 2) % headDim;
}

} // namespace

void rmsNormRef(const float* x, const float* residual, float* sum, const float* weight, float* y, int64_t rows,
                int64_t dim, float eps, ActType type) {
    std::vector<float> row(static_cast<size_t>(dim));
    for (int64_t r = 0; r < rows; ++r) {
        double squares = 0;
        for (int64_t i = 0; i < dim; ++i) {
            float v = x[r * dim + i];
            if (residual) v = rounded(double(v) + double(residual[r * dim + i]), type);
            row[size_t(i)] = v;
            squares += double(v) * double(v);
        }
        const double inverse = 1.0 / std::sqrt(squares / double(dim) + double(eps));
        for (int64_t i = 0; i < dim; ++i) {
            if (residual) sum[r * dim + i] = row[size_t(i)];
            y[r * dim + i] = rounded(double(row[size_t(i)]) * inverse * double(weight[i]), type);
        }
    }
}

void ropeKvWriteRef(const float* q, int64_t qStride, const float* k, int64_t kStride, const float* v, int64_t vStride,
                    const float* ropeTable, int64_t tablePositions, RopeLayout layout, int64_t position, float* qOut,
                    float* keyCache, float* valueCache, const DecodeAttentionShape& s, ActType type) {
    if (position < 0 || position >= s.capacity || position >= tablePositions) return;
    const int64_t hd = s.headDim;
    const float* cos = ropeTable + position * 2 * hd;
    const float* sin = cos + hd;
    auto rotate = [&](const float* head, float* out) {
        for (int64_t i = 0; i < hd; ++i)
            out[i] = rounded(double(head[i]) * cos[i] + double(head[ropePartner(i, hd, layout)]) * sin[i], type);
    };
    for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t h = 0; h < s.heads; ++h) rotate(q + b * qStride + h * hd, qOut + (b * s.heads + h) * hd);
        for (int64_t h = 0; h < s.kvHeads; ++h) {
            const int64_t slot = ((b * s.kvHeads + h) * s.capacity + position) * hd;
            rotate(k + b * kStride + h * hd, keyCache + slot);
            for (int64_t i = 0; i < hd; ++i) valueCache[slot + i] = v[b * vStride + h * hd + i];
        }
    }
}

void decodeAttentionRef(const float* q, const float* keyCache, const float* valueCache, int64_t position, float* out,
                        const DecodeAttentionShape& s, float scale, ActType type) {
    const int64_t hd = s.headDim, groups = s.heads / s.kvHeads, keys = std::min(position, s.capacity - 1) + 1;
    std::vector<double> scores(static_cast<size_t>(keys)), acc(static_cast<size_t>(hd));
    for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t h = 0; h < s.heads; ++h) {
            const float* qh = q + (b * s.heads + h) * hd;
            const int64_t cacheHead = (b * s.kvHeads + h / groups) * s.capacity * hd;
            double top = -std::numeric_limits<double>::infinity();
            for (int64_t t = 0; t < keys; ++t) {
                double dot = 0;
                for (int64_t i = 0; i < hd; ++i) dot += double(qh[i]) * keyCache[cacheHead + t * hd + i];
                scores[size_t(t)] = dot * scale;
                top = std::max(top, scores[size_t(t)]);
            }
            double total = 0;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t t = 0; t < keys; ++t) {
                const double p = std::exp(scores[size_t(t)] - top);
                total += p;
                for (int64_t i = 0; i < hd; ++i) acc[size_t(i)] += p * valueCache[cacheHead + t * hd + i];
            }
            for (int64_t i = 0; i < hd; ++i) out[(b * s.heads + h) * hd + i] = rounded(acc[size_t(i)] / total, type);
        }
    }
}

void siluMulRef(const float* gate, int64_t gateStride, const float* up, int64_t upStride, float* out, int64_t rows,
                int64_t width, ActType type) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i) {
            const double g = gate[r * gateStride + i];
            out[r * width + i] = rounded(g / (1.0 + std::exp(-g)) * up[r * upStride + i], type);
        }
}

void ropeTableRef(double theta, int64_t headDim, int64_t positions, RopeLayout layout, float* table) {
    const int64_t half = headDim / 2;
    for (int64_t p = 0; p < positions; ++p) {
        float* cos = table + p * 2 * headDim;
        float* sin = cos + headDim;
        for (int64_t i = 0; i < half; ++i) {
            const double angle = double(p) / std::pow(theta, double(2 * i) / double(headDim));
            const int64_t first = layout == RopeLayout::AdjacentPairs ? 2 * i : i;
            const int64_t second = layout == RopeLayout::AdjacentPairs ? 2 * i + 1 : i + half;
            cos[first] = cos[second] = float(std::cos(angle));
            sin[first] = float(-std::sin(angle));
            sin[second] = float(std::sin(angle));
        }
    }
}

} // namespace cwb::kernels
