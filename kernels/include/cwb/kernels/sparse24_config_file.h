#pragma once
// The 2:4 GEMM's searched kernel configurations, kept in a text file across processes so that a shape is searched
// once per machine, not once per run (a search measured ~10 s per shape and size class on the H200). Plain C++.
// One line per choice, tab-separated: library, device, n, k, type, layout, size class, search limit, configuration.
// Lines that do not parse are ignored (and dropped on the next write); a write goes to a temporary file renamed over
// the old one, so a reader never sees half a file. Failing to read or write is never an error: the search runs.
#include <cstdint>
#include <string>

namespace cwb::kernels {

struct Sparse24ConfigKey {
    std::string library;   // e.g. "cuSPARSELt 0.8.0"
    std::string device;    // e.g. "NVIDIA H200 (9.0)"
    int64_t n = 0, k = 0;
    int type = 0, layout = 0;
    int64_t sizeClass = 0;
    int searchLimit = 0;   // the highest configuration the search tried: a choice made with another limit is not reused
};

class Sparse24ConfigFile {
public:
    // CWB_SPARSE24_CACHE (a file; "off" or "" turns the file off), else $XDG_CACHE_HOME/cwb/sparse24-configs.txt,
    // else $HOME/.cache/cwb/sparse24-configs.txt; "" when off or no home is known.
    static std::string defaultPath();

    explicit Sparse24ConfigFile(std::string path);
    const std::string& path() const { return mPath; }

    // The stored configuration for `key`, or -1.
    int find(const Sparse24ConfigKey& key) const;
    // Stores (or replaces) the configuration for `key`; creates the folder. False when the file cannot be written.
    bool store(const Sparse24ConfigKey& key, int configId) const;

private:
    std::string mPath;
};

} // namespace cwb::kernels
