// cwb: the Compression Workbench. main() only parses the command line and hands off; --help and
// --version are answered before any setup, and no Qt object exists on the CLI paths.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/batch/batch_runner.h"
#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include <ATen/Context.h>

#include "core/project/project.h"
#include "core/runtime/sparse24_linear.h"
#include "core/util/error.h"
#include "core/util/feedback.h"
#include "core/version.h"
#ifdef CWB_WITH_GUI
#include "app/gui/gui_main.h"
#endif

namespace {

void printHelp() {
    std::printf("Compression Workbench %s: load, inspect, evaluate and compress LLMs.\n\nUsage:\n", cwb::versionString());
    for (const auto& c : cwb::cli::commands()) std::printf("  %s\n      %s\n", c.usage, c.summary);
    std::printf("  cwb --batch PROJECT [--out DIR] [--device cpu|cuda[:N]] [--model PATH] [--tokenizer FILE] [--calib FILE] [--eval FILE] [--threads N] [--variants a,b] [--no-export-check] [--quiet] [--json]\n"
                "      replay a saved project headless into --out (default ./cwb-report: report.md, report.json, charts,\n"
                "      exports); exit 0 reproduced, 1 differs beyond tolerance or incomplete (a variant without stored\n"
                "      results, or a failed export: said on stderr), 2 error\n");
#ifdef CWB_WITH_GUI
    std::printf("  cwb [MODEL | PROJECT.cwbproj] [--threads N]\n      open the desktop GUI (no arguments: an empty window)\n");
#endif
    std::printf("  cwb --version\n\nModels: GGUF files, Hugging Face folders (config.json + safetensors), llama2.c .bin "
                "checkpoints.\nExit codes: 0 success, 2 error (the message says what and where), 130 interrupted (Ctrl-C).\n");
}

// First Ctrl-C (or SIGTERM): ask the work to stop at its next check, which cleans up and exits 128 + the signal
// (130 for Ctrl-C). A second one kills the process at once. Only async-signal-safe calls here.
void onInterrupt(int sig) {
    if (cwb::interruptRequested()) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);
        return;
    }
    cwb::requestInterrupt(sig);
    static const char message[] = "\ncwb: interrupted; stopping at the next step (again to quit at once)\n";
    ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
    (void)ignored;
}

