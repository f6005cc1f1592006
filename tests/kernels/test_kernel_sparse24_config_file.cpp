// CPU-only test of the 2:4 GEMM's configuration file: a stored choice is found again by the same key only (every
// field counts, including the search limit), a later store replaces it and keeps the other lines, lines that do not
// parse are ignored and dropped on the next write, no temporary file is left behind, the folder is created, an
// unwritable place or "off" is not an error, and CWB_SPARSE24_CACHE / XDG_CACHE_HOME / HOME pick the path.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "cwb/kernels/sparse24_config_file.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

namespace {

std::string readAll(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

bool exists(const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0;
}

Sparse24ConfigKey sampleKey() {
    Sparse24ConfigKey k;
    k.library = "cuSPARSELt 0.8.0";
    k.device = "NVIDIA H200 (9.0)";
    k.n = 11008;
    k.k = 4096;
    k.type = 0;
    k.layout = 0;
    k.sizeClass = 2048;
    k.searchLimit = 35;
    return k;
}

} // namespace

int main() {
    char pattern[] = "/tmp/cwb-sparse24-cache-XXXXXX";
    const char* root = mkdtemp(pattern);
    if (!root) {
        std::printf("FAIL: no temporary folder\n");
        return 1;
    }
    const std::string path = std::string(root) + "/nested/folder/configs.txt";
    const Sparse24ConfigFile file(path);
    const Sparse24ConfigKey key = sampleKey();

    check(file.find(key) == -1, "a missing file knows no configuration");
    check(file.store(key, 6), "a choice is stored, creating the folders");
    check(file.find(key) == 6, "and found again by the same key");

    // Every field of the key counts.
    Sparse24ConfigKey other = key;
    other.n = 4096;
    check(file.find(other) == -1, "another n is not found");
    other = key;
    other.searchLimit = 52;
    check(file.find(other) == -1, "a choice searched under another limit is not reused");
    other = key;
    other.library = "cuSPARSELt 0.9.0";
    check(file.find(other) == -1, "another library version is not found");
    other = key;
    other.device = "NVIDIA A100 (8.0)";
    check(file.find(other) == -1, "another device is not found");
    other = key;
    other.sizeClass = 4096;
    check(file.store(other, 27), "a second size class is stored");
    check(file.find(key) == 6 && file.find(other) == 27, "both choices are kept");
    check(file.store(key, 5) && file.find(key) == 5 && file.find(other) == 27, "a later store replaces only its own line");

    // Malformed lines: ignored when reading, dropped by the next write.
    {
        std::ofstream out(path, std::ios::app);
        out << "garbage without tabs\n";
        out << "cuSPARSELt 0.8.0\tNVIDIA H200 (9.0)\t11008\t4096\t0\t0\t2048\t35\tnot-a-number\n";
        out << "cuSPARSELt 0.8.0\tNVIDIA H200 (9.0)\t11008\t4096\t0\t0\t2048\t35\t-3\n";
    }
    check(file.find(key) == 5, "lines that do not parse are ignored");
    check(file.store(other, 28), "a store over a file with bad lines succeeds");
    const std::string text = readAll(path);
    check(text.find("garbage") == std::string::npos && text.find("not-a-number") == std::string::npos &&
              text.find("\t-3") == std::string::npos,
          "and drops them");
    int lines = 0;
    for (char c : text) lines += c == '\n' ? 1 : 0;
    check(lines == 2, "two lines remain, one per key");
    check(!exists(path + ".tmp." + std::to_string(getpid())), "no temporary file is left behind");

    // Keys that would break the format are refused, not written.
    Sparse24ConfigKey tabbed = key;
    tabbed.device = "bad\tname";
    check(!file.store(tabbed, 1) && file.find(tabbed) == -1, "a device name holding a tab is refused");

    // Not writable, or off: not an error, just no file.
    const std::string blocked = std::string(root) + "/nested/folder/configs.txt/below";   // a file in the way
    check(!Sparse24ConfigFile(blocked).store(key, 3), "an unwritable place returns false");
    check(Sparse24ConfigFile(blocked).find(key) == -1, "and finds nothing");
    check(!Sparse24ConfigFile("").store(key, 3) && Sparse24ConfigFile("").find(key) == -1, "an empty path is off");

    // Where the file lives.
    setenv("CWB_SPARSE24_CACHE", "/somewhere/configs.txt", 1);
    check(Sparse24ConfigFile::defaultPath() == "/somewhere/configs.txt", "CWB_SPARSE24_CACHE names the file");
    setenv("CWB_SPARSE24_CACHE", "off", 1);
    check(Sparse24ConfigFile::defaultPath().empty(), "CWB_SPARSE24_CACHE=off turns it off");
    unsetenv("CWB_SPARSE24_CACHE");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    check(Sparse24ConfigFile::defaultPath() == "/xdg/cwb/sparse24-configs.txt", "else under XDG_CACHE_HOME");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/someone", 1);
    check(Sparse24ConfigFile::defaultPath() == "/home/someone/.cache/cwb/sparse24-configs.txt", "else under HOME");

    std::remove(path.c_str());
    rmdir((std::string(root) + "/nested/folder").c_str());
    rmdir((std::string(root) + "/nested").c_str());
    rmdir(root);
    return finish();
}
