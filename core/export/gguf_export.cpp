// GGUF v3 for llama.cpp: architecture and tokenizer metadata, tensors renamed to llama.cpp's names, q/k rows in
// the order its RoPE expects, each tensor in the type the recipe implies (quantized layers mapped to the nearest
// ggml type, exactly where the formats coincide) or the type asked for, falling back to the smallest type whose
// block fits a row. Every tensor's added error is measured from the bytes written.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <set>

#include "core/compress/compressed_layers.h"
#include "core/export/export_format.h"
#include "core/export/export_support.h"
#include "core/io/gguf_file.h"
#include "core/io/gguf_names.h"
#include "core/runtime/transformer.h"
#include "core/util/error.h"
#include "core/util/json_text.h"

namespace cwb {

namespace {

using ggml::Type;

const std::vector<Type>& kWritable = ggml::writableTypes();

// The type asked for when its block fits the row, else the smallest (in bits per weight) that fits and holds at least
// as many bits; `floatType` (f16, or the f32/bf16 asked for) always fits. Offsets (q4_1, q5_1) are not preferred for
// asymmetric layers: re-quantizing an act-order int4 g32 asym GPTQ layer of stories260K gave PPL 7.76 as q4_0 and
// 7.99 as q4_1 (7.40 / 7.44 as q5_0 / q5_1; 7.24 unquantized; session 43), its blocks holding no one grid anyway.
Type fittingType(Type wanted, int64_t rowLength, std::string* note, Type floatType) {
    const Type best = ggml::fittingType(wanted, rowLength, floatType);
    if (best != wanted)
        *note = "rows of " + std::to_string(rowLength) + " do not fit " + exporting::ggmlTypeName(wanted) + " blocks of " +
                std::to_string(ggml::traits(wanted)->blockSize) + "; written as " + exporting::ggmlTypeName(best);
    return best;
}

// The ggml type nearest to a compressed layer's own format.
Type nearestType(const CompressedLinear& linear) {
    if (linear.kind() != "int") return Type::Q8_0;   // fp8 and w8a8: 8-bit codes with a scale
    switch (linear.bits()) {
    case 2: return Type::Q2_K;
    case 3: return Type::Q3_K;
    case 4: return Type::Q4_K;
    case 5: return Type::Q5_K;
    case 6: return Type::Q6_K;
    default: return Type::Q8_0;
    }
}

// Blocks of 32 inputs with one scale d (and offset m): Q4_0 x = d·(c − 8), Q4_1 x = d·c + m, Q5_0 x = d·(c − 16),
// Q5_1 x = d·c + m, Q8_0 x = d·c. An integer layer whose groups hold whole blocks in input order, without input scales,
// is one of them level for level where its levels can only fit: x = s·(q − z) is d = s with c = q − z + 8 (Q4_0), c = q − z + 16
// (Q5_0), c = q − z (Q8_0), or c = q with m = −s·z rounded to fp16 (Q4_1, Q5_1; the only change). So 2- and 3-bit
// layers fit Q4_0, 6- and 7-bit ones Q8_0 (they were re-quantized: an int3 g32 RTN of stories260K read back at PPL
// 19.87 against 16.69; export probe). The types that hold the layer, smallest first; none: re-quantized from its weights.
// Ranges are bounded by the width and the zero points, so a symmetric 4-bit layer (z = 8) fits q4_0, an asymmetric one
// q4_1, an asymmetric 8-bit one q8_0 only where every zero point is 128.
std::vector<Type> exactBlockTypes(const CompressedLinear& linear) {
    const auto* intLinear = dynamic_cast<const IntLinear*>(&linear);
    if (!intLinear || intLinear->inputScale().defined()) return {};
    const auto& w = intLinear->quantized();
    if (w.cols % 32 || quant::groupWidth(w.cols, w.spec.groupSize) % 32) return {};
    if (!at::equal(w.groupIndex.to(at::kInt), quant::defaultGroupIndex(w.cols, w.spec.groupSize))) return {};
    // Bounds from the width and the zero points alone (levels span 0 .. 2^bits − 1): no pass over the unpacked levels,
    // which planning a 7B export would repeat for every layer before writing it.
    const int64_t bottom = 0, top = (int64_t(1) << w.spec.bits) - 1;
    const int64_t low = bottom - w.zeros.max().item<int64_t>(), high = top - w.zeros.min().item<int64_t>();
    std::vector<Type> types;
    if (low >= -8 && high <= 7) types.push_back(Type::Q4_0);
    if (bottom >= 0 && top <= 15) types.push_back(Type::Q4_1);
    if (low >= -16 && high <= 15) types.push_back(Type::Q5_0);
    if (bottom >= 0 && top <= 31) types.push_back(Type::Q5_1);
    if (low >= -128 && high <= 127) types.push_back(Type::Q8_0);   // Q8_1 is an intermediate type llama.cpp does not load
    return types;
}

// The exact type a layer of 4, 5 or 8 bits goes out in by default: the smallest that holds it (Type::F32: none). Layers
// of other widths are written in the type nearest their width (a K-quant) unless that type, or the one --requantize
// names, holds them.
Type ownExactType(const CompressedLinear& linear, const std::vector<Type>& exact) {
    if (exact.empty() || linear.kind() != "int") return Type::F32;
    const int bits = linear.bits();
    return bits == 4 || bits == 5 || bits == 8 ? exact.front() : Type::F32;
}

std::vector<uint8_t> exactBlocks(const quant::QuantizedWeight& w, Type type) {
    const at::Tensor levels = w.levels().contiguous();                    // [rows, cols]
    const at::Tensor scales = w.scales.contiguous();                      // [rows, groups]
    const at::Tensor zeros = w.zeros.to(at::kInt).contiguous();
    const int64_t perRow = w.cols / 32, groups = scales.size(1), width = quant::groupWidth(w.cols, w.spec.groupSize);
    std::vector<uint8_t> out(ggml::rowBytes(type, w.cols) * size_t(w.rows));
    const int32_t* l = levels.data_ptr<int32_t>();
    const float* s = scales.data_ptr<float>();
    const int32_t* z = zeros.data_ptr<int32_t>();
    // The code c each type stores for level q of zero point zp (exactBlockTypes checked that it fits).
    const bool withOffset = type == Type::Q4_1 || type == Type::Q5_1;
    const int32_t bias = type == Type::Q4_0 ? 8 : type == Type::Q5_0 ? 16 : 0;
    int32_t c[32];
    for (int64_t row = 0; row < w.rows; ++row) {
        for (int64_t k = 0; k < perRow; ++k) {
            const int64_t b = row * perRow + k, g = row * groups + (k * 32) / width;
            const int32_t* q = l + b * 32;
            for (int j = 0; j < 32; ++j) c[j] = withOffset ? q[j] : q[j] - z[g] + bias;
            const uint16_t d = ggml::floatToFp16(s[g]);
            const uint16_t m = ggml::floatToFp16(-s[g] * float(z[g]));
            if (type == Type::Q4_0 || type == Type::Q4_1) {
                uint8_t* qs = type == Type::Q4_0 ? reinterpret_cast<ggml::BlockQ4_0*>(out.data())[b].qs
                                                 : reinterpret_cast<ggml::BlockQ4_1*>(out.data())[b].qs;
                for (int j = 0; j < 16; ++j) qs[j] = uint8_t(c[j] | (c[j + 16] << 4));
                if (type == Type::Q4_0) {
                    reinterpret_cast<ggml::BlockQ4_0*>(out.data())[b].d = d;
                } else {
                    reinterpret_cast<ggml::BlockQ4_1*>(out.data())[b].d = d;
                    reinterpret_cast<ggml::BlockQ4_1*>(out.data())[b].m = m;
                }
            } else if (type == Type::Q5_0) {
                auto& blk = reinterpret_cast<ggml::BlockQ5_0*>(out.data())[b];
                blk.d = d;
                ggml::packQ5(c, blk.qs, blk.qh);
            } else if (type == Type::Q5_1) {
                auto& blk = reinterpret_cast<ggml::BlockQ5_1*>(out.data())[b];
                blk.d = d;
                blk.m = m;
                ggml::packQ5(c, blk.qs, blk.qh);
            } else {
                auto& blk = reinterpret_cast<ggml::BlockQ8_0*>(out.data())[b];
                blk.d = d;
                for (int j = 0; j < 32; ++j) blk.qs[j] = int8_t(c[j]);
            }
        }
    }
    return out;
}

std::vector<uint8_t> encode(const at::Tensor& rows, Type type, const std::string& name) {
    if (type == Type::F32 || type == Type::F16 || type == Type::BF16) return exporting::plainBytes(rows, type, name);
    const at::Tensor f = rows.to(at::kFloat).contiguous();
    const int64_t width = f.size(-1), count = f.numel() / width;
    std::vector<uint8_t> out(ggml::rowBytes(type, width) * size_t(count));
    ggml::quantize(type, f.data_ptr<float>(), out.data(), f.numel());
    return out;
}

at::Tensor decode(const std::vector<uint8_t>& bytes, Type type, const std::vector<int64_t>& shape) {
    at::Tensor out = at::empty(shape, at::kFloat);
    ggml::dequantize(type, bytes.data(), out.data_ptr<float>(), out.numel());
    return out;
}

// The SentencePiece merge rule of llama.cpp ranks pairs by the score of the merged token; a tokenizer.json
// vocabulary carries merge ranks instead, so rank r becomes score −r (earlier merges win).
std::vector<float> scoresFromMerges(const TokenizerData& d) {
    std::map<std::string, size_t> rankOf;
    for (size_t r = 0; r < d.merges.size(); ++r) {
        const auto space = d.merges[r].find(' ');
        if (space == std::string::npos) continue;
        rankOf.emplace(d.merges[r].substr(0, space) + d.merges[r].substr(space + 1), r);
    }
    std::vector<float> scores(d.tokens.size(), 0.0f);
    for (size_t i = 0; i < d.tokens.size(); ++i) {
        auto it = rankOf.find(d.tokens[i]);
        scores[i] = it == rankOf.end() ? -float(d.merges.size() + 1) : -float(it->second);
    }
    return scores;
}

class GgufExport : public ExportFormat {
public:
    std::string id() const override { return "gguf"; }
    std::string optionsProblem(const ExportOptions& options) const override {
        for (const auto& [option, value] : {std::pair<const char*, std::string>{"--type", options.tensorType},
                                            {"--requantize", options.requantizeType}}) {
            if (value.empty()) continue;
            try {
                exporting::parseGgmlType(value, kWritable);
            } catch (const Error& e) {
                return std::string(option) + ": " + e.what();
            }
        }
        return "";
    }
    bool writesFolder() const override { return false; }
    std::string displayName() const override { return "GGUF v3 (llama.cpp)"; }

