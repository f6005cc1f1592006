#pragma once
// A read-only memory map of a whole file. Model weights stay in the page cache instead of the heap,
// so opening a 7B bf16 checkpoint costs address space, not 14-28 GB of RAM.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace cwb {

class MappedFile {
public:
    // Throws cwb::Error naming the path when the file is missing, unreadable or a directory.
    static std::shared_ptr<MappedFile> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return mData; }
    size_t size() const { return mSize; }
    const std::string& path() const { return mPath; }

private:
    MappedFile() = default;
    std::string mPath;
    const uint8_t* mData = nullptr;
    size_t mSize = 0;
};

// Bounds-checked little-endian reader over a byte range; every read names the file on failure.
class ByteReader {
public:
    ByteReader(const uint8_t* data, size_t size, std::string fileName)
        : mData(data), mSize(size), mFile(std::move(fileName)) {}

    size_t offset() const { return mOffset; }
    size_t remaining() const { return mSize - mOffset; }
    void seek(size_t offset);
    void skip(size_t bytes);
    const uint8_t* take(size_t bytes, const char* what);

    template <typename T>
    T read(const char* what) {
        T value;
        const uint8_t* p = take(sizeof(T), what);
        std::memcpy(&value, p, sizeof(T));
        return value;
    }
    std::string readString(uint64_t length, const char* what);

    const std::string& file() const { return mFile; }

private:
    const uint8_t* mData;
    size_t mSize;
    size_t mOffset = 0;
    std::string mFile;
};

} // namespace cwb
