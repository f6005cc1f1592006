#include "core/project/file_hash.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "core/util/error.h"
#include "core/util/feedback.h"

namespace fs = std::filesystem;

namespace cwb {

namespace {

constexpr size_t kChunkBytes = size_t(1) << 20;

// Feeds one file's contents into `hash`. `done`/`total` drive the feedback across several files.
uint64_t hashContents(const std::string& path, uint64_t hash, Feedback* feedback, uint64_t& done, uint64_t total) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path, "cannot open the file for reading");
    std::vector<char> buffer(kChunkBytes);
    while (in) {
        in.read(buffer.data(), std::streamsize(buffer.size()));
        const std::streamsize got = in.gcount();
        if (got <= 0) break;
        hash = fnv1a64(buffer.data(), size_t(got), hash);
        done += uint64_t(got);
        if (feedback) {
            feedback->throwIfCancelled();
            if (total > 0) feedback->setProgress(double(done) / double(total));
        } else if (interruptRequested()) {   // Ctrl-C while a command hashes a large model without a Feedback
            throw Cancelled();
        }
    }
    if (in.bad()) throw Error(path, "read failed while hashing");
    return hash;
}

fs::file_status statusOf(const std::string& path) {
    std::error_code ec;
    fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw Error(path, "does not exist");
    return st;
}

// Regular files directly inside `folder`, sorted by name (byte order).
std::vector<fs::path> regularFiles(const std::string& folder) {
    std::vector<fs::path> files;
    std::error_code ec;
    fs::directory_iterator it(folder, ec);
    if (ec) throw Error(folder, "cannot list the folder (" + ec.message() + ")");
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) throw Error(folder, "cannot list the folder (" + ec.message() + ")");
        std::error_code typeError;
        if (it->is_regular_file(typeError)) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
    return files;
}

uint64_t sizeOf(const fs::path& file) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(file, ec);
    if (ec) throw Error(file.string(), "cannot read the file size (" + ec.message() + ")");
    return uint64_t(size);
}

// For each file, in the order given: its label (its name unless given), a 0 byte, its size as 8 little-endian bytes,
// then its contents.
std::string hashNamedFiles(const std::vector<std::pair<std::string, fs::path>>& files, Feedback* feedback) {
    uint64_t total = 0;
    for (const auto& f : files) total += sizeOf(f.second);
    uint64_t hash = kFnv1a64OffsetBasis;
    uint64_t done = 0;
    for (const auto& [name, path] : files) {
        hash = fnv1a64(name.data(), name.size(), hash);
        const unsigned char zero = 0;
        hash = fnv1a64(&zero, 1, hash);
        unsigned char size[8];
        const uint64_t bytes = sizeOf(path);
        for (int i = 0; i < 8; ++i) size[i] = static_cast<unsigned char>(bytes >> (8 * i));
        hash = fnv1a64(size, sizeof size, hash);
        hash = hashContents(path.string(), hash, feedback, done, total);
    }
    if (feedback) feedback->setProgress(1.0);
    return formatHash(hash);
}

} // namespace

uint64_t fnv1a64(const void* data, size_t size, uint64_t hash) {
    const unsigned char* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
        hash ^= bytes[i];
        hash *= kFnv1a64Prime;
    }
    return hash;
}

std::string formatHash(uint64_t hash) {
    char text[32];
    std::snprintf(text, sizeof text, "fnv1a64:%016llx", static_cast<unsigned long long>(hash));
    return text;
}

std::string hashFile(const std::string& path, Feedback* feedback) {
    if (!fs::is_regular_file(statusOf(path))) throw Error(path, "is not a regular file");
    uint64_t done = 0;
    const uint64_t total = fileBytes(path);
    const uint64_t hash = hashContents(path, kFnv1a64OffsetBasis, feedback, done, total);
    if (feedback) feedback->setProgress(1.0);
    return formatHash(hash);
}

std::string hashFolder(const std::string& folder, Feedback* feedback) {
    if (!fs::is_directory(statusOf(folder))) throw Error(folder, "is not a folder");
    std::vector<std::pair<std::string, fs::path>> files;
    for (const auto& f : regularFiles(folder)) files.emplace_back(f.filename().string(), f);
    return hashNamedFiles(files, feedback);
}

std::string hashFiles(const std::vector<std::pair<std::string, std::string>>& labelledPaths, Feedback* feedback) {
    std::vector<std::pair<std::string, fs::path>> files;
    for (const auto& [label, path] : labelledPaths) {
        if (!fs::is_regular_file(statusOf(path))) throw Error(path, "is not a regular file");
        files.emplace_back(label, path);
    }
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return hashNamedFiles(files, feedback);
}

std::string hashPath(const std::string& path, Feedback* feedback) {
    return fs::is_directory(statusOf(path)) ? hashFolder(path, feedback) : hashFile(path, feedback);
}

uint64_t fileBytes(const std::string& path) {
    const fs::file_status st = statusOf(path);
    if (!fs::is_directory(st)) return sizeOf(path);
    uint64_t total = 0;
    for (const auto& f : regularFiles(path)) total += sizeOf(f);
    return total;
}

} // namespace cwb
