#pragma once
// Tensors a variant owns (pruned weights, packed integers) written to an unlinked scratch file and mapped back.
// Mapped file pages are clean page cache: the kernel drops them under memory pressure and reads them back on use,
// so a variant of a model larger than memory can be built from the base's memory-mapped files. The file has no
// name on disk once created, so nothing is left behind after a crash.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <ATen/ATen.h>

namespace cwb {

class ScratchFile {
public:
    // Creates the file in `directory`; throws cwb::Error naming the directory when it cannot.
    static std::shared_ptr<ScratchFile> create(const std::string& directory);
    ~ScratchFile();
    ScratchFile(const ScratchFile&) = delete;
    ScratchFile& operator=(const ScratchFile&) = delete;

    // Appends the bytes and returns a mapping of them, valid while the returned pointer lives (copy-on-write:
    // a caller that writes gets private pages, the file is never changed). Throws cwb::Error (disk full).
    std::shared_ptr<const uint8_t> store(const void* data, size_t bytes);
    // A CPU tensor with the same values whose storage is a mapping of this file; undefined stays undefined.
    at::Tensor store(const at::Tensor& tensor);

    const std::string& directory() const { return mDirectory; }
    uint64_t bytesStored() const;

private:
    ScratchFile() = default;
    std::string mDirectory;
    int mFd = -1;
    uint64_t mEnd = 0;   // next free offset, page aligned
    uint64_t mStored = 0;
    mutable std::mutex mMutex;
};

// Bytes the kernel reports as available (MemAvailable of /proc/meminfo); 0 when unknown.
uint64_t availableMemoryBytes();

// The directory a scratch file goes to by default: $CWB_SCRATCH_DIR, else $TMPDIR, else /var/tmp.
std::string defaultScratchDirectory();

// The scratch file for a variant of a base of `modelBytes`: "off" none; "auto" one in defaultScratchDirectory()
// when the base exceeds half the available memory (a variant can come to own as much as its base), else none;
// anything else names the directory. `note` says where the file went when one is made. Throws cwb::Error.
std::shared_ptr<ScratchFile> chooseScratch(const std::string& choice, uint64_t modelBytes, std::string* note = nullptr);

} // namespace cwb
