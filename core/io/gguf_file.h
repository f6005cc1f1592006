#pragma once
// GGUF v2/v3 container: metadata key/values and tensor directory, parsed defensively from a mapped file,
// and a writer that produces the same container (used by tests and, later, by the GGUF exporter).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/ggml_types.h"

namespace cwb {

class MappedFile;

enum class GgufValueType : uint32_t {
    UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7,
    String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12
};

struct GgufValue {
    GgufValueType type = GgufValueType::String;
    GgufValueType elementType = GgufValueType::UInt8;   // for arrays
    nlohmann::json value;                                // numbers, bool, string, or array of them
};

struct GgufTensorInfo {
    std::string name;
    std::vector<int64_t> ne;       // ggml order: ne[0] is the innermost (contiguous) dimension
    ggml::Type type = ggml::Type::F32;
    uint64_t offset = 0;           // relative to the data section
    size_t bytes = 0;
};

class GgufFile {
public:
    // Parses and validates the whole directory; throws cwb::Error naming the file on any inconsistency.
    static GgufFile open(const std::string& path);

    uint32_t version = 0;
    uint32_t alignment = 32;
    size_t dataOffset = 0;
    std::map<std::string, GgufValue> metadata;
    std::vector<std::string> metadataOrder;
    std::vector<GgufTensorInfo> tensors;
    std::shared_ptr<MappedFile> file;

    bool hasKey(const std::string& key) const { return metadata.count(key) != 0; }
    // Typed accessors; throw cwb::Error naming the file and key when absent or of the wrong kind.
    std::string string(const std::string& key) const;
    int64_t integer(const std::string& key) const;
    double number(const std::string& key) const;
    const nlohmann::json& array(const std::string& key) const;
    int64_t integerOr(const std::string& key, int64_t fallback) const;
    double numberOr(const std::string& key, double fallback) const;
    std::string stringOr(const std::string& key, const std::string& fallback) const;

    const uint8_t* tensorData(const GgufTensorInfo& info) const;
};

class GgufWriter {
public:
    void setAlignment(uint32_t alignment) { mAlignment = alignment; }
    void add(const std::string& key, GgufValue value);
    void addString(const std::string& key, const std::string& value);
    void addUInt32(const std::string& key, uint32_t value);
    void addFloat32(const std::string& key, float value);
    void addBool(const std::string& key, bool value);
    void addStringArray(const std::string& key, const std::vector<std::string>& values);
    template <typename T>
    void addArray(const std::string& key, GgufValueType elementType, const std::vector<T>& values) {
        add(key, GgufValue{GgufValueType::Array, elementType, nlohmann::json(values)});
    }
    // ne in ggml order (innermost first); data must hold exactly the type's byte count.
    void addTensor(const std::string& name, ggml::Type type, std::vector<int64_t> ne, std::vector<uint8_t> data);
    // The bytes are produced only while writing, one tensor at a time, so a model need not fit in memory twice.
    using Producer = std::function<std::vector<uint8_t>()>;
    void addTensor(const std::string& name, ggml::Type type, std::vector<int64_t> ne, Producer produce);

    // Writes to path + ".tmp" and renames, so a failed or cancelled write never leaves a half-written file.
    // progress(done, total) is called after each tensor; it may throw (e.g. Cancelled) to stop the write.
    void write(const std::string& path, const std::function<void(size_t, size_t)>& progress = {}) const;

private:
    struct PendingTensor {
        GgufTensorInfo info;
        Producer produce;
    };
    uint32_t mAlignment = 32;
    std::vector<std::pair<std::string, GgufValue>> mMetadata;
    std::vector<PendingTensor> mTensors;
};

} // namespace cwb
