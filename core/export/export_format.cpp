#include "core/export/export_format.h"

#include <filesystem>

#include "core/export/export_support.h"
#include "core/util/error.h"

namespace cwb {

ExportFormatRegistry::ExportFormatRegistry() {
    add(makeHfExport());
    add(makeGptqExport());
    add(makeAwqExport());
    add(makeCompressedTensorsExport());
    add(makeGgufExport());
}

ExportFormatRegistry& ExportFormatRegistry::instance() {
    static ExportFormatRegistry registry;
    return registry;
}

void ExportFormatRegistry::add(std::unique_ptr<ExportFormat> format) { mFormats.push_back(std::move(format)); }

const ExportFormat* ExportFormatRegistry::byId(const std::string& id) const {
    for (const auto& f : mFormats)
        if (f->id() == id) return f.get();
    return nullptr;
}

std::vector<const ExportFormat*> ExportFormatRegistry::formats() const {
    std::vector<const ExportFormat*> all;
    for (const auto& f : mFormats) all.push_back(f.get());
    return all;
}

static const ExportFormat& formatOf(const std::string& formatId) {
    const ExportFormat* format = ExportFormatRegistry::instance().byId(formatId);
    if (!format) {
        std::string known;
        for (const auto* f : ExportFormatRegistry::instance().formats()) known += (known.empty() ? "" : ", ") + f->id();
        throw Error("unknown export format '" + formatId + "' (known: " + known + ")");
    }
    return *format;
}

std::string exportDestinationProblem(const std::string& formatId, const std::string& path) {
    return exporting::destinationProblem(path, formatOf(formatId).writesFolder());
}

std::string exportOverwritesSource(const std::string& path, const std::string& source) {
    namespace fs = std::filesystem;
    if (path.empty() || source.empty()) return "";
    std::error_code ec;
    const fs::path to = fs::weakly_canonical(fs::absolute(path, ec), ec);
    const fs::path from = fs::weakly_canonical(fs::absolute(source, ec), ec);
    if (ec) return "";
    // `to` is `from` or one of the folders above it.
    auto a = to.begin(), b = from.begin();
    for (; a != to.end() && b != from.end(); ++a, ++b)
        if (*a != *b) return "";
    if (a != to.end() && !a->empty()) return "";
    return b == from.end() ? "is where the model was read from; an export there would replace it (choose another path)"
                           : "holds the model being exported (" + source + "); an export replaces the whole folder, so it "
                             "would delete it (choose another path)";
}

std::string exportOptionsProblem(const std::string& formatId, const ExportOptions& options) {
    if (!options.requantizeType.empty() && formatId != "gguf")
        return "--requantize applies to GGUF exports (a " + formatId + " export writes compressed layers in its own layout)";
    if (options.packHead && formatId != "gptq")
        return "--pack-head applies to gptq exports (the other layouts have no place for a packed head; gguf keeps it quantized anyway)";
    return formatOf(formatId).optionsProblem(options);
}

ExportReport exportModel(const Model& model, const std::string& formatId, const std::string& path,
                         const ExportOptions& options, Feedback* feedback) {
    const ExportFormat* format = &formatOf(formatId);
    std::string where = exportOverwritesSource(path, model.path);
    if (where.empty()) where = exporting::destinationProblem(path, format->writesFolder());
    if (!where.empty()) throw Error(path, where);
    std::string why = exportOptionsProblem(formatId, options);
    if (why.empty()) why = format->refusal(model, options);
    if (!why.empty()) throw Error(path, "cannot export as " + format->displayName() + ": " + why);
    return format->write(model, path, options, feedback);
}

} // namespace cwb
