#pragma once
// Headless replay of a saved project (`cwb --batch`): rebuilds every variant from the base with its stored
// recipe and calibration spec, re-evaluates it, compares with the stored results and writes a report.
// main() only turns options into setters; run() returns the exit code.
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cwb {

class Model;
class ProjectRunner;
struct Variant;

class BatchRunner {
public:
    enum ExitCode { Reproduced = 0, Differs = 1, Failed = 2 };

    void setProjectPath(std::string path) { mProjectPath = std::move(path); }
    void setOutputDir(std::string dir) { mOutputDir = std::move(dir); }
    void setDevice(std::string device) { mDevice = std::move(device); }
    void setModelPath(std::string path) { mModelPath = std::move(path); }
    // In place of the tokenizer the project names (moved, or none recorded); "" keeps the project's.
    void setTokenizerPath(std::string path) { mTokenizerPath = std::move(path); }
    // In place of the calibration / evaluation text the project names (moved); "" keeps the project's. The replay
    // warns when the given file's bytes differ from what the project recorded.
    void setCalibrationPath(std::string path) { mCalibrationPath = std::move(path); }
    void setEvaluationPath(std::string path) { mEvaluationPath = std::move(path); }
    void setThreads(int threads) { mThreads = threads; }
    void setVariants(std::vector<std::string> names) { mVariants = std::move(names); }
    void setQuiet(bool quiet) { mQuiet = quiet; }
    void setJson(bool json) { mJson = json; }
    // Each export is read back and its perplexity measured beside the variant's (on by default).
    void setCheckExports(bool check) { mCheckExports = check; }

    int run();

private:
    void progress(const std::string& line) const;
    // Writes the exports the project asks of a variant into <out>/exports/; a failure is a warning and fails the run.
    // With an evaluation text and mCheckExports, each export is read back and measured (`read_back` in its entry).
    nlohmann::json writeExports(const Variant& variant, const Model& model, ProjectRunner& runner, double variantPerplexity,
                                std::vector<std::string>& warnings, bool* failed) const;

    std::string mProjectPath, mOutputDir = "cwb-report", mDevice = "cpu", mModelPath, mTokenizerPath, mCalibrationPath, mEvaluationPath;
    int mThreads = 0;
    std::vector<std::string> mVariants;
    bool mQuiet = false, mJson = false, mCheckExports = true;
};

} // namespace cwb
