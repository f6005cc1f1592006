#include <iostream>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/io/model_format.h"
#include "core/model/model_info.h"
#include "core/util/json_text.h"

namespace cwb::cli {

int runInfo(const std::vector<std::string>& args) {
    Arguments a(args, {"tokenizer"}, {"json"});
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    auto model = loadModel(a.requirePositional("MODEL"), options);
    if (a.flag("json"))
        std::cout << jsonText(modelInfoJson(*model)) << "\n";
    else
        std::cout << modelInfoText(*model);
    return 0;
}

} // namespace cwb::cli