    std::string refusal(const Model& model, const ExportOptions& options) const override {
        if (!model.tokenizer || !model.tokenizer->vocabulary())
            return "the model has no tokenizer vocabulary to write (llama.cpp needs one)";
        const Family family = model.spec.family;
        for (const auto& name : model.tensorNames())
            if (gguf::ggufName(family, name).empty()) return "tensor '" + name + "' has no llama.cpp name";
        if (family == Family::Gpt2 && !exporting::nonUniformLayers(model.spec).empty())
            return "llama.cpp's gpt2 architecture needs the same sizes in every layer";
        const RopeScaling& r = model.spec.ropeScaling;
        // llama.cpp's YaRN has no key for another attention factor or an untruncated correction range.
        // llama.cpp's YaRN (llama, qwen2) reads no betas and has no key for another attention factor or an
        // untruncated correction range.
        if (r.type == "yarn" && (!r.truncate || std::abs(r.attentionFactor - yarnMscale(r.factor)) > 1e-6 * yarnMscale(r.factor) ||
                                 r.betaFast != 32.0 || r.betaSlow != 1.0))
            return "its yarn RoPE scaling sets " +
                   std::string(!r.truncate ? "truncate false" : r.betaFast != 32.0 || r.betaSlow != 1.0 ? "betas other than 32 / 1"
                                                                                                           : "its own attention factor") +
                   ", which llama.cpp does not compute from GGUF keys; export it as a Hugging Face folder";
        return "";
    }

