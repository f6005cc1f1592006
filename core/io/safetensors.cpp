#include "core/io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/util/atomic_file.h"
#include "core/util/error.h"
#include "core/util/mapped_file.h"

namespace cwb {

namespace {
constexpr uint64_t kMaxHeaderBytes = 100u << 20;   // the format's own limit
struct DtypeName {
    const char* name;
    ggml::Type type;
};
const DtypeName kDtypes[] = {{"F32", ggml::Type::F32}, {"F16", ggml::Type::F16}, {"BF16", ggml::Type::BF16},
                             {"I8", ggml::Type::I8},   {"I16", ggml::Type::I16}, {"I32", ggml::Type::I32},
                             {"I64", ggml::Type::I64}, {"F64", ggml::Type::F64},
                             // One-byte codes with no ggml type of their own are read as raw bytes (I8); the entry's
                             // dtype string tells them apart (after "I8", so I8 is still written as "I8").
                             {"U8", ggml::Type::I8},   {"F8_E4M3", ggml::Type::I8}};
} // namespace

bool safetensorsDtype(const std::string& dtype, ggml::Type* type) {
    for (const auto& d : kDtypes)
        if (dtype == d.name) {
            *type = d.type;
            return true;
        }
    return false;
}

const char* safetensorsDtypeName(ggml::Type type) {
    for (const auto& d : kDtypes)
        if (d.type == type) return d.name;
    return nullptr;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    SafetensorsFile st;
    st.file = MappedFile::open(path);
    const size_t size = st.file->size();
    if (size < 8) throw Error(path, "truncated: a safetensors file needs at least 8 bytes, it has " + std::to_string(size));
    uint64_t headerBytes;
    std::memcpy(&headerBytes, st.file->data(), 8);
    if (headerBytes > size - 8)
        throw Error(path, "header length " + std::to_string(headerBytes) + " runs past the end of the file (" +
                              std::to_string(size) + " bytes)");
    if (headerBytes > kMaxHeaderBytes) throw Error(path, "header length " + std::to_string(headerBytes) + " exceeds 100 MB");
    nlohmann::json header;
    // A tensor named twice would be read as whichever entry the parser keeps last, and other readers may keep
    // another: refused. Keys are tracked at the top level only (depth 1).
    std::set<std::string> names;
    std::string repeated;
    int depth = 0;
    const auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using Event = nlohmann::json::parse_event_t;
        if (event == Event::object_start || event == Event::array_start) ++depth;
        else if (event == Event::object_end || event == Event::array_end) --depth;
        else if (event == Event::key && depth == 1 && !names.insert(parsed.get<std::string>()).second && repeated.empty())
            repeated = parsed.get<std::string>();
        return true;
    };
    try {
        header = nlohmann::json::parse(st.file->data() + 8, st.file->data() + 8 + headerBytes, callback);
    } catch (const std::exception& e) {
        throw Error(path, std::string("header is not valid JSON: ") + e.what());
    }
    if (!repeated.empty()) throw Error(path, "the header names tensor '" + repeated + "' twice");
    if (!header.is_object()) throw Error(path, "header is not a JSON object");
    const uint8_t* dataStart = st.file->data() + 8 + headerBytes;
    const uint64_t dataSize = size - 8 - headerBytes;

    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        const auto& v = it.value();
        if (name == "__metadata__") {
            if (v.is_object())
                for (auto m = v.begin(); m != v.end(); ++m)
                    if (m.value().is_string()) st.metadata[m.key()] = m.value().get<std::string>();
            continue;
        }
        if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") ||
            !v["dtype"].is_string() || !v["shape"].is_array() || !v["data_offsets"].is_array() ||
            v["data_offsets"].size() != 2)
            throw Error(path, "tensor '" + name + "' has a malformed header entry");
        SafetensorsEntry e;
        e.name = name;
        e.dtype = v["dtype"].get<std::string>();
        if (!safetensorsDtype(e.dtype, &e.type))
            throw Error(path, "tensor '" + name + "' has unsupported dtype '" + e.dtype + "'");
        if (v["shape"].size() > 8) throw Error(path, "tensor '" + name + "' has " + std::to_string(v["shape"].size()) + " dimensions");
        uint64_t elements = 1;
        for (const auto& d : v["shape"]) {
            if (!d.is_number_unsigned()) throw Error(path, "tensor '" + name + "' has a non-integer or negative dimension");
            uint64_t n = d.get<uint64_t>();
            if (n > (uint64_t(1) << 40) || (n && elements > (uint64_t(1) << 42) / n))
                throw Error(path, "tensor '" + name + "' has an absurd dimension " + std::to_string(n));
            elements *= n;
            e.shape.push_back(static_cast<int64_t>(n));
        }
        const auto& offs = v["data_offsets"];
        if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
            throw Error(path, "tensor '" + name + "' has invalid data_offsets");
        uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
        if (begin > end)
            throw Error(path, "tensor '" + name + "' data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                  "] end before they begin");
        if (end > dataSize)
            throw Error(path, "tensor '" + name + "' data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                  ") lie outside the " + std::to_string(dataSize) + "-byte data section (truncated file?)");
        const ggml::TypeTraits* traits = ggml::traits(static_cast<uint32_t>(e.type));
        if (elements * traits->typeSize != end - begin)
            throw Error(path, "tensor '" + name + "' has " + std::to_string(elements) + " " + e.dtype + " elements (" +
                                  std::to_string(elements * traits->typeSize) + " bytes) but its byte range holds " +
                                  std::to_string(end - begin));
        e.data = dataStart + begin;
        e.bytes = static_cast<size_t>(end - begin);
        st.entries.push_back(std::move(e));
    }
    std::vector<const SafetensorsEntry*> sorted;
    for (const auto& e : st.entries) sorted.push_back(&e);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->data < b->data; });
    for (size_t i = 0; i + 1 < sorted.size(); ++i)
        if (sorted[i]->data + sorted[i]->bytes > sorted[i + 1]->data)
            throw Error(path, "tensors '" + sorted[i]->name + "' and '" + sorted[i + 1]->name + "' overlap");
    return st;
}

