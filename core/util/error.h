#pragma once
// One exception type for every failure the core reports to a user: it carries the file (when there is
// one) and a plain sentence saying what is wrong, so the CLI, the batch runner and the GUI print the same.
#include <stdexcept>
#include <string>

namespace cwb {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
    Error(const std::string& file, const std::string& message)
        : std::runtime_error(file.empty() ? message : file + ": " + message), mFile(file) {}

    const std::string& file() const { return mFile; }

private:
    std::string mFile;
};

// The message of any exception as a user should read it: a LibTorch (c10) error without its C++ backtrace.
std::string errorText(const std::exception& e);

// Thrown when a Feedback reports cancellation; callers treat it as "stopped by the user", not a failure.
class Cancelled : public Error {
public:
    Cancelled() : Error("cancelled by the user") {}
};

} // namespace cwb