    ExportReport write(const Model& model, const std::string& path, const ExportOptions& options,
                       Feedback* feedback) const override {
        ExportReport report;
        report.format = id();
        report.path = path;
        report.files.push_back(std::filesystem::path(path).filename().string());   // names, as the folder formats give them
        // Without --type: f16, or bf16 for a bf16 source (f16 would turn its values past 65504 into inf).
        const Type dense = options.tensorType.empty() ? exporting::sourceFloatType(model) : exporting::parseGgmlType(options.tensorType, kWritable);
        // Where a row fits no block of the type wanted: f16, or the f32/bf16 asked for with --type.
        const Type floatFallback = dense == Type::F32 || dense == Type::BF16 ? dense : Type::F16;
        std::optional<Type> requantize;   // --requantize: compressed layers that cannot be written level for level
        if (!options.requantizeType.empty()) requantize = exporting::parseGgmlType(options.requantizeType, kWritable);
        std::set<std::string> compressedNames;   // written from a compressed layer: the error they add is reported
        struct Requantized {
            bool inputScales = false;   // a per-layer x / s (AWQ without fold) that GGUF has no place for
            bool asymmetric = false;
            std::string exactIn;        // the smallest type that would hold it level for level ("" none): --requantize it
        };
        std::map<std::string, Requantized> requantized;   // compressed layers not written level for level
        GgufWriter writer;
        const std::string arch = gguf::ggufArchitecture(model.spec);
        writeArchitecture(writer, model, arch);
        writeTokenizer(writer, model, report);
        const bool toAdjacent = arch == "llama" && model.spec.ropeStyle == RopeStyle::Halves;

        report.tensors.reserve(model.tensorNames().size() + 1);
        std::vector<std::string> roundedFloats;   // f32 records the default dense type rounds
        for (const auto& name : model.tensorNames()) {
            const TensorRecord& r = model.tensor(name);
            ExportedTensor t;
            t.name = gguf::ggufName(model.spec.family, name);
            const std::string layer = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 ? name.substr(0, name.size() - 7) : "";
            auto linear = layer.empty() ? nullptr : model.compressed(layer);
            const std::vector<Type> exactTypes = linear ? exactBlockTypes(*linear) : std::vector<Type>{};
            const Type exact = linear ? ownExactType(*linear, exactTypes) : Type::F32;
            bool isExact = exact != Type::F32;
            const int64_t heads = toAdjacent ? exporting::ropeHeadsOf(model, name) : 0;
            // A tensor of a quantized GGUF source that no step changed keeps its bytes (re-encoding a q4_K from its
            // floats would add error, and f16 would triple its size); one a step replaced goes back to its type.
            const bool floatRecord = r.type == Type::F32 || r.type == Type::F16 || r.type == Type::BF16;
            const bool keepBytes = !linear && !r.packedOnly && !r.storedTransposed && !floatRecord && options.tensorType.empty() && heads == 0 && r.shape.size() >= 2;
            const bool backToSource = !linear && floatRecord && r.quantizedSource && options.tensorType.empty() && r.shape.size() >= 2 &&
                                      ggml::isWritable(*r.quantizedSource);
            // Back to the type it was read in, offsets (q4_1, q4_K) included though pruned zeros then come back as the
            // level nearest 0: the symmetric type of the width, taken to keep them zero, re-gridded every weight (a q4_1
            // stories260K pruned 30%: PPL 12.45 as q4_0 against 11.83 as q4_1 and 11.82 in memory; export probe).
            const Type sourceType = backToSource ? *r.quantizedSource : Type::F32;
            Type wanted = r.shape.size() < 2 ? Type::F32 : isExact ? exact : linear ? (requantize ? *requantize : nearestType(*linear))
                          : keepBytes ? r.type : backToSource ? sourceType : dense;
            const Type type = keepBytes ? r.type : fittingType(wanted, r.shape.back(), &t.note, floatFallback);
            if (backToSource && t.note.empty())
                t.note = "changed by a step; written as " + exporting::ggmlTypeName(type) + ", the type it was read in";
            if (linear) compressedNames.insert(t.name);
            if (!linear && r.type == Type::F32 && type == dense && dense != Type::F32 && options.tensorType.empty() &&
                exporting::roundsValues(model.floatTensor(name), type))
                roundedFloats.push_back(t.name);
            if (!t.note.empty() && linear && !isExact && wanted == nearestType(*linear))   // say where the type came from
                t.note += " (" + exporting::ggmlTypeName(wanted) + ": the ggml type nearest the layer's " + linear->describe() + ")";
            // The type wanted for a layer of another width (or the one --requantize names) may hold its levels too.
            isExact = std::find(exactTypes.begin(), exactTypes.end(), type) != exactTypes.end();
            if (linear && !isExact) {
                report.notes.push_back(t.name + " (" + linear->describe() + ") re-quantized to " + exporting::ggmlTypeName(type));
                const auto* ints = dynamic_cast<const IntLinear*>(linear.get());
                requantized[t.name] = {ints && ints->inputScale().defined(), ints && !ints->quantized().spec.symmetric,
                                       exactTypes.empty() ? "" : exporting::ggmlTypeName(exactTypes.front())};
            }
            if (!t.note.empty()) report.notes.push_back(t.name + ": " + t.note);
            t.type = exporting::ggmlTypeName(type);
            report.bytes += ggml::rowBytes(type, r.shape.back()) * size_t(r.elementCount() / r.shape.back());
            const size_t index = report.tensors.size();
            report.tensors.push_back(t);
            std::vector<int64_t> ne(r.shape.rbegin(), r.shape.rend());
            const int64_t headDim = model.spec.headDim;
            if (keepBytes) {
                writer.addTensor(t.name, type, ne, [&model, name] {
                    const TensorRecord& kept = model.tensor(name);
                    return std::vector<uint8_t>(kept.data, kept.data + kept.bytes);
                });
                continue;
            }
            writer.addTensor(t.name, type, ne, [&model, &report, name, type, isExact, linear, heads, headDim, index] {
                auto order = [&](at::Tensor rows) { return heads > 0 ? exporting::halvesToAdjacent(rows, heads, headDim) : rows; };
                const at::Tensor reference = order(model.floatTensor(name));
                std::vector<uint8_t> bytes;
                if (isExact) {
                    quant::QuantizedWeight w = dynamic_cast<const IntLinear&>(*linear).quantized();
                    if (heads > 0) {
                        w.packed = order(w.packed);
                        w.scales = order(w.scales);
                        w.zeros = order(w.zeros);
                    }
                    bytes = exactBlocks(w, type);
                } else {
                    bytes = encode(reference, type, name);
                }
                report.tensors[index].addedError = exporting::relativeError(decode(bytes, type, reference.sizes().vec()), reference);
                return bytes;
            });
        }
        if (const std::string note = exporting::roundedFloatsNote(roundedFloats, dense); !note.empty()) report.notes.push_back(note);
        // llama.cpp's llama architecture has no sliding window: it attends to the whole context (as its converter
        // leaves Mistral v0.1's window out). Said, since the file then reads as a model of full attention (user probe).
        if (model.spec.slidingWindow > 0)
            report.notes.push_back("the sliding window of " + std::to_string(model.spec.slidingWindow) +
                                   " tokens is not written (GGUF's llama architecture has no key for it): engines, cwb "
                                   "included, read the file as full attention over context_length " +
                                   std::to_string(std::max(model.spec.declaredContext, model.spec.context)) +
                                   ", which equals the model within the window only");
        if (model.spec.family == Family::Llama && model.spec.ropeScaling.type == "llama3" && !model.has("rope_freqs.weight")) {
            // llama.cpp applies Llama 3 scaling as per-frequency divisors in rope_freqs.weight.
            const int64_t half = model.spec.headDim / 2;
            at::Tensor plain = at::arange(half, at::kDouble).mul(2.0 / double(model.spec.headDim));
            plain = at::pow(model.spec.ropeTheta, plain).reciprocal();
            const at::Tensor factors = (plain / ropeInverseFrequencies(model.spec, model).to(at::kDouble)).to(at::kFloat);
            writer.addTensor("rope_freqs.weight", Type::F32, {half}, exporting::plainBytes(factors, Type::F32));
            report.tensors.push_back({"rope_freqs.weight", "f32", 0, "Llama 3 RoPE scaling"});
        }
        writer.addUInt32("general.file_type", fileType(report));
        // Missing folders on the way, as the folder formats make them (exportDestinationProblem checked the rest).
        exporting::ParentFolders parents(path);
        exporting::removeKilledExportLeftovers(path, {".tmp-"}, report.notes);
        writer.write(path, [&](size_t done, size_t total) {
            if (!feedback) return;
            feedback->setProgress(double(done) / double(total));
            feedback->throwIfCancelled();
        });
        parents.commit();
        for (const auto& t : report.tensors) {
            if (t.type == "f32" && t.name.find("norm") != std::string::npos) continue;
            if (t.addedError > 0 && (compressedNames.count(t.name) || (t.type != "f16" && t.type != "bf16" && t.type != "f32")))
                report.notes.push_back(t.name + ": added error " + smallNumberText(t.addedError));
        }
        const std::string warning = requantizedWarning(report, requantized, compressedNames.size());
        if (!warning.empty()) report.warnings.push_back(warning);
        if (requantize && requantized.empty())   // asked for and silently unused (user probe)
            report.notes.push_back("--requantize " + options.requantizeType + ": no layer needed it (" +
                                   (compressedNames.empty() ? std::string("no layer is compressed")
                                                            : "every compressed layer is written level for level in its own type") + ")");
        return report;
    }

private:
    // One line for every compressed layer GGUF could not hold level for level: how many, to what, how far their
    // weights moved, and what keeps them exact where something does.
    static constexpr double kNegligibleError = 1e-6;   // |w' - w|^2 / |w|^2; fp16 rounding is ~1e-7

