#!/usr/bin/env bash
# Installs what is missing, builds everything in ./build and runs the whole test suite (CTest).
# This is the README's test command; .ci/run runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

bash packaging/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CWB_CMAKE_ARGS:-}
cmake --build build -j"$jobs"
cd build
ctest --output-on-failure -j"$jobs" --timeout 900
