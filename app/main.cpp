// cwb: the Compression Workbench. main() only parses the command line and hands off; --help and
// --version are answered before any setup, and no Qt object exists on the CLI paths.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/cli/commands.h"
#include "core/util/error.h"
#include "core/version.h"

namespace {

void printHelp() {
    std::printf("Compression Workbench %s: load, inspect, evaluate and compress LLMs.\n\nUsage:\n", cwb::versionString());
    for (const auto& c : cwb::cli::commands()) std::printf("  %s\n      %s\n", c.usage, c.summary);
    std::printf("  cwb --version\n\nModels: GGUF files, Hugging Face folders (config.json + safetensors), llama2.c .bin "
                "checkpoints.\nExit codes: 0 success, 2 error (the message says what and where).\n");
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
        printHelp();
        return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
        std::printf("cwb %s (LibTorch %s)\n", cwb::versionString(), cwb::torchVersionString());
        return 0;
    }
    for (const auto& c : cwb::cli::commands()) {
        if (args[0] != c.name) continue;
        try {
            return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
        } catch (const cwb::Cancelled&) {
            std::fprintf(stderr, "cwb %s: cancelled\n", c.name);
            return 130;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "cwb %s: error: %s\n", c.name, e.what());
            return 2;
        }
    }
    std::fprintf(stderr, "cwb: unknown command '%s' (see cwb --help)\n", args[0].c_str());
    return 2;
}