void SafetensorsWriter::add(const std::string& name, ggml::Type type, std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
    auto shared = std::make_shared<std::vector<uint8_t>>(std::move(data));
    const size_t bytes = shared->size();
    add(name, type, std::move(shape), bytes, [shared] { return *shared; });
}

void SafetensorsWriter::add(const std::string& name, ggml::Type type, std::vector<int64_t> shape, size_t bytes,
                            Producer produce, const std::string& dtypeName) {
    if (!dtypeName.empty()) {
        ggml::Type named;
        if (!safetensorsDtype(dtypeName, &named) || ggml::traits(named)->typeSize != ggml::traits(type)->typeSize)
            throw Error("internal: safetensors dtype '" + dtypeName + "' does not fit tensor '" + name + "'");
    }
    mTensors.push_back({name, type, std::move(shape), bytes, std::move(produce), dtypeName});
}

size_t SafetensorsWriter::dataBytes() const {
    size_t total = 0;
    for (const auto& t : mTensors) total += t.bytes;
    return total;
}

void SafetensorsWriter::write(const std::string& path, const std::function<void(size_t, size_t)>& progress) const {
    nlohmann::json header = nlohmann::json::object();
    if (!mMetadata.empty()) header["__metadata__"] = mMetadata;
    uint64_t offset = 0;
    for (const auto& t : mTensors) {
        const char* dtype = t.dtypeName.empty() ? safetensorsDtypeName(t.type) : t.dtypeName.c_str();
        if (!dtype) throw Error(path, "safetensors cannot hold tensor '" + t.name + "' of this type");
        header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
        offset += t.bytes;
    }
    std::string text = header.dump();
    while ((8 + text.size()) % 8) text.push_back(' ');   // keep tensor data 8-byte aligned
    writeFileAtomically(path, [&](std::ostream& out) {
        uint64_t n = text.size();
        out.write(reinterpret_cast<const char*>(&n), 8);
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        // The JSON object orders keys alphabetically, but offsets follow insertion order: write in that order.
        for (size_t i = 0; i < mTensors.size(); ++i) {
            const std::vector<uint8_t> data = mTensors[i].produce();
            if (data.size() != mTensors[i].bytes)
                throw Error(path, "tensor '" + mTensors[i].name + "' produced " + std::to_string(data.size()) +
                                      " bytes, expected " + std::to_string(mTensors[i].bytes));
            out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
            if (!out) throw Error(path, "writing failed (disk full?)");
            if (progress) progress(i + 1, mTensors.size());
        }
    });
}

} // namespace cwb
