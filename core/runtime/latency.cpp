#include "core/runtime/latency.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>

#include "core/compress/compressed_layers.h"
#include "core/compress/prune_math.h"
#include "core/runtime/cuda_linear.h"
#include "core/runtime/decode_graph.h"
#include "core/runtime/fused_decode.h"
#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double percentile(std::vector<double> values, double p) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    const double rank = p * double(values.size() - 1);
    const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
    return values[lo] + (values[hi] - values[lo]) * (rank - double(lo));
}

// Next ids of every sequence from the last position's logits; reading them back waits for the device.
at::Tensor greedyNext(const at::Tensor& logits) { return logits.select(1, logits.size(1) - 1).argmax(-1).unsqueeze(1).to(at::kCPU); }

int64_t memoryNow(bool cuda) { return cuda ? deviceMemoryUsedBytes() : -1; }

} // namespace

LatencyResult measureLatency(const Model& model, const RuntimeOptions& options, const LatencyParams& p, Feedback* feedback) {
    if (p.batch < 1 || p.promptTokens < 1 || p.genTokens < 1 || p.prefillRepeats < 1)
        throw Error("bench: batch, prompt tokens, generated tokens and repeats must be at least 1");
    if (!(p.prefillWarmupSeconds >= 0)) throw Error("bench: the prefill warm-up must be 0 seconds or more");
    if (p.promptTokens > model.spec.context || p.genTokens > model.spec.context - p.promptTokens)   // no overflow
        throw Error("bench: " + std::to_string(p.promptTokens) + " + " + std::to_string(p.genTokens) +
                    " tokens exceed the model's context of " +
                    std::to_string(model.spec.context) + model.spec.contextLimitNote());
    const bool cuda = options.device.is_cuda();
    {   // Refused before anything is allocated: the KV cache of the batch and the prefill's logits and activations
        // (a batch of 100000 on stories260K had taken 12 GB of a 23 GB machine when it was stopped, user probe).
        const ArchSpec& s = model.spec;
        double kvPerToken = 0;
        for (int64_t l = 0; l < s.layers; ++l) kvPerToken += 2.0 * double(s.kvHeadsAt(l)) * double(s.headDim);
        const double cached = double(p.batch) * double(p.promptTokens + p.genTokens + 1) * kvPerToken * double(c10::elementSize(options.dtype));
        // Per prompt token in fp32: its logits, a few hidden- and MLP-wide activations alive at once, its attention scores.
        const double perToken = double(s.vocab) + 8.0 * double(s.hidden + s.ffn) + double(s.heads) * double(p.promptTokens);
        const double prefill = double(p.batch) * double(p.promptTokens) * perToken * 4.0;
        double room = 0;
        if (cuda) {
            const c10::DeviceGuard onDevice(options.device);
            room = double(deviceMemoryFreeBytes());
        } else {
            room = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE)) / 2;
        }
        if (room > 0 && cached + prefill > room) {
            char text[200];
            std::snprintf(text, sizeof text, "about %.1f GiB beyond the weights, more than %s (%.1f GiB)", (cached + prefill) / double(1 << 30),
                          cuda ? "the GPU has free" : "half of this machine's memory", room / double(1 << 30));
            throw Error("bench: a batch of " + std::to_string(p.batch) + " sequences of " + std::to_string(p.promptTokens) + " + " +
                        std::to_string(p.genTokens) + " tokens takes " + text + ": use a smaller --batch or fewer tokens");
        }
    }
    LatencyResult r;
    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<int64_t> pick(0, model.spec.vocab - 1);
    at::Tensor prompt = at::empty({p.batch, p.promptTokens}, at::kLong);
    for (int64_t i = 0; i < prompt.numel(); ++i) prompt.data_ptr<int64_t>()[i] = pick(rng);

    const int64_t memoryAtStart = p.deviceMemoryBaseline >= 0 ? p.deviceMemoryBaseline : memoryNow(cuda);
    int64_t peak = memoryAtStart;
    auto sample = [&] { peak = std::max(peak, memoryNow(cuda)); };
    Transformer runtime(model, options);
    auto cache = runtime.makeCache(p.batch, p.promptTokens + p.genTokens + 1);
    clearLastFusedAttentionPlan();   // a plan of an earlier measurement in this process is not this one's

    auto start = Clock::now();
    greedyNext(runtime.forward(prompt, cache.get()));
    r.loadSeconds = secondsSince(start);
    sample();
    std::vector<double> prefill;
    auto prefillOnce = [&] {
        cache->reset();
        start = Clock::now();
        at::Tensor next = greedyNext(runtime.forward(prompt, cache.get()));
        prefill.push_back(secondsSince(start));
        return next;
    };
    at::Tensor next;
    if (cuda && p.prefillWarmupSeconds > 0) {   // the GPU back at working clocks before any prefill is timed
        const auto warmupStart = Clock::now();
        while (r.prefillWarmupRuns < 100 && secondsSince(warmupStart) < p.prefillWarmupSeconds) {
            if (feedback) feedback->throwIfCancelled();
            prefillOnce();
            ++r.prefillWarmupRuns;
        }
        prefill.clear();
    }
    for (int64_t i = 0; i < p.prefillRepeats; ++i) {
        if (feedback) feedback->throwIfCancelled();
        next = prefillOnce();
    }
    sample();
    r.prefillSeconds = percentile(prefill, 0.5);
    r.prefillTokensPerSecond = double(p.batch * p.promptTokens) / r.prefillSeconds;

    // One untimed step (where a graph is used, it is captured then), then genTokens timed steps.
    auto decode = [&](at::Tensor ids, double progressFrom, double progressTo) {
        start = Clock::now();
        ids = greedyNext(runtime.forward(ids, cache.get()));
        r.firstDecodeMs = secondsSince(start) * 1e3;
        std::vector<double> steps;
        for (int64_t i = 0; i < p.genTokens; ++i) {
            if (feedback) {
                feedback->throwIfCancelled();
                feedback->setProgress(progressFrom + (progressTo - progressFrom) * double(i) / double(p.genTokens));
            }
            start = Clock::now();
            ids = greedyNext(runtime.forward(ids, cache.get()));
            steps.push_back(secondsSince(start) * 1e3);
        }
        return steps;
    };
    const bool graphs = cuda && options.decode == DecodeMode::CudaGraph && DecodeGraph::available();
    if (graphs) {   // the same decode without graphs first, from the same prompt
        runtime.setDecodeMode(DecodeMode::Eager);
        std::vector<double> eager = decode(next, 0.0, 0.5);
        r.eagerDecodeP50Ms = percentile(eager, 0.5);
        r.eagerDecodeP99Ms = percentile(eager, 0.99);
        runtime.setDecodeMode(DecodeMode::CudaGraph);
        next = prefillOnce();
        prefill.pop_back();
    }
    std::vector<double> steps = decode(next, graphs ? 0.5 : 0.0, 1.0);
    sample();
    r.decodeGraphs = cache->graphReplays() > 0;
    r.decodeGraphFailure = cache->graphFailure();
    r.decodeAttentionPlan = lastFusedAttentionPlan();
    r.decodeP50Ms = percentile(steps, 0.5);
    r.decodeP99Ms = percentile(steps, 0.99);
    double sum = 0;
    for (double s : steps) sum += s;
    r.decodeMeanMs = sum / double(steps.size());
    r.peakDeviceBytes = cuda && memoryAtStart >= 0 ? peak - memoryAtStart : -1;
    r.layerPaths = runtime.layerPathSummary();
    r.cpuWeightPlan = runtime.cpuWeightPlan();
    r.cpuPackedInt = runtime.options().device.is_cpu() && runtime.options().cpuPackedInt == CpuPackedInt::On;
    r.decodeBytesSavedByPacking = runtime.decodeBytesSavedByPacking();
    return r;
}

