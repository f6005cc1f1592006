#include "core/io/gguf_file.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

namespace cwb {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;   // "GGUF" little-endian
constexpr int kMaxDims = 4;                     // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 2;

// Minimal encoded size of a value of this type: lets us reject absurd counts before allocating.
size_t minimumSize(GgufValueType t) {
    switch (t) {
    case GgufValueType::UInt8: case GgufValueType::Int8: case GgufValueType::Bool: return 1;
    case GgufValueType::UInt16: case GgufValueType::Int16: return 2;
    case GgufValueType::UInt32: case GgufValueType::Int32: case GgufValueType::Float32: return 4;
    case GgufValueType::UInt64: case GgufValueType::Int64: case GgufValueType::Float64: return 8;
    case GgufValueType::String: return 8;
    case GgufValueType::Array: return 12;
    }
    return 1;
}

bool knownValueType(uint32_t t) { return t <= 12; }

std::string readGgufString(ByteReader& r, const char* what) {
    uint64_t length = r.read<uint64_t>(what);
    return r.readString(length, what);
}

nlohmann::json readScalar(ByteReader& r, GgufValueType t, const std::string& key) {
    const char* what = "metadata value";
    switch (t) {
    case GgufValueType::UInt8: return r.read<uint8_t>(what);
    case GgufValueType::Int8: return r.read<int8_t>(what);
    case GgufValueType::UInt16: return r.read<uint16_t>(what);
    case GgufValueType::Int16: return r.read<int16_t>(what);
    case GgufValueType::UInt32: return r.read<uint32_t>(what);
    case GgufValueType::Int32: return r.read<int32_t>(what);
    case GgufValueType::Float32: return r.read<float>(what);
    case GgufValueType::UInt64: return r.read<uint64_t>(what);
    case GgufValueType::Int64: return r.read<int64_t>(what);
    case GgufValueType::Float64: return r.read<double>(what);
    case GgufValueType::Bool: {
        uint8_t b = r.read<uint8_t>(what);
        if (b > 1) throw Error(r.file(), "metadata key '" + key + "' has a bool value of " + std::to_string(b));
        return b != 0;
    }
    case GgufValueType::String: {
        std::string s = readGgufString(r, "metadata string");
        // nlohmann::json refuses invalid UTF-8 on dump; keep bytes but never crash on them.
        return nlohmann::json(std::move(s));
    }
    case GgufValueType::Array: break;
    }
    throw Error(r.file(), "metadata key '" + key + "' has an unexpected value type");
}

GgufValue readValue(ByteReader& r, uint32_t rawType, const std::string& key, int depth) {
    if (!knownValueType(rawType))
        throw Error(r.file(), "metadata key '" + key + "' has unknown value type " + std::to_string(rawType));
    GgufValue v;
    v.type = static_cast<GgufValueType>(rawType);
    if (v.type != GgufValueType::Array) {
        v.value = readScalar(r, v.type, key);
        return v;
    }
    if (depth >= kMaxArrayDepth) throw Error(r.file(), "metadata key '" + key + "' nests arrays too deeply");
    uint32_t elementType = r.read<uint32_t>("array element type");
    if (!knownValueType(elementType))
        throw Error(r.file(), "metadata key '" + key + "' has an array of unknown type " + std::to_string(elementType));
    v.elementType = static_cast<GgufValueType>(elementType);
    uint64_t count = r.read<uint64_t>("array length");
    if (count > r.remaining() / minimumSize(v.elementType))
        throw Error(r.file(), "metadata key '" + key + "' claims " + std::to_string(count) +
                                  " array elements, more than the file can hold");
    v.value = nlohmann::json::array();
    auto& arr = v.value.get_ref<nlohmann::json::array_t&>();
    arr.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
        if (v.elementType == GgufValueType::Array)
            arr.push_back(readValue(r, elementType, key, depth + 1).value);
        else
            arr.push_back(readScalar(r, v.elementType, key));
    }
    return v;
}

size_t alignUp(size_t offset, size_t alignment) { return (offset + alignment - 1) / alignment * alignment; }

} // namespace