    template <class Requantized>
    static std::string requantizedWarning(const ExportReport& report, const std::map<std::string, Requantized>& requantized,
                                          size_t compressed) {
        std::map<std::string, int> types;
        std::map<std::string, int> exactIn;   // type that would hold them -> layers
        double worst = 0, sum = 0;
        bool inputScales = false, asymmetric = false;
        size_t moved = 0;
        for (const auto& t : report.tensors) {
            auto it = requantized.find(t.name);
            if (it == requantized.end()) continue;
            // Written as floats with no more than fp16 rounding (~1e-7): the variant's weights, for what an engine computes.
            const bool floatType = t.type == "f32" || t.type == "f16" || t.type == "bf16";
            if (floatType && t.addedError < kNegligibleError) continue;
            ++moved;
            ++types[t.type];
            worst = std::max(worst, t.addedError);
            sum += t.addedError;
            inputScales |= it->second.inputScales;
            asymmetric |= it->second.asymmetric;
            if (!it->second.exactIn.empty()) ++exactIn[it->second.exactIn];
        }
        if (moved == 0) return "";
        std::string to;
        for (const auto& [type, n] : types) to += (to.empty() ? "" : ", ") + type + " x" + std::to_string(n);
        std::string line = std::to_string(moved) + " of " + std::to_string(compressed) +
                           " compressed layers are not written level for level (re-quantized: " + to + "); their added error "
                           "(|w' - w|^2 / |w|^2 against the variant's weights) is up to " + smallNumberText(worst) + ", mean " +
                           smallNumberText(sum / double(moved)) + ", so the file will not score as the variant did";
        for (const auto& [type, n] : exactIn)
            line += "; " + std::to_string(n) + " of them are written level for level with --requantize " + type +
                    " (a larger type than their own width's)";
        if (inputScales)
            line += "; layers with a per-layer input scale (AWQ without \"fold\": true) have no such scale in GGUF: compress "
                    "with \"fold\": true to write them exactly";
        else if (asymmetric)
            line += "; asymmetric layers keep more with --requantize q5_1 or q5_0";
        return line;
    }