double measureCopyBandwidth(const at::Device& device, int64_t bytes) {
    auto opts = at::TensorOptions().dtype(at::kByte).device(device);
    at::Tensor from = at::ones({bytes}, opts), to = at::empty({bytes}, opts);
    to.copy_(from);
    to.select(0, 0).item<uint8_t>();   // waits for the device
    std::vector<double> rates;
    for (int i = 0; i < 5; ++i) {
        const int copies = 10;
        auto start = Clock::now();
        for (int c = 0; c < copies; ++c) to.copy_(from);
        to.select(0, 0).item<uint8_t>();
        rates.push_back(2.0 * double(bytes) * copies / secondsSince(start));
    }
    return percentile(rates, 0.5);
}

const SyntheticShape& syntheticShape(const std::string& name) {
    // Llama-2 7B and 70B (GQA: 8 kv heads), vocabulary 32000, context 4096; Llama-3 8B (GQA: 32 query heads over 8 kv
    // heads, the shape of Mistral-7B's attention too) and 70B (Llama-2 70B's blocks), vocabulary 128256, context 8192,
    // RoPE theta 500000.
    static const std::vector<SyntheticShape> shapes = {
        {"llama-7b", 4096, 32, 32, 128, 11008, 32000, 4096, 32, 32, "Llama-2 7B"},
        {"llama-70b", 8192, 64, 8, 128, 28672, 32000, 4096, 80, 8, "Llama-2 70B"},
        {"llama3-8b", 4096, 32, 8, 128, 14336, 128256, 8192, 32, 32, "Llama-3 8B", 500000.0},
        {"llama3-70b", 8192, 64, 8, 128, 28672, 128256, 8192, 80, 8, "Llama-3 70B", 500000.0},
    };
    std::string known;
    for (const SyntheticShape& shape : shapes) {
        if (shape.name == name) return shape;
        known += (known.empty() ? "" : ", ") + shape.name;
    }
    throw Error("--synthetic knows " + known + ", got '" + name + "'");
}

