#!/usr/bin/env bash
# The main job, end to end on data that needs no download: installs what is missing, builds `cwb`, then runs
# a compression session on the stories260K model — inspect, evaluate, create a project with quantized and
# pruned variants, run it (results stored in the project), and replay it headless with `cwb --batch`.
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
work=build/main-job
rm -rf "$work" && mkdir -p "$work"
echo "== cwb info"
"$cwb" info "$model" > "$work/info.txt"   # not piped into head: with pipefail its early exit would fail the job
head -8 "$work/info.txt"
echo "== cwb eval (llama.cpp perplexity method, ctx 256)"
"$cwb" eval "$model" --text "$text" --ctx 256
echo "== cwb generate (greedy from BOS)"
"$cwb" generate "$model" --tokens 60
echo "== cwb project: RTN, GPTQ, Wanda and SmoothQuant (folded) variants, calibrated on 64 windows of 256 tokens"
"$cwb" project create "$work/stories.cwbproj" --model "$model" --calib "$text" --eval "$text" --ctx 256 \
    --samples 64 --seq-len 256 \
    --recipe projects/recipes/rtn-w4g32.json --recipe projects/recipes/gptq-w4g32.json --recipe projects/recipes/wanda-50.json \
    --recipe projects/recipes/smoothquant-w8a8-folded.json
"$cwb" project add-export "$work/stories.cwbproj" --variant rtn-w4g32 --format gguf --type q8_0
"$cwb" project add-export "$work/stories.cwbproj" --variant smoothquant-w8a8-folded --format compressed-tensors
"$cwb" project run "$work/stories.cwbproj" --threads 1
"$cwb" project show "$work/stories.cwbproj"
echo "== cwb --batch: rebuild every variant and compare with the stored results"
"$cwb" --batch "$work/stories.cwbproj" --out "$work/report" --threads 1
cat "$work/report/report.md"
echo "== the GGUF the batch exported, read back and evaluated"
"$cwb" eval "$work/report/exports/rtn-w4g32.gguf" --text "$text" --ctx 256
echo "== the compressed-tensors folder (W8A8, what vLLM loads) the batch exported, read back and evaluated"
"$cwb" eval "$work/report/exports/smoothquant-w8a8-folded-compressed-tensors" --text "$text" --ctx 256
echo "== cwb compress: magnitude 50% pruning, then knowledge distillation from the base (CPU, 60 steps)"
"$cwb" compress "$model" --recipe projects/recipes/magnitude-50-then-distill.json --calib "$text" --eval "$text" --ctx 256 \
    --samples 64 --seq-len 128
