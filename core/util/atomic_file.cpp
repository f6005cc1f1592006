#include "core/util/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/util/error.h"

namespace cwb {

void writeFileAtomically(const std::string& path, const std::string& bytes) {
    writeFileAtomically(path, [&](std::ostream& out) { out.write(bytes.data(), std::streamsize(bytes.size())); });
}

void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
    const std::string tmp = path + ".tmp";
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