    static uint32_t fileType(const ExportReport& report) {
        // llama.cpp's LLAMA_FTYPE of the type most 2-D tensors have: f32 0, f16 1, q4_0 2, q4_1 3, q8_0 7,
        // q5_0 8, q5_1 9, q2_K 10, q3_K_M 12, q4_K_M 15, q5_K_M 17, q6_K 18, bf16 32.
        std::map<std::string, int> count;
        for (const auto& t : report.tensors)
            if (t.name.find("norm") == std::string::npos && t.name.find(".bias") == std::string::npos) ++count[t.type];
        std::string most = "f16";
        int best = 0;
        for (const auto& [type, n] : count)
            if (n > best) best = n, most = type;
        static const std::map<std::string, uint32_t> ftype = {{"f32", 0},  {"f16", 1},   {"q4_0", 2},  {"q4_1", 3},
                                                              {"q8_0", 7}, {"q5_0", 8},  {"q5_1", 9},  {"q2_K", 10},
                                                              {"q3_K", 12}, {"q4_K", 15}, {"q5_K", 17}, {"q6_K", 18},
                                                              {"bf16", 32}};
        auto it = ftype.find(most);
        return it == ftype.end() ? 1 : it->second;
    }

    static void writeArchitecture(GgufWriter& w, const Model& model, const std::string& arch) {
        const ArchSpec& s = model.spec;
        const std::string p = arch + ".";
        w.addString("general.architecture", arch);
        const auto name = model.metadata.find("name");
        w.addString("general.name", name != model.metadata.end() && !name->second.empty() ? name->second : "cwb export");
        w.addUInt32("general.quantization_version", 2);
        w.addUInt32(p + "context_length", uint32_t(s.slidingWindow > 0 && s.declaredContext > s.context ? s.declaredContext : s.context));
        w.addUInt32(p + "embedding_length", uint32_t(s.hidden));
        w.addUInt32(p + "block_count", uint32_t(s.layers));
        // llama.cpp reads these three as one value or as one value per layer (structured pruning).
        auto perLayer = [&](const std::string& key, int64_t (ArchSpec::*at)(int64_t) const) {
            std::vector<uint32_t> values;
            for (int64_t l = 0; l < s.layers; ++l) values.push_back(uint32_t((s.*at)(l)));
            if (std::adjacent_find(values.begin(), values.end(), std::not_equal_to<>()) == values.end() && !values.empty())
                w.addUInt32(key, values.front());
            else
                w.addArray(key, GgufValueType::UInt32, values);
        };
        perLayer(p + "feed_forward_length", &ArchSpec::ffnAt);
        perLayer(p + "attention.head_count", &ArchSpec::headsAt);
        if (s.family == Family::Gpt2) {
            w.addFloat32(p + "attention.layer_norm_epsilon", float(s.normEps));
            return;
        }
        perLayer(p + "attention.head_count_kv", &ArchSpec::kvHeadsAt);
        w.addFloat32(p + "attention.layer_norm_rms_epsilon", float(s.normEps));
        w.addFloat32(p + "rope.freq_base", float(s.ropeTheta));
        w.addUInt32(p + "rope.dimension_count", uint32_t(s.headDim));
        w.addUInt32(p + "attention.key_length", uint32_t(s.headDim));
        w.addUInt32(p + "attention.value_length", uint32_t(s.headDim));
        w.addUInt32(p + "vocab_size", uint32_t(s.vocab));
        if (s.ropeScaling.type == "linear") {
            w.addString(p + "rope.scaling.type", "linear");
            w.addFloat32(p + "rope.scaling.factor", float(s.ropeScaling.factor));
        } else if (s.ropeScaling.type == "yarn") {   // ggufYarnProblem refused what llama.cpp would compute otherwise
            w.addString(p + "rope.scaling.type", "yarn");
            w.addFloat32(p + "rope.scaling.factor", float(s.ropeScaling.factor));
            w.addUInt32(p + "rope.scaling.original_context_length", uint32_t(s.ropeScaling.originalContext));
        }
    }

