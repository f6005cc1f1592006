#include "core/export/export_support.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>

#include "core/util/atomic_file.h"
#include "core/util/error.h"

namespace cwb::exporting {

std::vector<uint8_t> plainBytes(const at::Tensor& tensor, ggml::Type type, const std::string& what) {
    at::ScalarType scalar;
    switch (type) {
    case ggml::Type::F32: scalar = at::kFloat; break;
    case ggml::Type::F16: scalar = at::kHalf; break;
    case ggml::Type::BF16: scalar = at::kBFloat16; break;
    case ggml::Type::I32: scalar = at::kInt; break;
    case ggml::Type::I64: scalar = at::kLong; break;
    case ggml::Type::I8: scalar = at::kChar; break;
    default: throw Error("internal: plainBytes cannot write type " + ggmlTypeName(type));
    }
    const at::Tensor source = tensor.to(at::kCPU);
    const at::Tensor t = source.to(scalar).contiguous();
    // Finite values that f16 turns into inf (magnitudes of 65520 and more; the largest finite f16 is 65504). Checked on
    // the converted tensor first, so that the usual case costs one pass over 2-byte values.
    if (scalar == at::kHalf && source.is_floating_point() && source.scalar_type() != at::kHalf && at::isinf(t).any().item<bool>()) {
        const at::Tensor overflowed = at::isinf(t).logical_and(at::isfinite(source));
        if (overflowed.any().item<bool>()) {
            const double largest = source.masked_select(overflowed).to(at::kFloat).abs().max().item<double>();
            char text[160];
            std::snprintf(text, sizeof text, "has values up to %.6g, past f16's largest (65504), which would be written as "
                          "inf; export it with --type bf16 or f32", largest);
            throw Error(what.empty() ? std::string("a tensor") : "tensor '" + what + "'", text);
        }
    }
    std::vector<uint8_t> bytes(size_t(t.numel()) * t.element_size());
    if (!bytes.empty()) std::memcpy(bytes.data(), t.data_ptr(), bytes.size());
    return bytes;
}

ggml::Type sourceFloatType(const Model& model) {
    // One bf16 tensor is enough: its values may lie past f16's range, and bf16 holds every f16 value's range.
    for (const auto& name : model.tensorNames())
        if (model.tensor(name).type == ggml::Type::BF16) return ggml::Type::BF16;
    return ggml::Type::F16;
}

bool roundsValues(const at::Tensor& values, ggml::Type type) {
    if (type != ggml::Type::F16 && type != ggml::Type::BF16) return false;
    const at::Tensor f = values.to(at::kFloat);
    return !at::equal(f, f.to(type == ggml::Type::F16 ? at::kHalf : at::kBFloat16).to(at::kFloat));
}

std::string roundedFloatsNote(const std::vector<std::string>& names, ggml::Type written) {
    if (names.empty() || written == ggml::Type::F32) return "";
    std::string list;
    for (size_t i = 0; i < names.size() && i < 3; ++i) list += (i ? ", " : "") + names[i];
    if (names.size() > 3) list += ", ...";
    return std::to_string(names.size()) + (names.size() == 1 ? " tensor" : " tensors") + " held as f32 (" + list +
           ") written as " + ggmlTypeName(written) + ", rounded: --type f32 writes " + (names.size() == 1 ? "it" : "them") +
           " exactly (and every other tensor left unquantized as f32)";
}

namespace {

at::Tensor reorderHeadRows(const at::Tensor& rows, int64_t heads, int64_t headDim, bool toHalves) {
    if (heads <= 0 || headDim % 2 != 0 || rows.size(0) != heads * headDim)
        throw Error("internal: cannot reorder " + std::to_string(rows.size(0)) + " rows as " + std::to_string(heads) +
                    " RoPE heads of " + std::to_string(headDim));
    std::vector<int64_t> shape = rows.sizes().vec();
    std::vector<int64_t> rest(shape.begin() + 1, shape.end());
    std::vector<int64_t> view = {heads, toHalves ? headDim / 2 : 2, toHalves ? 2 : headDim / 2};
    view.insert(view.end(), rest.begin(), rest.end());
    return rows.reshape(view).transpose(1, 2).contiguous().reshape(shape);
}

} // namespace

at::Tensor adjacentToHalves(const at::Tensor& rows, int64_t heads, int64_t headDim) {
    return reorderHeadRows(rows, heads, headDim, true);
}
at::Tensor halvesToAdjacent(const at::Tensor& rows, int64_t heads, int64_t headDim) {
    return reorderHeadRows(rows, heads, headDim, false);
}

int64_t ropeHeadsOf(const Model& model, const std::string& name) {
    if (model.spec.family != Family::Llama) return 0;
    static const std::regex pattern(R"(model\.layers\.(\d+)\.self_attn\.([qk])_proj(\.weight|\.bias)?)");
    std::smatch m;
    if (!std::regex_match(name, m, pattern)) return 0;
    const int64_t layer = std::stoll(m[1]);
    return m[2] == "q" ? model.spec.headsAt(layer) : model.spec.kvHeadsAt(layer);
}

std::string ggmlTypeName(ggml::Type type) {
    const ggml::TypeTraits* t = ggml::traits(type);
    return t ? t->name : "type " + std::to_string(uint32_t(type));
}

ggml::Type parseGgmlType(const std::string& name, const std::vector<ggml::Type>& allowed) {
    auto lower = [](std::string s) {
        std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
        return s;
    };
    std::string choices;
    for (ggml::Type t : allowed) {
        if (lower(ggmlTypeName(t)) == lower(name)) return t;
        choices += (choices.empty() ? "" : ", ") + ggmlTypeName(t);
    }
    throw Error("unknown or unsupported tensor type '" + name + "' (choose one of: " + choices + ")");
}

double relativeError(const at::Tensor& a, const at::Tensor& b) {
    const double den = b.to(at::kDouble).pow(2).sum().item<double>();
    const double num = (a.to(at::kDouble) - b.to(at::kDouble)).pow(2).sum().item<double>();
    return den == 0 ? (num == 0 ? 0.0 : INFINITY) : num / den;
}

LayerShape uniformLayerShape(const ArchSpec& spec) {
    if (spec.layers <= 0) return {spec.heads, spec.kvHeads, spec.ffn};
    return {spec.headsAt(0), spec.kvHeadsAt(0), spec.ffnAt(0)};
}

std::string nonUniformLayers(const ArchSpec& spec) {
    const LayerShape first = uniformLayerShape(spec);
    for (int64_t l = 1; l < spec.layers; ++l) {
        const LayerShape s = {spec.headsAt(l), spec.kvHeadsAt(l), spec.ffnAt(l)};
        auto differs = [&](const char* what, int64_t a, int64_t b) {
            return "layer " + std::to_string(l) + " has " + std::to_string(b) + " " + what + " but layer 0 has " +
                   std::to_string(a) + "; the format stores one size for all layers (structured pruning made them "
                   "differ: prune with one ratio for every layer)";
        };
        if (s.heads != first.heads) return differs("attention heads", first.heads, s.heads);
        if (s.kvHeads != first.kvHeads) return differs("kv heads", first.kvHeads, s.kvHeads);
        if (s.ffn != first.ffn) return differs("MLP channels", first.ffn, s.ffn);
    }
    return "";
}

ParentFolders::ParentFolders(const std::string& path) {
    namespace fs = std::filesystem;
    std::vector<fs::path> missing;
    std::error_code ec;
    for (fs::path p = fs::path(path).parent_path(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
        missing.push_back(p);
        if (p == p.parent_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
        if (!fs::create_directory(*it, ec) && ec) {
            removeMade();   // a destructor does not run for a constructor that throws
            throw Error(it->string(), "cannot create the folder: " + ec.message());
        }
        mMade.push_back(it->string());
    }
}

ParentFolders::~ParentFolders() {
    if (!mCommitted) removeMade();
}

void ParentFolders::removeMade() {
    std::error_code ignored;
    for (auto it = mMade.rbegin(); it != mMade.rend(); ++it)
        if (std::filesystem::is_empty(*it, ignored)) std::filesystem::remove(*it, ignored);
    mMade.clear();
}

TemporaryPath::~TemporaryPath() {
    if (mCommitted) return;
    std::error_code ignored;
    std::filesystem::remove_all(mPath, ignored);
}

namespace {

// Files a Hugging Face export writes (or copies from the source): an earlier export in the folder may be replaced.
bool exportWrites(const std::string& name) {
    static const std::regex written(
        "model(-[0-9]+-of-[0-9]+)?\\.safetensors|model\\.safetensors\\.index\\.json|config\\.json|generation_config\\.json|"
        "quantize_config\\.json|tokenizer\\.json|tokenizer_config\\.json|tokenizer\\.model|special_tokens_map\\.json|"
        "vocab\\.json|merges\\.txt|chat_template\\.jinja|chat_template\\.json");
    return std::regex_match(name, written);
}

} // namespace

std::string destinationProblem(const std::string& path, bool folder) {
    namespace fs = std::filesystem;
    if (path.empty()) return "no output path given";
    std::error_code ec;
    fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) parent = ".";
    // Missing folders on the way are made by the export (as mkdir -p); the nearest one that exists must take them.
    fs::path existing = parent;
    while (!fs::exists(existing, ec)) {
        const fs::path up = existing.parent_path();
        if (up.empty()) {   // a relative path's first folder is missing: it is made in the working folder
            existing = ".";
            break;
        }
        if (up == existing) break;
        existing = up;
    }
    if (!fs::is_directory(existing, ec)) return existing.string() + " is not a folder";
    if (folder) {   // a folder named like a model file is read back by its name's format, and fails (GUI probe)
        const std::string extension = fs::path(path).extension().string();
        for (const char* file : {".gguf", ".bin", ".safetensors", ".json"})
            if (extension == file)
                return "a folder named '" + fs::path(path).filename().string() + "' would be taken for a " + std::string(file + 1) +
                       " file when read; choose a name without '" + file + "' (this format writes a folder)";
    }
    if (::access(existing.c_str(), W_OK | X_OK) != 0)
        return "cannot write into the folder " + existing.string() + ": " + std::strerror(errno);
    const fs::file_status status = fs::status(path, ec);
    if (!fs::exists(status)) return "";
    if (!folder) {
        if (fs::is_directory(status)) return "is a folder; give the path of the file to write (e.g. " + path + "/model.gguf)";
        // One-file exports are GGUF: an earlier GGUF (or an empty file) may be replaced, anything else is someone's data.
        // Not opened unless a regular file (a FIFO would block the read).
        if (!fs::is_regular_file(status)) return "exists and is not a regular file; choose another name";
        std::ifstream in(path, std::ios::binary);
        if (!in) return std::string("exists and cannot be read to check that it is a GGUF file: ") + std::strerror(errno);
        char magic[4] = {};
        in.read(magic, 4);
        const std::streamsize got = in.gcount();
        if (got == 0 && fs::file_size(path, ec) == 0) return "";
        if (got != 4 || std::memcmp(magic, "GGUF", 4) != 0)
            return "exists and is not a GGUF file; an export would replace it: remove it or choose another name";
        return "";
    }
    if (!fs::is_directory(status)) return "exists and is not a folder (an export in this format is a folder)";
    std::string foreign;
    int files = 0, folders = 0;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
        const std::string name = entry.path().filename().string();
        std::error_code kind;
        if (entry.is_regular_file(kind) && exportWrites(name)) continue;
        const bool isFolder = entry.is_directory(kind);
        if (files + folders < 3) foreign += (foreign.empty() ? "" : ", ") + name + (isFolder ? "/" : "");
        ++(isFolder ? folders : files);
    }
    if (ec) return "cannot list the folder: " + ec.message();
    const int count = files + folders;
    if (count > 0) {
        // A subfolder was counted as a file (GUI probe).
        const auto counted = [](int n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
        const std::string held = folders == 0 ? counted(files, "file")
                                 : files == 0 ? counted(folders, "folder")
                                              : counted(files, "file") + " and " + counted(folders, "folder");
        return "the folder holds " + held + " an export does not write (" + foreign + (count > 3 ? ", ..." : "") +
               "); an export replaces the whole folder, so choose an empty or new folder, or one holding only an earlier export";
    }
    return "";
}

void removeKilledExportLeftovers(const std::string& path, const std::vector<std::string>& tags, std::vector<std::string>& notes) {
    for (const std::string& tag : tags)
        for (const std::string& removed : removeAbandonedSiblings(path, tag))
            notes.push_back("removed " + removed + ", left by an earlier export to the same path that was killed");
}

void replacePath(const std::string& from, const std::string& to) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(to, ec)) {
        // Move the old folder aside first so a failure never leaves neither.
        // Onto a new empty folder of its own: rename replaces an empty folder, and no folder of the user's is touched.
        const std::string aside = createSiblingFolder(to, ".old-");
        fs::rename(to, aside, ec);
        if (ec) {
            std::error_code ignored;
            fs::remove(aside, ignored);
            throw Error(to, "cannot replace the existing folder: " + ec.message());
        }
        fs::rename(from, to, ec);
        if (ec) {
            fs::rename(aside, to);
            throw Error(to, "cannot move the export into place: " + ec.message());
        }
        fs::remove_all(aside, ec);
        return;
    }
    fs::rename(from, to, ec);
    if (ec) throw Error(to, "cannot move the export into place: " + ec.message());
}

} // namespace cwb::exporting
