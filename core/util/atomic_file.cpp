#include "core/util/atomic_file.h"

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
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

// This host's first name label, reduced to letters, digits, '-' and '_' (never '.', which separates the fields).
const std::string& hostLabel() {
    static const std::string label = [] {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) return std::string("host");
        std::string s;
        for (const char* c = host; *c && *c != '.' && s.size() < 32; ++c)
            s += std::isalnum(static_cast<unsigned char>(*c)) || *c == '-' || *c == '_' ? *c : '_';
        return s.empty() ? std::string("host") : s;
    }();
    return label;
}

std::string ownerPart() { return hostLabel() + "." + std::to_string(::getpid()) + "."; }

bool processRunning(long pid) {
    if (pid <= 0) return true;   // not a process of ours: keep
    return ::kill(pid_t(pid), 0) == 0 || errno != ESRCH;   // EPERM: it runs under another user
}

} // namespace

std::vector<std::string> abandonedSiblings(const std::string& path, const std::string& tag) {
    namespace fs = std::filesystem;
    const fs::path target(path);
    const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
    const std::string prefix = target.filename().string() + tag + hostLabel() + ".";
    std::vector<std::string> found;
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() <= prefix.size() + 7 || name.compare(0, prefix.size(), prefix) != 0) continue;
        // PID '.' six characters: what mkstemp/mkdtemp made of the template.
        const std::string rest = name.substr(prefix.size());
        const size_t dot = rest.size() - 7;
        if (rest[dot] != '.' || dot == 0 || dot > 10) continue;
        long pid = 0;
        bool digits = true;
        for (size_t i = 0; i < dot; ++i) {
            if (!std::isdigit(static_cast<unsigned char>(rest[i]))) digits = false;
            else pid = pid * 10 + (rest[i] - '0');
        }
        if (digits && pid != long(::getpid()) && !processRunning(pid))
            found.push_back(target.has_parent_path() ? (folder / name).string() : name);
    }
    return found;
}

std::vector<std::string> removeAbandonedSiblings(const std::string& path, const std::string& tag) {
    std::vector<std::string> removed;
    for (const std::string& name : abandonedSiblings(path, tag)) {
        std::error_code ec;
        std::filesystem::remove_all(name, ec);
        if (!ec) removed.push_back(name);
    }
    return removed;
}

std::string createSiblingFile(const std::string& path, const std::string& tag) {
    removeAbandonedSiblings(path, tag);
    std::string name = path + tag + ownerPart() + "XXXXXX";
    const int fd = ::mkstemp(name.data());
    if (fd < 0) throw Error(path, std::string("cannot create a file beside it: ") + std::strerror(errno));
    ::fchmod(fd, 0666 & ~creationMask());   // as a plain create would make it
    ::close(fd);
    if (standsOnAFullDisk(path) && (::unlink(name.c_str()) != 0 || ::symlink("/dev/full", name.c_str()) != 0))
        throw Error(path, std::string("cannot stand in a full disk: ") + std::strerror(errno));
    return name;
}

std::string createSiblingFolder(const std::string& path, const std::string& tag) {
    removeAbandonedSiblings(path, tag);
    std::string name = path + tag + ownerPart() + "XXXXXX";
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
