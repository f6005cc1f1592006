// CPU-only test of the programmatic-dependent-launch setting (dependent_launch.h): read from CWB_PDL at the first
// use — on unless CWB_PDL=0 — and then changed only by the setter. ctest runs it twice: without CWB_PDL
// (argument "on") and with CWB_PDL=0 ("off"). Needs no GPU: the device check happens at launch, not here.
#include <cstdio>
#include <cstring>

#include "cwb/kernels/dependent_launch.h"
#include "kernel_check.h"

using namespace cwb::kernels;
using namespace cwb::kernels::testing;

int main(int argc, char** argv) {
    if (argc != 2 || (std::strcmp(argv[1], "on") != 0 && std::strcmp(argv[1], "off") != 0)) {
        std::fprintf(stderr, "usage: test_kernel_pdl_setting on|off (the setting CWB_PDL in the environment should give)\n");
        return 2;
    }
    const bool expected = std::strcmp(argv[1], "on") == 0;
    check(programmaticDependentLaunch() == expected,
          expected ? "without CWB_PDL=0 the setting starts on" : "CWB_PDL=0 starts the setting off");
    check(programmaticDependentLaunch() == expected, "a second read gives the same");
    setProgrammaticDependentLaunch(!expected);
    check(programmaticDependentLaunch() == !expected, "the setter overrides the environment");
    setProgrammaticDependentLaunch(expected);
    check(programmaticDependentLaunch() == expected, "and can set it back");
    check(programmaticDependentLaunches() == 0, "reading the setting launches nothing");
    return finish();
}
