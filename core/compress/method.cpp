#include "core/compress/method.h"

#include <regex>

#include "core/util/error.h"
#include "core/util/feedback.h"

namespace cwb {

nlohmann::json paramsForLayer(const RecipeStep& step, const nlohmann::json& resolved, const std::string& layer) {
    for (const auto& o : step.overrides) {
        if (!std::regex_search(layer, std::regex(o.pattern))) continue;
        nlohmann::json merged = resolved;
        merged.update(o.params);
        return merged;
    }
    return resolved;
}

nlohmann::json StepContext::paramsFor(const std::string& layer) const { return paramsForLayer(step, params, layer); }

void StepContext::progress(double fraction) const {
    if (!feedback) return;
    feedback->throwIfCancelled();
    feedback->setProgress(fraction);
}

void StepContext::note(const std::string& line) {
    notes.push_back(line);
    if (feedback) feedback->log(step.method + ": " + line);
}

MethodRegistry::MethodRegistry() {
    registerQuantizationMethods(*this);
    registerPruningMethods(*this);
    registerStructuredMethods(*this);
    registerDistillationMethods(*this);
}

MethodRegistry& MethodRegistry::instance() {
    static MethodRegistry registry;
    return registry;
}

void MethodRegistry::add(std::unique_ptr<CompressionMethod> method) {
    if (find(method->id())) throw Error("method '" + method->id() + "' registered twice");
    mMethods.push_back(std::move(method));
}

const CompressionMethod* MethodRegistry::find(const std::string& id) const {
    for (const auto& m : mMethods)
        if (m->id() == id) return m.get();
    return nullptr;
}

std::vector<const CompressionMethod*> MethodRegistry::methods() const {
    std::vector<const CompressionMethod*> out;
    for (const auto& m : mMethods) out.push_back(m.get());
    return out;
}

} // namespace cwb
