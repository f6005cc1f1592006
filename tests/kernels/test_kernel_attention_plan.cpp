// CPU-only test of planDecodeAttention (decode_ops.h), how split decode attention cuts the cache into chunks: every
// plan covers the cache in chunks of whole 32-key steps of at most 1024 keys, and launches at most two blocks per
// multiprocessor unless its chunks are already the longest allowed. The regression: at 4096 keys of Llama-2-7B on
// 132 multiprocessors the planner took 9 chunks of 480 per head (288 blocks), and the 24 blocks past two per
// multiprocessor ran as a second wave (49 us); now 8 chunks of 512 (256 blocks). The cluster merge is switched off
// here, so no plan asks the device anything. GQA with few kv heads divides each kv head's query heads among blocks
// (headParts) by the rule fitted in session 31 to every division timed on the H200: the largest divisor that keeps
// one (sequence, kv head, part) unit per multiprocessor and the keys and values read in all within 1.5 x 2^24
// elements, raised to leave at most 4 query heads a block where that fits twice the read limit, and never more
// blocks than one wave of two per multiprocessor.
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
                // Divides the group; past one part, one unit per multiprocessor, one wave of blocks and at most twice
                // the read limit.
                const int64_t group = s.heads / s.kvHeads, reads = s.batch * s.kvHeads * p.headParts * capacity * s.headDim;
                parts += p.headParts >= 1 && group % p.headParts == 0 &&
                         (p.headParts == 1 || (s.batch * s.kvHeads * p.headParts <= sms && blocks <= 2 * sms &&
                                               reads <= 2 * (int64_t(3) << 23)));
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
    check(parts == plans, "head parts divide the group and, past one part, keep one unit per multiprocessor, at most two "
                          "blocks per multiprocessor and the reads within 3 x 2^24 elements");
    const DecodeAttentionPlan gqa = planDecodeAttention({1, 32, 8, 128, 192}, 132);
    check(gqa.headParts == 4 && gqa.splits == 6 && gqa.keysPerSplit == 32,
          "32/8 heads at 192 keys on 132 SMs: each query head on its own, 6 chunks of 32 (192 blocks, as 7B)");
    check(planDecodeAttention({1, 32, 32, 128, 192}, 132).headParts == 1, "no head parts without GQA");
    check(planDecodeAttention({1, 64, 8, 128, 4096}, 132).headParts == 4,
          "64/8 heads at 4096 keys on 132 SMs: 4 parts (24.5 us), not one head per block (27.2: too many reads of each chunk)");
    check(planDecodeAttention({1, 64, 8, 128, 2112}, 132).headParts == 8 &&
              planDecodeAttention({1, 64, 8, 128, 3072}, 132).headParts == 8 &&
              planDecodeAttention({1, 64, 8, 128, 192}, 132).headParts == 8,
          "64/8 heads at 192 to 3072 keys on 132 SMs: 8 parts, each query head in its own block (2112 keys: 18.4 us "
          "against 19.7 in 4)");
    check(planDecodeAttention({1, 64, 8, 128, 3073}, 132).headParts == 4, "64/8 heads past 3072 keys: 4 parts");
    check(planDecodeAttention({1, 64, 8, 128, 8192}, 132).headParts == 2 &&
              planDecodeAttention({1, 32, 8, 128, 8192}, 132).headParts == 2,
          "32/8 and 64/8 heads at 8192 keys: 2 parts (64/8: 37.7 us against 40.1 in 4 and 49.1 in 1)");
    check(planDecodeAttention({1, 64, 8, 128, 16384}, 132).headParts == 2 &&
              planDecodeAttention({8, 64, 8, 128, 2048}, 132).headParts == 2,
          "64/8 heads past the read limit keep 2 parts, not blocks of 8 query heads (16384 keys: 61.4 us against 70.1 in "
          "1; batch 8 at 2048 keys: 60.4 against 66.0)");
    check(planDecodeAttention({1, 64, 8, 128, 16416}, 132).headParts == 1,
          "64/8 heads past 16384 keys: 1 part (2 parts would take 17 chunks of 1024 for 16 units, a second wave)");
    const DecodeAttentionPlan batch8 = planDecodeAttention({8, 64, 8, 128, 2112}, 132);
    check(batch8.headParts == 1 && batch8.splits * 64 <= 264,
          "64/8 heads at batch 8 and 2112 keys: 1 part in one wave, not 2 parts in 3 chunks of 1024 (384 blocks; 8 blocks "
          "of 70B decoded INT4 at 2.380 ms per token against 2.198)");
    check(planDecodeAttention({1, 32, 8, 128, 16384}, 132).headParts == 1 &&
              planDecodeAttention({4, 32, 8, 128, 4096}, 132).headParts == 1,
          "32/8 heads past the read limit: 1 part of 4 query heads (16384 keys: 43.2 us against 44.6 in 2; batch 4 at 4096 "
          "keys: 42.6 against 44.1)");
    check(planDecodeAttention({4, 64, 8, 128, 1024}, 132).headParts == 4 &&
              planDecodeAttention({4, 64, 8, 128, 2048}, 132).headParts == 2,
          "64/8 heads at batch 4: 4 parts at 1024 keys (25.3 us against 37.2 in 1), 2 at 2048 (37.1 against 40.0 in 4)");
    check(planDecodeAttention({2, 64, 8, 128, 1024}, 132).headParts == 8 &&
              planDecodeAttention({2, 64, 8, 128, 2048}, 132).headParts == 4,
          "64/8 heads at batch 2: 8 parts (128 blocks of one query head) at 1024 keys, 4 at 2048 (25.3 us against 28.1 in 2)");
    check(planDecodeAttention({4, 32, 8, 128, 2048}, 132).headParts == 2,
          "32/8 heads at batch 4 and 2048 keys: 2 parts (25.9 us against 28.5 in 1)");
    check(planDecodeAttention({1, 64, 8, 128, 1024}, 108).headParts == 8 && planDecodeAttention({1, 64, 8, 128, 1024}, 48).headParts == 4,
          "64/8 heads at 1024 keys: 8 parts on 108 SMs (64 blocks fit), 4 on 48 (32 blocks fit, 64 do not)");
    check(planDecodeAttention({1, 28, 4, 128, 1024}, 132).headParts == 7, "28/4 heads on 132 SMs: 7 parts (28 units)");
    check(planDecodeAttention({8, 32, 8, 128, 1024}, 132).headParts == 2 &&
              planDecodeAttention({8, 64, 8, 128, 1024}, 132).headParts == 2,
          "32/8 and 64/8 heads at batch 8 and 1024 keys: 2 parts (128 units; 64/8: 37.4 us against 45.3 in 1)");
    check(planDecodeAttention({1, 32, 8, 128, 192}, 132, 2).headParts == 2, "head parts given are kept");
    setDecodeAttentionHeadParts(false);
    check(planDecodeAttention({1, 32, 8, 128, 192}, 132).headParts == 1, "no head parts while they are switched off");
    setDecodeAttentionHeadParts(true);
    const DecodeAttentionPlan llama7b = planDecodeAttention({1, 32, 32, 128, 4096}, 132);
    const std::string got = std::to_string(llama7b.splits) + " of " + std::to_string(llama7b.keysPerSplit);
    check(llama7b.splits == 8 && llama7b.keysPerSplit == 512,
          ("Llama-2-7B at 4096 keys on 132 SMs: 8 chunks of 512 (256 blocks), not 9 of 480 (got " + got + ")").c_str());
    const std::string described = describeDecodeAttentionPlan({1, 32, 32, 128, 4096}, llama7b);
    check(described == "32/32 heads of 128 at capacity 4096, batch 1: 8 chunks of 512 keys, one-pass kernel, chunks "
                       "merged by a second launch",
          ("the plan in words names the chunks, the kernel and the merge (got: " + described + ")").c_str());
    const DecodeAttentionShape gqa193{1, 32, 8, 128, 193};
    const std::string describedGqa = describeDecodeAttentionPlan(gqa193, planDecodeAttention(gqa193, 132));
    check(describedGqa == "32/8 heads of 128 at capacity 193, batch 1: 7 chunks of 32 keys, query heads in 4 parts, "
                          "scalar kernel, chunks merged by a second launch",
          ("GQA in words names the head parts (got: " + describedGqa + ")").c_str());
    check(describeDecodeAttentionPlan({1, 32, 32, 128, 32}, planDecodeAttention({1, 32, 32, 128, 32}, 132)) ==
              "32/32 heads of 128 at capacity 32, batch 1: one chunk, scalar kernel",
          "an unsplit plan in words");
    setDecodeAttentionMergeInKernel(true);
    const DecodeAttentionShape long7b{1, 32, 32, 128, 4096};
    const std::string lastBlock = describeDecodeAttentionPlan(long7b, planDecodeAttention(long7b, 132));
    setDecodeAttentionMergeInKernel(false);
    check(lastBlock.find("chunks merged by the last block of each head") != std::string::npos,
          ("a plan that merges in its launch says so (got: " + lastBlock + ")").c_str());
    bool refused = false;
    try {
        describeDecodeAttentionPlan({1, 32, 8, 128, 193}, DecodeAttentionPlan{1, 193, false, false, 3});
    } catch (const KernelError&) {
        refused = true;
    }
    check(refused, "3 parts of 32/8 heads are refused, not described");
    const DecodeAttentionPlan short7b = planDecodeAttention({1, 32, 32, 128, 192}, 132);
    check(short7b.splits == 6 && short7b.keysPerSplit == 32, "Llama-2-7B at 192 keys on 132 SMs: 6 chunks of 32, as before");
    return finish();
}
