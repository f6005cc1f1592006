#!/usr/bin/env bash
# Builds cwb without Qt on a GPU machine and runs the GPU tests and the issue-7 benchmarks, each step under a time
# limit, writing one log per step into OUT (default ./gpu-checks). Run by hand from the checkout:
#   bash bench/gpu_checks.sh [--out DIR] [--build DIR] [--steps LIST] [--build-only]
# LIST is a comma-separated subset of: tests,kernels,w4,w8,sparse24,decode_ops,decode7b,decode7b_c15,decode8b,
# decode70b,decode70b_long,decode70b_long_parts0,sparse7b,act_quant,fp8_7b,fp8_7b_gemv,w8a8_7b,w8a8_7b_gemv,
# w8a8-folded_7b,w8a8-folded_7b_gemv,profile16
# (default: all; fp8_7b / w8a8_7b decode 7B shapes in FP8 / W8A8 (w8a8-folded: unit divisors, q/k/v and gate/up
# stacked), the _gemv steps with the decode GEMV that quantizes
# its own input (CWB_W8_DECODE_GEMV=1, the default since session 37), the others with it off; decode7b_c15 is decode7b under stream
# shape 15, the default before session 18; decode8b is decode at Llama-3-8B's shapes (GQA: 32 query heads over 8 kv
# heads); decode70b is 8 blocks of Llama-2-70B (64/8 heads); decode70b_long 8 blocks of Llama-3-70B over a 16064-key
# cache, and decode70b_long_parts0 the same with the head parts off; profile16 reads the hardware counters of the
# W4A16 stream kernel at 16 tokens on 4096x11008, the shape furthest from its target, where ncu is installed).
# Environment: TORCH_PREFIX (else asked of python3's torch), SQLITE_INCLUDE (a folder holding sqlite3.h when the
# system has none), NLOHMANN_DIR (nlohmann_jsonConfig.cmake's folder when the system has none), CUDA_ARCHS
# (default 90), CWB_CUSPARSELT (else looked up in python3's site-packages).
set -u
out=gpu-checks
build=build-gpu
steps=tests,kernels,w4,w8,sparse24,decode_ops,decode7b,decode7b_c15,decode8b,decode70b,decode70b_long,decode70b_long_parts0
steps+=,sparse7b,act_quant,fp8_7b,fp8_7b_gemv,w8a8_7b,w8a8_7b_gemv,w8a8-folded_7b,w8a8-folded_7b_gemv,profile16
build_only=0
while [[ $# -gt 0 ]]; do
    case "$1" in
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "usage: bash bench/gpu_checks.sh [--out DIR] [--build DIR] [--steps LIST] [--build-only]" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

torch_prefix=${TORCH_PREFIX:-$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)}
args=(-DCMAKE_BUILD_TYPE=Release -DCWB_GUI=OFF "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90}")
[[ -n "$torch_prefix" ]] && args+=("-DCMAKE_PREFIX_PATH=$torch_prefix")
if [[ -n "${SQLITE_INCLUDE:-}" ]]; then
    lib=$(ls /usr/lib/x86_64-linux-gnu/libsqlite3.so* 2>/dev/null | head -1)
    args+=("-DSQLite3_INCLUDE_DIR=$SQLITE_INCLUDE" "-DSQLite3_LIBRARY=$lib")
fi
[[ -n "${NLOHMANN_DIR:-}" ]] && args+=("-Dnlohmann_json_DIR=$NLOHMANN_DIR")
if [[ -z "${CWB_CUSPARSELT:-}" ]]; then
    site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)
    found=$(ls "$site"/nvidia/cusparselt/lib/libcusparseLt.so* 2>/dev/null | head -1)
    [[ -n "$found" ]] && export CWB_CUSPARSELT=$found
fi
note "cuSPARSELt: ${CWB_CUSPARSELT:-not found}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$summary"

start=$(date +%s)
if ! cmake -S . -B "$build" "${args[@]}" > "$out/configure.log" 2>&1; then
    note "configure failed: see $out/configure.log"; tail -20 "$out/configure.log"; exit 1
fi
if ! cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1; then
    note "build failed: see $out/build.log"; grep -E "error" -A3 "$out/build.log" | head -40; exit 1
fi
note "build: $(( $(date +%s) - start )) s"
[[ $build_only == 1 ]] && exit 0

# run NAME SECONDS COMMAND...: one step, its log, its exit status and time in the summary.
run() {
    local name=$1 limit=$2; shift 2
    [[ ",$steps," == *",$name,"* ]] || return 0
    local t=$(date +%s)
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    note "$name: rc $rc in $(( $(date +%s) - t )) s ($*)"
}

run tests 600 ctest --test-dir "$build" -L "gpu|kernels" --output-on-failure --timeout 300
run kernels 300 "$build/bench/bench_kernels" --small-m --graph
run w4 300 "$build/bench/bench_kernels" --small-m --w4-stream --graph
run w8 300 "$build/bench/bench_kernels" --small-m --w8-stream --graph
run sparse24 400 "$build/bench/bench_sparse24"
run decode_ops 300 "$build/bench/bench_decode_ops"
run decode7b 400 "$build/app/cwb" bench --synthetic llama-7b --device cuda --prompt-tokens 128 --gen-tokens 64
run decode7b_c15 400 env CWB_W4_STREAM_CONFIG=15 "$build/app/cwb" bench --synthetic llama-7b --device cuda \
    --prompt-tokens 128 --gen-tokens 64
run decode8b 400 "$build/app/cwb" bench --synthetic llama3-8b --device cuda --prompt-tokens 128 --gen-tokens 64
run decode70b 400 "$build/app/cwb" bench --synthetic llama-70b --layers 8 --device cuda --prompt-tokens 128 --gen-tokens 64
run decode70b_long 400 "$build/app/cwb" bench --synthetic llama3-70b --layers 8 --context 32768 --device cuda \
    --prompt-tokens 16000 --gen-tokens 64
run decode70b_long_parts0 400 env CWB_ATTENTION_HEAD_PARTS=0 "$build/app/cwb" bench --synthetic llama3-70b --layers 8 \
    --context 32768 --device cuda --prompt-tokens 16000 --gen-tokens 64
run sparse7b 600 "$build/app/cwb" bench --synthetic llama-7b --format sparse24 \
    --device cuda --prompt-tokens 2048 --gen-tokens 16
run act_quant 300 "$build/bench/bench_act_quant"
for format in fp8 w8a8 w8a8-folded; do
    run "${format}_7b" 400 env CWB_W8_DECODE_GEMV=0 "$build/app/cwb" bench --synthetic llama-7b --format "$format" \
        --device cuda --prompt-tokens 128 --gen-tokens 64
    run "${format}_7b_gemv" 400 env CWB_W8_DECODE_GEMV=1 "$build/app/cwb" bench --synthetic llama-7b --format "$format" \
        --device cuda --prompt-tokens 128 --gen-tokens 64
done
if command -v ncu >/dev/null; then
    run profile16 300 ncu --clock-control none -k regex:w4StreamKernel --launch-skip 30 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        "$build/bench/bench_kernels" --small-m --m 16 --shape 4096x11008
else
    [[ ",$steps," == *",profile16,"* ]] && note "profile16: ncu not installed, skipped"
fi
grep -hE "tests passed|FAIL" "$out/tests.log" 2>/dev/null | head -5 | tee -a "$summary"
