#include <iostream>

#include "app/cli/arguments.h"
#include "app/cli/commands.h"
#include "core/io/model_format.h"
#include "core/model/model_info.h"

namespace cwb::cli {

int runInfo(const std::vector<std::string>& args) {
    Arguments a(args, {"tokenizer"}, {"json"});
    LoadOptions options;
    options.tokenizerPath = a.value("tokenizer");
    auto model = loadModel(a.requirePositional("MODEL"), options);
    if (a.flag("json"))
        std::cout << modelInfoJson(*model).dump(2) << "\n";
    else
        std::cout << modelInfoText(*model);
    return 0;
}

} // namespace cwb::cli