    // GGUF has one key for the end of a turn and one for the end of a message (Llama 3.1's <|eom_id|>); further
    // stop ids (a generation_config.json list) have no key, and the report says so.
    static void writeStopIds(GgufWriter& w, const TokenizerData& d, ExportReport& report) {
        TokenId eot = -1, eom = -1;
        std::vector<TokenId> rest;
        for (TokenId id : d.stopIds) {
            if (id == d.eos || id == eot || id == eom || std::find(rest.begin(), rest.end(), id) != rest.end()) continue;
            const std::string& text = d.tokens.at(size_t(id));
            if (eom < 0 && text == "<|eom_id|>") eom = id;
            else if (eot < 0 && (text == "<|eot_id|>" || text == "<|im_end|>" || text == "<end_of_turn>" || text == "<|end|>")) eot = id;
            else rest.push_back(id);
        }
        // Without a known end-of-turn token, the first other stop id takes the eot key (Llama 3.1's <|end_of_text|>
        // does not, when <|eot_id|> is there).
        if (eot < 0 && !rest.empty()) {
            eot = rest.front();
            rest.erase(rest.begin());
        }
        const std::vector<TokenId>& unplaced = rest;
        if (eot >= 0) w.addUInt32("tokenizer.ggml.eot_token_id", uint32_t(eot));
        if (eom >= 0) w.addUInt32("tokenizer.ggml.eom_token_id", uint32_t(eom));
        if (!unplaced.empty()) {
            std::string ids;
            for (TokenId id : unplaced) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
            report.notes.push_back("stop ids " + ids + " have no GGUF key (eot and eom are taken); llama.cpp still stops at "
                                   "the end-of-generation tokens it recognises by their text");
        }
    }

