#pragma once
// Subcommands of `cwb`. Each is a thin tool: it fills a params struct from the arguments and calls the core.
#include <string>
#include <vector>

#include "core/io/model_format.h"
#include "core/compress/sequential.h"
#include "core/runtime/transformer.h"

namespace cwb {
class Project;
}

namespace cwb {
class CallbackFeedback;
}

namespace cwb::cli {

struct Command {
    const char* name;
    const char* usage;
    const char* summary;
    int (*run)(const std::vector<std::string>& args);   // returns the process exit code
};

const std::vector<Command>& commands();

int runInfo(const std::vector<std::string>& args);
int runGenerate(const std::vector<std::string>& args);
int runTokenize(const std::vector<std::string>& args);
int runEval(const std::vector<std::string>& args);
int runCompress(const std::vector<std::string>& args);
int runMethods(const std::vector<std::string>& args);
int runProjectCommand(const std::vector<std::string>& args);
int runImportance(const std::vector<std::string>& args);
int runBudget(const std::vector<std::string>& args);
int runExport(const std::vector<std::string>& args);
int runBench(const std::vector<std::string>& args);

// Whether a command's input names a project (.cwbproj) rather than a model.
bool isProjectPath(const std::string& path);

class Arguments;
// --device cpu|cuda[:N] and --dtype f32|f16|bf16 (default: f32 on CPU, f16 on CUDA); refuses CUDA when absent.
RuntimeOptions runtimeOptions(const Arguments& args);

// Throws cwb::Error naming `path` when the model has no tokenizer, with why (a damaged one in the file) and what to do.
void requireTokenizer(const Model& model, const std::string& path);

// Token windows for measurements: --samples (default `samples`) windows of --seq-len (256) tokens of the text
// file, drawn with --seed (0). Throws cwb::Error when the model has no tokenizer or the text cannot be read.
// A note (windows clipped or overlapping) goes to stderr unless --quiet or --json, and to `note` when given, for --json.
at::Tensor windowsFromText(const Arguments& args, const std::string& textPath, const Model& model, int64_t samples,
                           std::string* note = nullptr);
// Under --device auto (the default): `compute`, or the CPU with a note on stderr when the model would not fit the GPU
// (fitAutoDevice). An explicit --device is kept as given.
CalibrationCompute autoFittedCompute(const Arguments& args, const Model& model, const CalibrationCompute& compute);

// How a project's model is read: the project's tokenizer, or --tokenizer FILE in its place (moved, or none recorded).
LoadOptions projectLoadOptions(const Project& project, const Arguments& args);

// Applies --scratch DIR|auto|off (default auto, see chooseScratch): where the variants built from `model` keep the
// tensors they own. Prints a note on stderr unless quiet when a scratch file is used.
void applyScratch(const Arguments& args, Model& model, bool quiet);

// --chunks K for a perplexity measurement: -1 (every chunk) when absent; refused (cwb::Error) below 1.
int64_t chunksOption(const Arguments& args);
// Checks, before the work starts, that --out DIR for a command's reports can be made and written, without making
// it (a run that fails or is interrupted leaves no empty folder); throws cwb::Error naming the folder and the reason.
void checkOutputFolder(const std::string& dir);
// Makes --out DIR (with its parents) once there is something to write into it.
void makeOutputFolder(const std::string& dir);
// Checks, before the work starts, that a file can be written at `path` (missing folders on the way are made when it
// is written); throws cwb::Error naming the path.
void checkOutputFile(const std::string& path);

// Progress of long work on stderr, as "LABEL: 40% (12 s, about 18 s left)" every 10% and at 100% (the estimate from
// the time so far, once a tenth is done).
void showProgress(CallbackFeedback& feedback, const std::string& label);

// --threads N as an int, refused (cwb::Error) outside 0..4096; 0 leaves LibTorch's own count.
int threadCount(int64_t threads);
// Applies --threads N (0 or absent: LibTorch's default).
void applyThreads(int64_t threads);
// --step for a per-layer sensitivity kind: a recipe step as JSON, or a file holding one; checked (checkSensitivityStep).
// Null when --step is not given; throws cwb::Error for another kind or a bad step.
nlohmann::json sensitivityStepOption(const Arguments& args, const std::string& kind);

} // namespace cwb::cli
