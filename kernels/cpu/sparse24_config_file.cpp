#include "cwb/kernels/sparse24_config_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace cwb::kernels {

namespace {

constexpr int kFields = 9;

bool clean(const std::string& s) { return s.find('\t') == std::string::npos && s.find('\n') == std::string::npos; }

std::string keyText(const Sparse24ConfigKey& k) {
    return k.library + '\t' + k.device + '\t' + std::to_string(k.n) + '\t' + std::to_string(k.k) + '\t' +
           std::to_string(k.type) + '\t' + std::to_string(k.layout) + '\t' + std::to_string(k.sizeClass) + '\t' +
           std::to_string(k.searchLimit);
}

// A line's key and configuration; false when it does not have the nine fields or the last is not a number >= 0.
bool parse(const std::string& line, std::string& key, int& config) {
    std::vector<std::string> fields;
    std::stringstream in(line);
    for (std::string f; std::getline(in, f, '\t');) fields.push_back(f);
    if (int(fields.size()) != kFields || fields.back().empty()) return false;
    char* end = nullptr;
    const long v = std::strtol(fields.back().c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 1000000) return false;
    key = line.substr(0, line.size() - fields.back().size() - 1);
    config = int(v);
    return true;
}

bool makeFolders(const std::string& file) {
    for (size_t slash = file.find('/', 1); slash != std::string::npos; slash = file.find('/', slash + 1)) {
        const std::string dir = file.substr(0, slash);
        if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
    return true;
}

} // namespace

std::string Sparse24ConfigFile::defaultPath() {
    if (const char* v = std::getenv("CWB_SPARSE24_CACHE")) {
        const std::string s = v;
        return s == "off" ? "" : s;
    }
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/cwb/sparse24-configs.txt";
    if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/cwb/sparse24-configs.txt";
    return "";
}

Sparse24ConfigFile::Sparse24ConfigFile(std::string path) : mPath(std::move(path)) {}

int Sparse24ConfigFile::find(const Sparse24ConfigKey& key) const {
    if (mPath.empty() || !clean(key.library) || !clean(key.device)) return -1;
    std::ifstream in(mPath);
    const std::string wanted = keyText(key);
    int found = -1;
    std::string stored;
    int config = 0;
    for (std::string line; std::getline(in, line);)
        if (parse(line, stored, config) && stored == wanted) found = config;   // the last line for a key wins
    return found;
}

bool Sparse24ConfigFile::store(const Sparse24ConfigKey& key, int configId) const {
    if (mPath.empty() || configId < 0 || !clean(key.library) || !clean(key.device)) return false;
    const std::string wanted = keyText(key);
    std::vector<std::string> kept;
    {
        std::ifstream in(mPath);
        std::string stored;
        int config = 0;
        for (std::string line; std::getline(in, line);)
            if (parse(line, stored, config) && stored != wanted) kept.push_back(line);
    }
    kept.push_back(wanted + '\t' + std::to_string(configId));
    if (!makeFolders(mPath)) return false;
    const std::string temporary = mPath + ".tmp." + std::to_string(getpid());
    {
        std::ofstream out(temporary, std::ios::trunc);
        for (const std::string& line : kept) out << line << '\n';
        out.flush();
        if (!out) {
            std::remove(temporary.c_str());
            return false;
        }
    }
    if (std::rename(temporary.c_str(), mPath.c_str()) != 0) {
        std::remove(temporary.c_str());
        return false;
    }
    return true;
}

} // namespace cwb::kernels