    static void writeTokenizer(GgufWriter& w, const Model& model, ExportReport& report) {
        const TokenizerData& d = *model.tokenizer->vocabulary();
        w.addString("tokenizer.ggml.model", d.model);
        if (d.model == "gpt2") w.addString("tokenizer.ggml.pre", d.pre.empty() ? "gpt2" : d.pre);
        w.addStringArray("tokenizer.ggml.tokens", d.tokens);
        if (d.model == "llama") {
            std::vector<float> scores = d.scores;
            if (scores.empty()) {
                scores = scoresFromMerges(d);
                report.notes.push_back("tokenizer scores derived from the merge ranks of tokenizer.json");
            }
            w.addArray("tokenizer.ggml.scores", GgufValueType::Float32, scores);
        }
        if (!d.types.empty()) w.addArray("tokenizer.ggml.token_type", GgufValueType::Int32, d.types);
        if (d.model == "gpt2" && !d.merges.empty()) w.addStringArray("tokenizer.ggml.merges", d.merges);
        if (d.bos >= 0) w.addUInt32("tokenizer.ggml.bos_token_id", uint32_t(d.bos));
        if (d.eos >= 0) w.addUInt32("tokenizer.ggml.eos_token_id", uint32_t(d.eos));
        if (d.unk >= 0) w.addUInt32("tokenizer.ggml.unknown_token_id", uint32_t(d.unk));
        if (d.pad >= 0) w.addUInt32("tokenizer.ggml.padding_token_id", uint32_t(d.pad));
        if (d.sep >= 0) w.addUInt32("tokenizer.ggml.seperator_token_id", uint32_t(d.sep));   // llama.cpp's spelling
        if (d.cls >= 0) w.addUInt32("tokenizer.ggml.cls_token_id", uint32_t(d.cls));
        if (d.mask >= 0) w.addUInt32("tokenizer.ggml.mask_token_id", uint32_t(d.mask));
        writeStopIds(w, d, report);
        if (!d.chatTemplate.empty()) w.addString("tokenizer.chat_template", d.chatTemplate);
        w.addBool("tokenizer.ggml.add_bos_token", d.addBos);
        w.addBool("tokenizer.ggml.add_eos_token", d.addEos);
        if (d.model == "llama") w.addBool("tokenizer.ggml.add_space_prefix", d.addSpacePrefix);
        if (d.model == "gpt2" && d.byteLevelPrefixSpace)
            report.warnings.push_back("the tokenizer puts a space before each text (ByteLevel add_prefix_space); GGUF has no place "
                                      "for that in a byte-level vocabulary, so llama.cpp and cwb read the file without it and "
                                      "give other ids for a text that does not start with a space");
        if (int64_t(d.tokens.size()) != model.spec.vocab)
            report.notes.push_back("the vocabulary has " + std::to_string(d.tokens.size()) + " tokens, the embedding " +
                                   std::to_string(model.spec.vocab) + " rows");
    }
};

} // namespace

std::unique_ptr<ExportFormat> makeGgufExport() { return std::make_unique<GgufExport>(); }

} // namespace cwb
