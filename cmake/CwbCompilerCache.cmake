# Use ccache when it is installed: CI and rebuilds on 2 cores are dominated by LibTorch headers.
# The sloppiness settings let ccache cache translation units that use precompiled headers.
find_program(CWB_CCACHE ccache)
if(CWB_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
    set(CMAKE_CXX_COMPILER_LAUNCHER "${CMAKE_COMMAND}" -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime" "${CWB_CCACHE}")
endif()