void installInterruptHandler() {
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    action.sa_flags = SA_RESTART;   // reads and writes in progress resume instead of failing with EINTR
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

// An interrupt that came after the work's last check changed nothing, though the handler said it would stop: say so,
// so that "stopping" is not taken for a half-done output (export probe).
int finishedDespiteInterrupt(const char* command, int exitCode) {
    std::fflush(stdout);   // a reader slow to take the report is part of the work: an interrupt then is heard here
    if (cwb::interruptRequested() && exitCode != 128 + cwb::interruptSignal())   // not one the interrupt stopped
        std::fprintf(stderr, "cwb %s: the interrupt came after the last step that stops; the work was finished and what it "
                             "wrote is complete (exit %d)\n", command, exitCode);
    return exitCode;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    // Projects record which build wrote them.
    cwb::Project::setWriter(cwb::versionString(), cwb::torchVersionString(), at::hasCUDA() ? "available" : "none");
#ifdef CWB_WITH_GUI
    if (args.empty()) return cwb::runGui(argc, argv);
#endif
    // `cwb help CMD`, `cwb CMD --help` / `-h` (right after the command, or last and not an option's value, so that
    // `--prompt -h` stays a prompt): that command's usage alone.
    const auto isHelp = [](const std::string& a) { return a == "--help" || a == "-h"; };
    const size_t n = args.size();
    const bool helpAfter = n >= 2 && (isHelp(args[1]) || (isHelp(args[n - 1]) && args[n - 2].rfind("--", 0) != 0));
    const std::string asked = n >= 2 && args[0] == "help" ? args[1] : helpAfter ? args[0] : "";
    for (const auto& c : cwb::cli::commands())
        if (!asked.empty() && asked == c.name) {
            std::printf("%s\n    %s\n", c.usage, c.summary);
            return 0;
        }
    if (args.empty() || isHelp(args[0]) || args[0] == "help" || (!asked.empty() && asked == "--batch")) {
        printHelp();
        return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
        if (args.size() > 1) {
            std::fprintf(stderr, "cwb: --version takes no arguments, got '%s'\n", args[1].c_str());
            return 2;
        }
        std::printf("cwb %s (LibTorch %s)\n", cwb::versionString(), cwb::torchVersionString());
        return 0;
    }
    // A 2:4 kernel-configuration search takes seconds inside a forward pass: say so on the command line.
    const bool quiet = std::find(args.begin(), args.end(), "--quiet") != args.end();
    if (!quiet) cwb::setSparse24SearchLog([](const std::string& line) { std::fprintf(stderr, "cwb: %s\n", line.c_str()); });
    if (args[0] == "--batch") {
        installInterruptHandler();
        try {
            std::vector<std::string> rest(args.begin() + 1, args.end());
            cwb::cli::Arguments a(rest, {"out", "device", "model", "tokenizer", "calib", "eval", "threads", "variants"},
                                   {"quiet", "json", "no-export-check"});
            cwb::BatchRunner runner;
            runner.setProjectPath(a.requirePositional("PROJECT"));
            runner.setOutputDir(a.value("out", "cwb-report"));
            runner.setDevice(a.value("device", "cpu"));
            runner.setModelPath(a.value("model"));
            runner.setTokenizerPath(a.value("tokenizer"));
            runner.setCalibrationPath(a.value("calib"));
            runner.setEvaluationPath(a.value("eval"));
            runner.setThreads(cwb::cli::threadCount(a.integer("threads", 0)));
            std::vector<std::string> variants;
            std::string list = a.value("variants");
            for (size_t start = 0; start < list.size();) {
                size_t comma = list.find(',', start);
                if (comma == std::string::npos) comma = list.size();
                if (comma > start) variants.push_back(list.substr(start, comma - start));
                start = comma + 1;
            }
            runner.setVariants(variants);
            runner.setQuiet(a.flag("quiet"));
            runner.setJson(a.flag("json"));
            runner.setCheckExports(!a.flag("no-export-check"));
            return finishedDespiteInterrupt("--batch", runner.run());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "cwb --batch: error: %s\n", cwb::errorText(e).c_str());
            return 2;
        }
    }
    for (const auto& c : cwb::cli::commands()) {
        if (args[0] != c.name) continue;
        // Only commands whose long work polls a Feedback stop cleanly; the others (generate, bench, info, ...) keep
        // the default, so Ctrl-C ends them at once. Never the GUI, where the flag would cancel every later job.
        static const std::set<std::string> polling = {"eval", "compress", "export", "importance", "budget", "project"};
        if (polling.count(c.name)) installInterruptHandler();
        try {
            return finishedDespiteInterrupt(c.name, c.run(std::vector<std::string>(args.begin() + 1, args.end())));
        } catch (const cwb::Cancelled&) {
            std::fprintf(stderr, "cwb %s: cancelled\n", c.name);
            return cwb::interruptRequested() ? 128 + cwb::interruptSignal() : 130;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "cwb %s: error: %s\n", c.name, cwb::errorText(e).c_str());
            return 2;
        }
    }
#ifdef CWB_WITH_GUI
    if (cwb::isGuiInvocation(args)) return cwb::runGui(argc, argv);   // a model or project path, or GUI options
#endif
    // A path that is not there (a model or project mistyped) is said to be missing, not called an unknown command; one
    // that is there, in a build without the GUI, is said to need it.
    const std::string& word = args[0];
    std::error_code ec;
    if (word.rfind('-', 0) != 0 && std::filesystem::exists(word, ec)) {
        std::fprintf(stderr, "cwb: %s: opening a model or project in a window needs a build with the GUI (this one has "
                             "none); the commands work on it (cwb --help)\n", word.c_str());
        return 2;
    }
    const bool looksLikePath = word.rfind('-', 0) != 0 && (word.find('/') != std::string::npos || word.find('.') != std::string::npos);
    if (looksLikePath) {
        std::fprintf(stderr, "cwb: %s: no such file or folder (give a model or project that exists; commands: cwb --help)\n",
                     word.c_str());
        return 2;
    }
    std::fprintf(stderr, "cwb: unknown command '%s' (see cwb --help)\n", word.c_str());
    return 2;
}
