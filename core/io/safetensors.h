#pragma once
// safetensors: an 8-byte little-endian header length, a JSON header mapping names to dtype, shape and
// data offsets, then the raw tensor bytes. Parsed defensively from a mapped file; the writer is used by
// tests to build synthetic checkpoints and, later, by the exporter.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/io/ggml_types.h"

namespace cwb {

class MappedFile;

struct SafetensorsEntry {
    std::string name;
    std::string dtype;                 // as written: "F32", "BF16", ...
    ggml::Type type = ggml::Type::F32; // "U8" and "F8_E4M3" are I8: raw bytes, told apart by `dtype`
    std::vector<int64_t> shape;
    const uint8_t* data = nullptr;
    size_t bytes = 0;
};

class SafetensorsFile {
public:
    // Throws cwb::Error naming the file: bad header length, bad JSON, unknown dtype, offsets out of range,
    // overlapping tensors, shape × dtype size different from the byte range.
    static SafetensorsFile open(const std::string& path);

    std::shared_ptr<MappedFile> file;
    std::vector<SafetensorsEntry> entries;
    std::map<std::string, std::string> metadata;   // "__metadata__"
};

// Maps a safetensors dtype name to a storage type; returns false for dtypes cwb does not handle.
bool safetensorsDtype(const std::string& dtype, ggml::Type* type);
const char* safetensorsDtypeName(ggml::Type type);

class SafetensorsWriter {
public:
    void add(const std::string& name, ggml::Type type, std::vector<int64_t> shape, std::vector<uint8_t> data);
    // The bytes are produced only while writing, one tensor at a time; `bytes` is what they must total.
    // `dtypeName` overrides the dtype written for `type` with one of the same element size ("F8_E4M3" for I8 bytes).
    using Producer = std::function<std::vector<uint8_t>()>;
    void add(const std::string& name, ggml::Type type, std::vector<int64_t> shape, size_t bytes, Producer produce,
             const std::string& dtypeName = "");
    void setMetadata(const std::string& key, const std::string& value) { mMetadata[key] = value; }
    size_t tensorCount() const { return mTensors.size(); }
    size_t dataBytes() const;
    // Writes to a temporary file and renames it into place; a failure or a throwing progress callback
    // (cancel) removes the temporary file. progress(done, total) is called after each tensor.
    void write(const std::string& path, const std::function<void(size_t, size_t)>& progress = {}) const;

private:
    struct Pending {
        std::string name;
        ggml::Type type;
        std::vector<int64_t> shape;
        size_t bytes = 0;
        Producer produce;
        std::string dtypeName;
    };
    std::vector<Pending> mTensors;
    std::map<std::string, std::string> mMetadata;
};

} // namespace cwb