GgufFile GgufFile::open(const std::string& path) {
    GgufFile g;
    g.file = MappedFile::open(path);
    ByteReader r(g.file->data(), g.file->size(), path);
    if (g.file->size() < 4) throw Error(path, "too small to be a GGUF file (" + std::to_string(g.file->size()) + " bytes)");
    uint32_t magic = r.read<uint32_t>("magic");
    if (magic != kGgufMagic) throw Error(path, "not a GGUF file (wrong magic)");
    g.version = r.read<uint32_t>("version");
    if (g.version == 1) throw Error(path, "GGUF version 1 is obsolete and not supported (convert it to v3)");
    if (g.version != 2 && g.version != 3)
        throw Error(path, "unsupported GGUF version " + std::to_string(g.version) + " (supported: 2, 3)");
    uint64_t tensorCount = r.read<uint64_t>("tensor count");
    uint64_t kvCount = r.read<uint64_t>("metadata count");
    // Each tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes, each key/value at least 8 + 4 + 1.
    if (tensorCount > r.remaining() / 32)
        throw Error(path, "header claims " + std::to_string(tensorCount) + " tensors, more than the file can hold");
    if (kvCount > r.remaining() / 13)
        throw Error(path, "header claims " + std::to_string(kvCount) + " metadata entries, more than the file can hold");

    for (uint64_t i = 0; i < kvCount; ++i) {
        std::string key = readGgufString(r, "metadata key");
        uint32_t type = r.read<uint32_t>("metadata value type");
        GgufValue value = readValue(r, type, key, 0);
        if (g.metadata.count(key)) throw Error(path, "metadata key '" + key + "' appears twice");
        g.metadataOrder.push_back(key);
        g.metadata.emplace(key, std::move(value));
    }
    if (g.hasKey("general.alignment")) {
        int64_t a = g.integer("general.alignment");
        if (a <= 0 || a > (1 << 20) || (a & (a - 1)) != 0)
            throw Error(path, "general.alignment = " + std::to_string(a) + " is not a power of two");
        g.alignment = static_cast<uint32_t>(a);
    }

    std::set<std::string> seen;
    for (uint64_t i = 0; i < tensorCount; ++i) {
        GgufTensorInfo t;
        t.name = readGgufString(r, "tensor name");
        if (!seen.insert(t.name).second) throw Error(path, "tensor '" + t.name + "' appears twice");
        uint32_t dims = r.read<uint32_t>("tensor dimension count");
        if (dims == 0 || dims > kMaxDims)
            throw Error(path, "tensor '" + t.name + "' has " + std::to_string(dims) + " dimensions (expected 1 to 4)");
        int64_t elements = 1;
        for (uint32_t d = 0; d < dims; ++d) {
            uint64_t n = r.read<uint64_t>("tensor dimension");
            if (n == 0 || n > (uint64_t(1) << 40))
                throw Error(path, "tensor '" + t.name + "' has an invalid dimension " + std::to_string(n));
            if (uint64_t(elements) > (uint64_t(1) << 42) / n) {
                std::string shape;
                for (int64_t e : t.ne) shape += std::to_string(e) + " x ";
                throw Error(path, "tensor '" + t.name + "' has more elements than any model holds (" + shape +
                                      std::to_string(n) + (d + 1 < dims ? " x ..." : "") + ")");
            }
            t.ne.push_back(static_cast<int64_t>(n));
            elements *= static_cast<int64_t>(n);
        }
        uint32_t type = r.read<uint32_t>("tensor type");
        const ggml::TypeTraits* traits = ggml::traits(type);
        if (!traits) throw Error(path, "tensor '" + t.name + "' has unknown type id " + std::to_string(type));
        if (!traits->supported)
            throw Error(path, "tensor '" + t.name + "' has type " + traits->name + ", which cwb cannot read yet");
        t.type = static_cast<ggml::Type>(type);
        if (t.ne[0] % traits->blockSize != 0)
            throw Error(path, "tensor '" + t.name + "' row length " + std::to_string(t.ne[0]) +
                                  " is not a multiple of the " + traits->name + " block size");
        t.bytes = static_cast<size_t>(elements / traits->blockSize) * traits->typeSize;
        t.offset = r.read<uint64_t>("tensor offset");
        if (t.offset % g.alignment != 0)
            throw Error(path, "tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not aligned to " +
                                  std::to_string(g.alignment));
        g.tensors.push_back(std::move(t));
    }
    g.dataOffset = alignUp(r.offset(), g.alignment);
    if (g.dataOffset > g.file->size() && !g.tensors.empty())
        throw Error(path, "truncated: the tensor data section starts past the end of the file");

    // Bounds and overlap: sort by offset and check each range against the next and the file end.
    std::vector<const GgufTensorInfo*> byOffset;
    for (const auto& t : g.tensors) byOffset.push_back(&t);
    std::sort(byOffset.begin(), byOffset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    const uint64_t dataSize = g.file->size() > g.dataOffset ? g.file->size() - g.dataOffset : 0;
    for (size_t i = 0; i < byOffset.size(); ++i) {
        const GgufTensorInfo& t = *byOffset[i];
        if (t.offset > dataSize || t.bytes > dataSize - t.offset)
            throw Error(path, "tensor '" + t.name + "' (" + std::to_string(t.bytes) + " bytes at data offset " +
                                  std::to_string(t.offset) + ") runs past the end of the file; the file is truncated "
                                  "or the offset is wrong");
        if (i + 1 < byOffset.size() && t.offset + t.bytes > byOffset[i + 1]->offset)
            throw Error(path, "tensors '" + t.name + "' and '" + byOffset[i + 1]->name + "' overlap");
    }
    return g;
}

const uint8_t* GgufFile::tensorData(const GgufTensorInfo& info) const {
    return file->data() + dataOffset + info.offset;
}

std::string GgufFile::string(const std::string& key) const {
    auto it = metadata.find(key);
    if (it == metadata.end()) throw Error(file->path(), "metadata key '" + key + "' is missing");
    if (!it->second.value.is_string()) throw Error(file->path(), "metadata key '" + key + "' is not a string");
    return it->second.value.get<std::string>();
}

int64_t GgufFile::integer(const std::string& key) const {
    auto it = metadata.find(key);
    if (it == metadata.end()) throw Error(file->path(), "metadata key '" + key + "' is missing");
    const auto& v = it->second.value;
    if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
    if (v.is_number_integer()) return v.get<int64_t>();
    throw Error(file->path(), "metadata key '" + key + "' is not an integer");
}

double GgufFile::number(const std::string& key) const {
    auto it = metadata.find(key);
    if (it == metadata.end()) throw Error(file->path(), "metadata key '" + key + "' is missing");
    if (!it->second.value.is_number()) throw Error(file->path(), "metadata key '" + key + "' is not a number");
    return it->second.value.get<double>();
}

const nlohmann::json& GgufFile::array(const std::string& key) const {
    auto it = metadata.find(key);
    if (it == metadata.end()) throw Error(file->path(), "metadata key '" + key + "' is missing");
    if (!it->second.value.is_array()) throw Error(file->path(), "metadata key '" + key + "' is not an array");
    return it->second.value;
}

int64_t GgufFile::integerOr(const std::string& key, int64_t fallback) const {
    return hasKey(key) ? integer(key) : fallback;
}
double GgufFile::numberOr(const std::string& key, double fallback) const {
    return hasKey(key) ? number(key) : fallback;
}
std::string GgufFile::stringOr(const std::string& key, const std::string& fallback) const {
    return hasKey(key) ? string(key) : fallback;
}

// ---- writer ----

void GgufWriter::add(const std::string& key, GgufValue value) { mMetadata.emplace_back(key, std::move(value)); }
void GgufWriter::addString(const std::string& key, const std::string& value) {
    add(key, GgufValue{GgufValueType::String, GgufValueType::UInt8, value});
}
void GgufWriter::addUInt32(const std::string& key, uint32_t value) {
    add(key, GgufValue{GgufValueType::UInt32, GgufValueType::UInt8, value});
}
void GgufWriter::addFloat32(const std::string& key, float value) {
    add(key, GgufValue{GgufValueType::Float32, GgufValueType::UInt8, value});
}
void GgufWriter::addBool(const std::string& key, bool value) {
    add(key, GgufValue{GgufValueType::Bool, GgufValueType::UInt8, value});
}
void GgufWriter::addStringArray(const std::string& key, const std::vector<std::string>& values) {
    add(key, GgufValue{GgufValueType::Array, GgufValueType::String, nlohmann::json(values)});
}

void GgufWriter::addTensor(const std::string& name, ggml::Type type, std::vector<int64_t> ne,
                           std::vector<uint8_t> data) {
    auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
    const size_t bytes = shared->size();
    addTensor(name, type, std::move(ne), [shared] { return *shared; });
    if (mTensors.back().info.bytes != bytes)
        throw Error("GGUF writer: tensor '" + name + "' data size does not match its shape and type");
}

void GgufWriter::addTensor(const std::string& name, ggml::Type type, std::vector<int64_t> ne, Producer produce) {
    int64_t elements = 1;
    for (int64_t n : ne) elements *= n;
    const ggml::TypeTraits* traits = ggml::traits(static_cast<uint32_t>(type));
    if (!traits) throw Error("GGUF writer: unknown tensor type for '" + name + "'");
    if (ne.empty() || ne[0] % traits->blockSize != 0)
        throw Error("GGUF writer: tensor '" + name + "' has a row of " + std::to_string(ne.empty() ? 0 : ne[0]) +
                    " elements, not a multiple of the " + traits->name + " block size " + std::to_string(traits->blockSize));
    PendingTensor t;
    t.info.name = name;
    t.info.ne = std::move(ne);
    t.info.type = type;
    t.info.bytes = static_cast<size_t>(elements / traits->blockSize) * traits->typeSize;
    t.produce = std::move(produce);
    mTensors.push_back(std::move(t));
}

namespace {

class Sink {
public:
    explicit Sink(std::ostream& out) : mOut(out) {}
    template <typename T>
    void put(T v) {
        mOut.write(reinterpret_cast<const char*>(&v), sizeof(T));
        mWritten += sizeof(T);
    }
    void putString(const std::string& s) {
        put<uint64_t>(s.size());
        mOut.write(s.data(), static_cast<std::streamsize>(s.size()));
        mWritten += s.size();
    }
    void putBytes(const uint8_t* p, size_t n) {
        mOut.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
        mWritten += n;
    }
    void pad(size_t alignment) {
        while (mWritten % alignment) put<uint8_t>(0);
    }
    size_t written() const { return mWritten; }

private:
    std::ostream& mOut;
    size_t mWritten = 0;
};

void putScalar(Sink& s, GgufValueType t, const nlohmann::json& v) {
    switch (t) {
    case GgufValueType::UInt8: s.put<uint8_t>(v.get<uint8_t>()); break;
    case GgufValueType::Int8: s.put<int8_t>(v.get<int8_t>()); break;
    case GgufValueType::UInt16: s.put<uint16_t>(v.get<uint16_t>()); break;
    case GgufValueType::Int16: s.put<int16_t>(v.get<int16_t>()); break;
    case GgufValueType::UInt32: s.put<uint32_t>(v.get<uint32_t>()); break;
    case GgufValueType::Int32: s.put<int32_t>(v.get<int32_t>()); break;
    case GgufValueType::Float32: s.put<float>(v.get<float>()); break;
    case GgufValueType::UInt64: s.put<uint64_t>(v.get<uint64_t>()); break;
    case GgufValueType::Int64: s.put<int64_t>(v.get<int64_t>()); break;
    case GgufValueType::Float64: s.put<double>(v.get<double>()); break;
    case GgufValueType::Bool: s.put<uint8_t>(v.get<bool>() ? 1 : 0); break;
    case GgufValueType::String: s.putString(v.get<std::string>()); break;
    case GgufValueType::Array: throw Error("GGUF writer: nested arrays are not supported");
    }
}

} // namespace

void GgufWriter::write(const std::string& path, const std::function<void(size_t, size_t)>& progress) const {
    writeFileAtomically(path, [&](std::ostream& out) {
        Sink s(out);
        s.put<uint32_t>(kGgufMagic);
        s.put<uint32_t>(3);
        s.put<uint64_t>(mTensors.size());
        bool hasAlignmentKey = false;
        for (const auto& kv : mMetadata) hasAlignmentKey |= kv.first == "general.alignment";
        s.put<uint64_t>(mMetadata.size() + (hasAlignmentKey || mAlignment == 32 ? 0 : 1));
        for (const auto& [key, value] : mMetadata) {
            s.putString(key);
            s.put<uint32_t>(static_cast<uint32_t>(value.type));
            if (value.type == GgufValueType::Array) {
                s.put<uint32_t>(static_cast<uint32_t>(value.elementType));
                s.put<uint64_t>(value.value.size());
                for (const auto& e : value.value) putScalar(s, value.elementType, e);
            } else {
                putScalar(s, value.type, value.value);
            }
        }
        if (!hasAlignmentKey && mAlignment != 32) {
            s.putString("general.alignment");
            s.put<uint32_t>(static_cast<uint32_t>(GgufValueType::UInt32));
            s.put<uint32_t>(mAlignment);
        }
        uint64_t offset = 0;
        for (const auto& t : mTensors) {
            s.putString(t.info.name);
            s.put<uint32_t>(static_cast<uint32_t>(t.info.ne.size()));
            for (int64_t n : t.info.ne) s.put<uint64_t>(static_cast<uint64_t>(n));
            s.put<uint32_t>(static_cast<uint32_t>(t.info.type));
            s.put<uint64_t>(offset);
            offset = alignUp(offset + t.info.bytes, mAlignment);
        }
        s.pad(mAlignment);
        for (size_t i = 0; i < mTensors.size(); ++i) {
            const std::vector<uint8_t> data = mTensors[i].produce();
            if (data.size() != mTensors[i].info.bytes)
                throw Error(path, "tensor '" + mTensors[i].info.name + "' produced " + std::to_string(data.size()) +
                                      " bytes, its shape and type need " + std::to_string(mTensors[i].info.bytes));
            s.putBytes(data.data(), data.size());
            if (i + 1 < mTensors.size()) s.pad(mAlignment);
            if (!out) throw Error(path, "writing failed (disk full?)");
            if (progress) progress(i + 1, mTensors.size());
        }
    });
}

} // namespace cwb
