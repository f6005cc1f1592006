#include "core/util/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/error.h"

namespace cwb {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        throw Error(path, std::string("cannot stat: ") + std::strerror(err));
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw Error(path, "is a directory, expected a file");
    }
    std::shared_ptr<MappedFile> file(new MappedFile());
    file->mPath = path;
    file->mSize = static_cast<size_t>(st.st_size);
    if (file->mSize > 0) {
        void* p = ::mmap(nullptr, file->mSize, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            ::close(fd);
            throw Error(path, std::string("cannot memory-map: ") + std::strerror(err));
        }
        file->mData = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return file;
}

MappedFile::~MappedFile() {
    if (mData) ::munmap(const_cast<uint8_t*>(mData), mSize);
}

void ByteReader::seek(size_t offset) {
    if (offset > mSize)
        throw Error(mFile, "offset " + std::to_string(offset) + " is past the end of the file (" +
                               std::to_string(mSize) + " bytes)");
    mOffset = offset;
}

void ByteReader::skip(size_t bytes) { take(bytes, "padding"); }

const uint8_t* ByteReader::take(size_t bytes, const char* what) {
    if (bytes > remaining())
        throw Error(mFile, std::string("truncated: reading ") + what + " needs " + std::to_string(bytes) +
                               " bytes at offset " + std::to_string(mOffset) + " but only " +
                               std::to_string(remaining()) + " remain");
    const uint8_t* p = mData + mOffset;
    mOffset += bytes;
    return p;
}

std::string ByteReader::readString(uint64_t length, const char* what) {
    if (length > remaining())
        throw Error(mFile, std::string("string length ") + std::to_string(length) + " of " + what +
                               " at offset " + std::to_string(mOffset) + " runs past the end of the file");
    const uint8_t* p = take(static_cast<size_t>(length), what);
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(length));
}

} // namespace cwb
