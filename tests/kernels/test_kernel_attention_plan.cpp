// CPU-only test of planDecodeAttention (decode_ops.h), how split decode attention cuts the cache into chunks: every
// plan covers the cache in chunks of whole 32-key steps of at most 1024 keys, and launches at most two blocks per
// multiprocessor unless its chunks are already the longest allowed. The regression: at 4096 keys of Llama-2-7B on
// 132 multiprocessors the planner took 9 chunks of 480 per head (288 blocks), and the 24 blocks past two per
// multiprocessor ran as a second wave (49 us); now 8 chunks of 512 (256 blocks). The cluster merge is switched off
// here, so no plan asks the device anything. GQA with few kv heads divides each kv head's query heads among blocks
// (headParts): one query head per block where the device holds them all and the cache is short, else up to a
// quarter as many (sequence, kv head, part) units as multiprocessors.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cwb/kernels/decode_ops.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

int main() {
    setDecodeAttentionClusterMerge(false);
    const int multiprocessorCounts[] = {16, 78, 108, 132, 144};
    const DecodeAttentionShape heads[] = {{1, 32, 32, 128, 0}, {1, 32, 8, 128, 0}, {1, 64, 8, 128, 0},
                                          {2, 8, 8, 64, 0},    {4, 4, 1, 64, 0},   {1, 40, 40, 128, 0}};
    const int64_t capacities[] = {32, 192, 1000, 2112, 4096, 8192, 32768};
    int plans = 0, covered = 0, steps = 0, oneWave = 0, merged = 0, parts = 0;
    for (int sms : multiprocessorCounts)
        for (DecodeAttentionShape s : heads)
            for (int64_t capacity : capacities) {
                s.capacity = capacity;
                const DecodeAttentionPlan p = planDecodeAttention(s, sms);
                const int64_t blocks = p.splits * s.kvHeads * p.headParts * s.batch;
                const bool oneHeadPerBlock = p.headParts == s.heads / s.kvHeads && s.batch * s.heads <= sms &&
                                             s.batch * s.heads * capacity * s.headDim <= int64_t(64) * 2048 * 128;
                parts += p.headParts >= 1 && (s.heads / s.kvHeads) % p.headParts == 0 &&
                         (p.headParts == 1 || oneHeadPerBlock || s.batch * s.kvHeads * p.headParts <= sms / 4);
                ++plans;
                covered += p.splits >= 1 && p.splits * p.keysPerSplit >= capacity &&
                           (p.splits - 1) * p.keysPerSplit < capacity;
                steps += p.splits == 1 ? p.keysPerSplit == capacity
                                       : p.keysPerSplit % 32 == 0 && p.keysPerSplit >= 32 && p.keysPerSplit <= 1024;
                const bool fits =
                    blocks <= std::max<int64_t>(2 * sms, s.kvHeads * p.headParts * s.batch) || p.keysPerSplit == 1024;
                oneWave += fits;
                if (!fits)
                    std::printf("  %d SMs, %lld/%lld heads, batch %lld, %lld keys: %lld chunks of %lld (%lld blocks)\n",
                                sms, (long long)s.heads, (long long)s.kvHeads, (long long)s.batch, (long long)capacity,
                                (long long)p.splits, (long long)p.keysPerSplit, (long long)blocks);
                merged += p.mergeInCluster || p.mergeInKernel;
            }
    std::printf("  %d plans\n", plans);
    check(merged == 0, "no plan merges in the launch while both in-launch merges are switched off");
    check(covered == plans, "every plan covers the cache, with no chunk wholly past it");
    check(steps == plans, "split plans use chunks of whole 32-key steps of at most 1024 keys");
    check(oneWave == plans, "no plan has more than two blocks per multiprocessor unless its chunks are the longest allowed");
    check(parts == plans, "head parts divide the group, and either give each query head its own block where the device "
                          "holds them all and the cache is short, or make at most a quarter as many units as multiprocessors");
    const DecodeAttentionPlan gqa = planDecodeAttention({1, 32, 8, 128, 192}, 132);
    check(gqa.headParts == 4 && gqa.splits == 6 && gqa.keysPerSplit == 32,
          "32/8 heads at 192 keys on 132 SMs: each query head on its own, 6 chunks of 32 (192 blocks, as 7B)");
    check(planDecodeAttention({1, 32, 32, 128, 192}, 132).headParts == 1, "no head parts without GQA");
    check(planDecodeAttention({1, 64, 8, 128, 4096}, 132).headParts == 4,
          "64/8 heads at 4096 keys on 132 SMs: 4 parts (32 units), not one head per block (too many reads of each chunk)");
    check(planDecodeAttention({1, 64, 8, 128, 2048}, 132).headParts == 8 &&
              planDecodeAttention({1, 64, 8, 128, 192}, 132).headParts == 8,
          "64/8 heads at 192 and 2048 keys on 132 SMs: 8 parts, each query head in its own block");
    check(planDecodeAttention({1, 64, 8, 128, 2049}, 132).headParts == 4, "64/8 heads past 2048 keys: 4 parts");
    check(planDecodeAttention({2, 64, 8, 128, 1024}, 132).headParts == 8 &&
              planDecodeAttention({2, 64, 8, 128, 2048}, 132).headParts == 2,
          "64/8 heads at batch 2: 8 parts (128 blocks of one query head) at 1024 keys, 2 (quarter rule) at 2048");
    check(planDecodeAttention({1, 64, 8, 128, 1024}, 108).headParts == 8 && planDecodeAttention({1, 64, 8, 128, 1024}, 48).headParts == 1,
          "64/8 heads at 1024 keys: 8 parts on 108 SMs (64 blocks fit), 1 on 48 (they do not; a quarter is 12 units)");
    check(planDecodeAttention({1, 28, 4, 128, 1024}, 132).headParts == 7, "28/4 heads on 132 SMs: 7 parts (28 units)");
    check(planDecodeAttention({8, 32, 8, 128, 1024}, 132).headParts == 1, "32/8 heads at batch 8: enough units already");
    check(planDecodeAttention({1, 32, 8, 128, 192}, 132, 2).headParts == 2, "head parts given are kept");
    setDecodeAttentionHeadParts(false);
    check(planDecodeAttention({1, 32, 8, 128, 192}, 132).headParts == 1, "no head parts while they are switched off");
    setDecodeAttentionHeadParts(true);
    const DecodeAttentionPlan llama7b = planDecodeAttention({1, 32, 32, 128, 4096}, 132);
    const std::string got = std::to_string(llama7b.splits) + " of " + std::to_string(llama7b.keysPerSplit);
    check(llama7b.splits == 8 && llama7b.keysPerSplit == 512,
          ("Llama-2-7B at 4096 keys on 132 SMs: 8 chunks of 512 (256 blocks), not 9 of 480 (got " + got + ")").c_str());
    const DecodeAttentionPlan short7b = planDecodeAttention({1, 32, 32, 128, 192}, 132);
    check(short7b.splits == 6 && short7b.keysPerSplit == 32, "Llama-2-7B at 192 keys on 132 SMs: 6 chunks of 32, as before");
    return finish();
}
