#pragma once
// Content fingerprints for the files a project refers to (model, calibration and evaluation data), so a
// project can tell when a file on disk is no longer the one its results were measured on.
//
// The hash is FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) over the bytes, written
// as "fnv1a64:" followed by 16 lowercase hex digits. It is NOT cryptographic: it detects accidental
// change, not tampering. It runs byte by byte (roughly 1 GB/s), so a 14 GB checkpoint takes seconds;
// pass a Feedback to show progress and to allow cancelling.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cwb {

class Feedback;

constexpr uint64_t kFnv1a64OffsetBasis = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

// Continues an FNV-1a 64 hash over `size` bytes; start with kFnv1a64OffsetBasis.
uint64_t fnv1a64(const void* data, size_t size, uint64_t hash = kFnv1a64OffsetBasis);

// "fnv1a64:" + 16 hex digits.
std::string formatHash(uint64_t hash);

// Hash of the file's bytes, read in 1 MiB chunks. Throws cwb::Error naming the file when it is missing,
// not a regular file or unreadable; throws cwb::Cancelled when `feedback` is cancelled.
std::string hashFile(const std::string& path, Feedback* feedback = nullptr);

// Hash of a folder (e.g. a Hugging Face checkpoint): its regular files, one level deep (sub-folders are
// skipped), in byte order of their names; for each file the name, a 0 byte, the size as 8 little-endian
// bytes, then the contents. Renaming, adding, removing or changing a file changes the hash.
std::string hashFolder(const std::string& folder, Feedback* feedback = nullptr);

// Hash of regular files in the form of hashFolder, each under the label given in place of its name (sorted by label;
// the folders they are in do not count), so that the same files moved or renamed keep their hash.
std::string hashFiles(const std::vector<std::pair<std::string, std::string>>& labelledPaths, Feedback* feedback = nullptr);

// hashFolder for a folder, hashFile otherwise.
std::string hashPath(const std::string& path, Feedback* feedback = nullptr);

// Size of a regular file; for a folder the total of its regular files one level deep.
// Throws cwb::Error naming the path when it does not exist.
uint64_t fileBytes(const std::string& path);

} // namespace cwb
