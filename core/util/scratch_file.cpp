#include "core/util/scratch_file.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/error.h"

namespace cwb {

namespace {

uint64_t pageSize() {
    static const uint64_t size = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    return size;
}

int openAnonymousFile(const std::string& directory) {
#ifdef O_TMPFILE
    int fd = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
#endif
    // File systems without O_TMPFILE: create a named file and unlink it at once.
    std::string pattern = directory + "/cwb-scratch-XXXXXX";
    int named = ::mkostemp(pattern.data(), O_CLOEXEC);
    if (named >= 0) ::unlink(pattern.c_str());
    return named;
}

} // namespace

std::shared_ptr<ScratchFile> ScratchFile::create(const std::string& directory) {
    struct stat st {};
    if (::stat(directory.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw Error(directory, "scratch directory does not exist or is not a directory");
    int fd = openAnonymousFile(directory);
    if (fd < 0) throw Error(directory, std::string("cannot create a scratch file: ") + std::strerror(errno));
    std::shared_ptr<ScratchFile> file(new ScratchFile());
    file->mDirectory = directory;
    file->mFd = fd;
    return file;
}

ScratchFile::~ScratchFile() {
    if (mFd >= 0) ::close(mFd);   // live mappings keep their pages; the file's blocks go with the last one
}

uint64_t ScratchFile::bytesStored() const {
    std::lock_guard<std::mutex> lock(mMutex);
    return mStored;
}

std::shared_ptr<const uint8_t> ScratchFile::store(const void* data, size_t bytes) {
    if (bytes == 0) return std::shared_ptr<const uint8_t>(std::make_shared<uint8_t>(0));
    uint64_t offset;
    {
        std::lock_guard<std::mutex> lock(mMutex);
        offset = mEnd;
        mEnd += (bytes + pageSize() - 1) / pageSize() * pageSize();
        mStored += bytes;
    }
    const auto* from = static_cast<const uint8_t*>(data);
    for (size_t done = 0; done < bytes;) {
        ssize_t n = ::pwrite(mFd, from + done, bytes - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            throw Error(mDirectory, "cannot write " + std::to_string(bytes) + " bytes to the scratch file: " +
                                        std::strerror(n < 0 ? errno : ENOSPC) +
                                        " (choose another directory with --scratch or CWB_SCRATCH_DIR)");
        done += static_cast<size_t>(n);
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, mFd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) throw Error(mDirectory, std::string("cannot map the scratch file: ") + std::strerror(errno));
    return std::shared_ptr<const uint8_t>(static_cast<const uint8_t*>(p),
                                          [bytes](const uint8_t* q) { ::munmap(const_cast<uint8_t*>(q), bytes); });
}

at::Tensor ScratchFile::store(const at::Tensor& tensor) {
    if (!tensor.defined()) return tensor;
    at::Tensor dense = tensor.to(at::kCPU).contiguous();
    auto mapping = store(dense.data_ptr(), static_cast<size_t>(dense.numel()) * dense.element_size());
    auto* raw = const_cast<uint8_t*>(mapping.get());
    return at::from_blob(raw, dense.sizes(), [mapping](void*) mutable { mapping.reset(); },
                         at::TensorOptions().dtype(dense.scalar_type()));
}

uint64_t availableMemoryBytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t value = 0;
    std::string unit;
    while (in >> key >> value) {
        std::getline(in, unit);
        if (key == "MemAvailable:") return value * 1024;
    }
    return 0;
}

std::string defaultScratchDirectory() {
    for (const char* name : {"CWB_SCRATCH_DIR", "TMPDIR"})
        if (const char* v = std::getenv(name); v && *v) return v;
    return "/var/tmp";
}

std::shared_ptr<ScratchFile> chooseScratch(const std::string& choice, uint64_t modelBytes, std::string* note) {
    if (choice == "off") return nullptr;
    std::string directory = choice;
    if (choice.empty() || choice == "auto") {
        const uint64_t available = availableMemoryBytes();
        if (available == 0 || modelBytes <= available / 2) return nullptr;
        directory = defaultScratchDirectory();
    }
    auto file = ScratchFile::create(directory);
    if (note)
        *note = "variant tensors go to an unlinked scratch file in " + directory + " (model " +
                std::to_string(modelBytes >> 20) + " MiB, " + std::to_string(availableMemoryBytes() >> 20) +
                " MiB of memory available)";
    return file;
}

} // namespace cwb
