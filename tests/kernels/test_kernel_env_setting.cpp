// CPU-only test of the CWB_* tuning variables (env_setting.h) and of the settings that read them. The regression: a
// value a variable does not take fell back to the default without a word (CWB_ATTENTION_KERNEL=one-pass ran Auto,
// CWB_W4_STREAM_CONFIG=abc ran configuration 0), so an A/B run could measure one setting twice. Now such a value is
// an error naming the variable, the value and what it takes, at every read. Needs no GPU: the settings are read
// before any launch.
#include <cstdlib>
#include <functional>
#include <string>

#include "cwb/kernels/decode_ops.h"
#include "cwb/kernels/device_info.h"
#include "cwb/kernels/env_setting.h"
#include "cwb/kernels/wxa16_gemm.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;
namespace env = cwb::env;

namespace {

// The message of the SettingError `f` throws; empty when it throws none.
std::string settingError(const std::function<void()>& f) {
    try {
        f();
    } catch (const env::SettingError& e) {
        return e.what();
    }
    return "";
}

bool mentions(const std::string& message, std::initializer_list<const char*> parts) {
    if (message.empty()) return false;
    for (const char* p : parts)
        if (message.find(p) == std::string::npos) return false;
    return true;
}

} // namespace

int main() {
    // The parsers.
    check(env::choiceOf("X", "wide", {"auto", "scalar", "wide"}) == 2, "a choice gives its index");
    const std::string badChoice = settingError([] { env::choiceOf("CWB_ATTENTION_KERNEL", "one-pass", {"auto", "onepass"}); });
    std::printf("  %s\n", badChoice.c_str());
    check(mentions(badChoice, {"CWB_ATTENTION_KERNEL", "'one-pass'", "auto or onepass"}),
          "a value outside the choices is refused, naming the variable, the value and the choices");
    check(settingError([] { env::choiceOf("X", "Wide", {"wide"}); }) != "", "choices are matched exactly (case too)");
    check(env::integerOf("X", "20", 0, 21) == 20 && env::integerOf("X", "-1", -1, 5) == -1, "whole numbers in range are read");
    for (const char* bad : {"abc", "12x", " 3", "3 ", "1.5", "22", "-1", "99999999999999999999"}) {
        const std::string m = settingError([&] { env::integerOf("CWB_W4_STREAM_CONFIG", bad, 0, 21); });
        check(mentions(m, {"CWB_W4_STREAM_CONFIG", "from 0 to 21"}),
              (std::string("refused as a number from 0 to 21: '") + bad + "'").c_str());
    }
    check(env::switchOf("X", "1") && env::switchOf("X", "on") && env::switchOf("X", "true") && env::switchOf("X", "yes") &&
              !env::switchOf("X", "0") && !env::switchOf("X", "off") && !env::switchOf("X", "false") && !env::switchOf("X", "no"),
          "switches take 1/on/true/yes and 0/off/false/no");
    check(mentions(settingError([] { env::switchOf("CWB_PDL", "2"); }), {"CWB_PDL", "'2'"}), "any other switch value is refused");

    // Unset or empty: the default; set: the value.
    unsetenv("CWB_TEST_SETTING");
    check(env::envChoice("CWB_TEST_SETTING", {"a", "b"}, 1) == 1 && env::envInteger("CWB_TEST_SETTING", 0, 9, 7) == 7 &&
              env::envSwitch("CWB_TEST_SETTING", true),
          "an unset variable gives the default");
    setenv("CWB_TEST_SETTING", "", 1);
    check(env::envChoice("CWB_TEST_SETTING", {"a", "b"}, 1) == 1, "an empty variable gives the default");
    setenv("CWB_TEST_SETTING", "a", 1);
    check(env::envChoice("CWB_TEST_SETTING", {"a", "b"}, 1) == 0, "a set variable gives its value");

    // The kernels' settings, read once at their first use (each variable is set before that).
    setenv("CWB_ATTENTION_KERNEL", "one-pass", 1);
    const std::string attention = settingError([] { currentDecodeAttentionKernel(); });
    std::printf("  %s\n", attention.c_str());
    check(mentions(attention, {"CWB_ATTENTION_KERNEL", "auto, scalar, wide or onepass"}),
          "CWB_ATTENTION_KERNEL=one-pass is refused at the first read, not run as Auto");
    check(!settingError([] { currentDecodeAttentionKernel(); }).empty(), "and at every read after it");
    setenv("CWB_ATTENTION_KERNEL", "onepass", 1);
    check(settingError([] { currentDecodeAttentionKernel(); }).empty() &&
              currentDecodeAttentionKernel() == DecodeAttentionKernel::OnePass,
          "once the variable is corrected, CWB_ATTENTION_KERNEL=onepass is read");
    setenv("CWB_W4_STREAM_CONFIG", "abc", 1);
    check(mentions(settingError([] { wxa16StreamConfig(); }), {"CWB_W4_STREAM_CONFIG", "'abc'"}),
          "CWB_W4_STREAM_CONFIG=abc is refused, not run as configuration 0");
    const std::string last = std::to_string(wxa16StreamConfigCount() - 1);
    setenv("CWB_W4_STREAM_CONFIG", last.c_str(), 1);
    check(wxa16StreamConfig() == wxa16StreamConfigCount() - 1, "the last stream configuration is taken");
    setenv("CWB_W4_KERNEL", "tma", 1);
    check(wxa16SmallKernel() == W4SmallKernel::Tma, "CWB_W4_KERNEL=tma is read");
    setenv("CWB_W8_KERNEL", "fast", 1);
    check(mentions(settingError([] { wxa16W8Kernel(); }), {"CWB_W8_KERNEL", "old or stream"}), "CWB_W8_KERNEL=fast is refused");
    // The capability ceiling: a value that is not a capability the kernels can run at is refused at every read, so a
    // check meant for sm_80 never runs the sm_90 paths quietly.
    for (const char* bad : {"8.0", "75", "sm_80", "151"}) {
        setenv("CWB_CUDA_CAPABILITY", bad, 1);
        check(mentions(settingError([] { deviceCapabilityCeiling(); }), {"CWB_CUDA_CAPABILITY", bad, "from 80 to 150"}),
              (std::string("CWB_CUDA_CAPABILITY=") + bad + " is refused").c_str());
    }
    setenv("CWB_CUDA_CAPABILITY", "80", 1);
    check(deviceCapabilityCeiling() == 80, "CWB_CUDA_CAPABILITY=80 sets the ceiling to 8.0");
    setenv("CWB_ATTENTION_HEAD_PARTS", "off", 1);
    check(!decodeAttentionHeadParts(), "CWB_ATTENTION_HEAD_PARTS=off turns the head parts off");
    return finish();
}