int64_t syntheticContext(const SyntheticShape& shape, int64_t context) {
    if (context < 0 || context > kMaxSyntheticContext)
        throw Error("synthetic " + shape.name + ": context must be 1.." + std::to_string(kMaxSyntheticContext) +
                    " positions, got " + std::to_string(context));
    return context > 0 ? context : shape.context;
}

std::unique_ptr<Model> syntheticLlama(const std::string& name, int64_t layers, const at::Device& device, uint64_t seed,
                                      int64_t context) {
    const SyntheticShape& shape = syntheticShape(name);
    if (layers < 1 || layers > shape.totalLayers)
        throw Error("synthetic " + name + ": layers must be 1.." + std::to_string(shape.totalLayers) + ", got " +
                    std::to_string(layers));
    const int64_t positions = syntheticContext(shape, context);
    auto model = std::make_unique<Model>();
    ArchSpec& s = model->spec;
    s.modelType = "llama";
    s.layers = layers;
    s.hidden = shape.hidden;
    s.heads = shape.heads;
    s.kvHeads = shape.kvHeads;
    s.headDim = shape.headDim;
    s.ffn = shape.ffn;
    s.vocab = shape.vocab;
    s.context = positions;
    s.ropeTheta = shape.ropeTheta;
    model->path = "synthetic:" + name;
    model->format = "synthetic";
    model->metadata["note"] = "random weights, " + shape.model + " shapes, " + std::to_string(layers) + " of " +
                              std::to_string(shape.totalLayers) + " layers" +
                              (context > 0 ? ", context " + std::to_string(context) + " (given)" : "");
    at::manual_seed(seed);
    auto opts = at::TensorOptions().dtype(at::kHalf).device(device);
    auto matrix = [&](const std::string& name, int64_t out, int64_t in) {
        model->replaceTensor(name, (at::randn({out, in}, opts) * 0.02).to(at::kCPU));
    };
    auto ones = [&](const std::string& name) { model->replaceTensor(name, at::ones({s.hidden}, at::kFloat)); };
    const int64_t kvRows = s.kvHeads * s.headDim;
    matrix("model.embed_tokens.weight", s.vocab, s.hidden);
    for (int64_t l = 0; l < layers; ++l) {
        auto n = [&](const char* suffix) { return names::llamaLayer(l, suffix); };
        ones(n("input_layernorm.weight"));
        ones(n("post_attention_layernorm.weight"));
        matrix(n("self_attn.q_proj.weight"), s.heads * s.headDim, s.hidden);
        matrix(n("self_attn.k_proj.weight"), kvRows, s.hidden);
        matrix(n("self_attn.v_proj.weight"), kvRows, s.hidden);
        matrix(n("self_attn.o_proj.weight"), s.hidden, s.heads * s.headDim);
        matrix(n("mlp.gate_proj.weight"), s.ffn, s.hidden);
        matrix(n("mlp.up_proj.weight"), s.ffn, s.hidden);
        matrix(n("mlp.down_proj.weight"), s.hidden, s.ffn);
    }
    ones("model.norm.weight");
    matrix("lm_head.weight", s.vocab, s.hidden);
    s.validate(model->path);
    return model;
}

std::unique_ptr<Model> syntheticLlama7b(int64_t layers, const at::Device& device, uint64_t seed) {
    return syntheticLlama("llama-7b", layers, device, seed);
}

