#include "core/util/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util/error.h"

namespace cwb {

void writeFileAtomically(const std::string& path, const std::string& bytes) {
    writeFileAtomically(path, [&](std::ostream& out) { out.write(bytes.data(), std::streamsize(bytes.size())); });
}

namespace {

// Fault injection for tests: the files named in CWB_TEST_FULL_DISK (file names, comma-separated) get a temporary file
// that links to /dev/full, where every write fails with ENOSPC, as on a full disk.
bool standsOnAFullDisk(const std::string& path) {
    const char* names = std::getenv("CWB_TEST_FULL_DISK");
    if (!names || !*names) return false;
    const std::string file = path.substr(path.find_last_of('/') + 1);
    std::stringstream list(names);
    for (std::string name; std::getline(list, name, ',');)
        if (name == file) return true;
    return false;
}

// The process's file creation mask, read once: mkstemp and mkdtemp create private files (0600) and folders (0700),
// which a rename would hand on to the exports and projects (unreadable to others on a shared server).
mode_t creationMask() {
    static const mode_t mask = [] {
        std::ifstream status("/proc/self/status");   // Linux 4.7+: read without changing it
        for (std::string line; std::getline(status, line);)
            if (line.rfind("Umask:", 0) == 0) return mode_t(std::strtoul(line.c_str() + 6, nullptr, 8));
        const mode_t m = ::umask(022);   // elsewhere: read by setting it, once
        ::umask(m);
        return m;
    }();
    return mask;
}

} // namespace

std::string createSiblingFile(const std::string& path, const std::string& tag) {
    std::string name = path + tag + "XXXXXX";
    const int fd = ::mkstemp(name.data());
    if (fd < 0) throw Error(path, std::string("cannot create a file beside it: ") + std::strerror(errno));
    ::fchmod(fd, 0666 & ~creationMask());   // as a plain create would make it
    ::close(fd);
    if (standsOnAFullDisk(path) && (::unlink(name.c_str()) != 0 || ::symlink("/dev/full", name.c_str()) != 0))
        throw Error(path, std::string("cannot stand in a full disk: ") + std::strerror(errno));
    return name;
}

std::string createSiblingFolder(const std::string& path, const std::string& tag) {
    std::string name = path + tag + "XXXXXX";
    if (!::mkdtemp(name.data())) throw Error(path, std::string("cannot create a folder beside it: ") + std::strerror(errno));
    ::chmod(name.c_str(), 0777 & ~creationMask());   // as mkdir would make it
    return name;
}

void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
    const std::string tmp = createSiblingFile(path);
    try {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw Error(path, std::string("cannot create the file: ") + std::strerror(errno));
        write(out);
        if (out) out.flush();
        if (out) out.close();   // close flushes what is left and reports a failure of its own
        if (out.fail()) throw Error(path, "writing failed (disk full?)");
    } catch (...) {
        std::remove(tmp.c_str());
        throw;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int error = errno;
        std::remove(tmp.c_str());
        throw Error(path, std::string("cannot move the written file into place: ") + std::strerror(error));
    }
}

} // namespace cwb
