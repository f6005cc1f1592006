#!/usr/bin/env bash
# The main job, end to end on data that needs no download: installs what is missing, builds `cwb`, then
# inspects the stories260K model, measures its perplexity on the TinyStories sample and generates text.
set -euo pipefail
cd "$(dirname "$0")/.."

fixtures=${CWB_FIXTURES_DIR:-../shared/fixtures}
model="$fixtures/models/stories260K.gguf"
text="$fixtures/text/tinystories_v2_valid_first100.txt"
for f in "$model" "$text"; do
    [[ -f "$f" ]] || { echo "main-job: $f not found (set CWB_FIXTURES_DIR)" >&2; exit 2; }
done

bash packaging/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCWB_TESTS=OFF -DCWB_BENCH=OFF ${CWB_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)" --target cwb

cwb=build/app/cwb
echo "== cwb info"
"$cwb" info "$model" | head -8
echo "== cwb eval (llama.cpp perplexity method, ctx 256)"
"$cwb" eval "$model" --text "$text" --ctx 256
echo "== cwb generate (greedy from BOS)"
"$cwb" generate "$model" --tokens 60