std::unique_ptr<Model> randomIntVariant(const Model& base, int bits, int64_t groupSize, const at::Device& device,
                                        uint64_t seed, bool head) {
    quant::QuantSpec spec;
    spec.bits = bits;
    spec.symmetric = true;
    spec.groupSize = groupSize;
    quant::validateSpec(spec);
    auto variant = base.clone();
    at::manual_seed(seed + 1);
    std::vector<std::string> layers = base.linearLayers();
    if (head) {
        if (!base.has("lm_head.weight")) throw Error(base.path, "the output head is tied to the embedding; no head to quantize");
        layers.push_back(names::kHead);
    }
    for (const std::string& layer : layers) {
        const TensorRecord& record = base.tensor(layer + ".weight");
        quant::QuantizedWeight q;
        q.spec = spec;
        q.rows = record.shape.at(0);
        q.cols = record.shape.at(1);
        const int64_t words = (q.cols + quant::levelsPerWord(bits) - 1) / quant::levelsPerWord(bits);
        const int64_t groups = quant::groupCount(q.cols, groupSize);
        auto onDevice = at::TensorOptions().device(device);
        // Every bit pattern is a valid word at 4 and 8 bits (whole levels per word).
        q.packed = at::randint(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), {q.rows, words},
                               onDevice.dtype(at::kInt)).to(at::kCPU);
        q.scales = (at::rand({q.rows, groups}, onDevice.dtype(at::kFloat)) * 0.004 + 0.001).to(at::kCPU);
        q.zeros = at::full({q.rows, groups}, 1 << (bits - 1), at::kInt);
        q.groupIndex = quant::defaultGroupIndex(q.cols, groupSize);
        variant->setCompressed(layer, std::make_shared<IntLinear>(std::move(q), at::Tensor(), "random levels"));
    }
    return variant;
}

std::unique_ptr<Model> sparse24Variant(const Model& base, const at::Device& device) {
    auto variant = base.clone();
    for (const std::string& layer : base.linearLayers()) {
        const at::Tensor w = base.floatTensor(layer + ".weight").to(device);
        const at::Tensor pruned = w * prune::nmMask(w.abs(), 2, 4).to(w.scalar_type());
        variant->replaceTensor(layer + ".weight", pruned.to(at::kHalf).to(at::kCPU));
    }
    return variant;
}

namespace {

// Random codes drawn on `device` (fast for a 7B shape), returned on the CPU where the model keeps them.
at::Tensor randomBytes(int64_t rows, int64_t cols, int64_t low, int64_t high, const at::Device& device) {
    return at::randint(low, high, {rows, cols}, at::TensorOptions().device(device).dtype(at::kInt)).to(at::kCPU);
}

at::Tensor randomScales(int64_t rows, const at::Device& device) {
    return (at::rand({rows}, at::TensorOptions().device(device).dtype(at::kFloat)) * 0.004 + 0.001).to(at::kCPU);
}

} // namespace

std::unique_ptr<Model> randomFp8Variant(const Model& base, const at::Device& device, uint64_t seed) {
    auto variant = base.clone();
    at::manual_seed(seed + 2);
    for (const std::string& layer : base.linearLayers()) {
        const TensorRecord& record = base.tensor(layer + ".weight");
        const int64_t rows = record.shape.at(0), cols = record.shape.at(1);
        quant::Fp8Weight w;
        // Magnitude codes 0..0x7E (0x7F is NaN), then a random sign bit.
        const at::Tensor magnitude = randomBytes(rows, cols, 0, 0x7F, device);
        const at::Tensor sign = randomBytes(rows, cols, 0, 2, device) * 0x80;
        w.codes = (magnitude + sign).to(at::kByte);
        w.scales = randomScales(rows, device);
        variant->setCompressed(layer, std::make_shared<Fp8Linear>(std::move(w), /*dynamicActivations=*/true));
    }
    return variant;
}

std::unique_ptr<Model> randomW8a8Variant(const Model& base, const at::Device& device, uint64_t seed, bool foldedSmoothing) {
    auto variant = base.clone();
    at::manual_seed(seed + 3);
    for (const std::string& layer : base.linearLayers()) {
        const TensorRecord& record = base.tensor(layer + ".weight");
        const int64_t rows = record.shape.at(0), cols = record.shape.at(1);
        quant::Int8Weight w;
        w.q = randomBytes(rows, cols, -127, 128, device).to(at::kChar);
        w.scales = randomScales(rows, device);
        const at::Tensor smoothing = foldedSmoothing ? at::ones({cols}, at::kFloat) : at::rand({cols}, at::kFloat) + 0.5;
        variant->setCompressed(layer, std::make_shared<W8A8Linear>(std::move(w), smoothing));
    }
    return variant;
}

size_t decodeWeightBytes(const Model& model, at::ScalarType dtype) {
    const size_t element = c10::elementSize(dtype);
    size_t bytes = 0;
    for (const std::string& layer : model.linearLayers()) {
        if (auto c = model.compressed(layer)) {
            bytes += c->storageBytes();
        } else {
            bytes += size_t(model.tensor(layer + ".weight").elementCount()) * element;
        }
    }
    if (auto head = model.compressed(names::kHead)) return bytes + head->storageBytes();
    const std::string head = model.has("lm_head.weight") ? "lm_head.weight" : names::embedding(model.spec.family);
    return bytes + size_t(model.tensor(head).elementCount()) * element;
}

} // namespace cwb
