# Installs the build into a scratch prefix and runs the installed cwb, which must find its private libraries
# (libcwb_kernels.so through its RUNPATH). Then checks that no executable carries the kernels' device code: a copy
# of it in each of ~70 executables once made a fresh build 3 GB larger and ran CI out of disk.
# cmake -DBUILD_DIR=... -DPREFIX=... -DOBJDUMP=... -DEXECUTABLES='a|b' -P check_install.cmake
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install failed (${rc}):\n${out}${err}")
endif()
execute_process(COMMAND "${PREFIX}/bin/cwb" --version RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(REMOVE_RECURSE "${PREFIX}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "^cwb ")
    message(FATAL_ERROR "the installed cwb did not run (${rc}):\n${out}${err}")
endif()
message(STATUS "installed cwb runs: ${out}")

if(OBJDUMP)
    string(REPLACE "|" ";" EXECUTABLES "${EXECUTABLES}")
    foreach(executable IN LISTS EXECUTABLES)
        execute_process(COMMAND "${OBJDUMP}" -h "${executable}" RESULT_VARIABLE rc OUTPUT_VARIABLE sections ERROR_VARIABLE err)
        if(NOT rc EQUAL 0)
            message(FATAL_ERROR "objdump -h ${executable} failed: ${err}")
        endif()
        if(sections MATCHES "\\.nv_fatbin")
            message(FATAL_ERROR "${executable} carries CUDA device code: cwb_kernels must stay a shared library")
        endif()
    endforeach()
endif()
