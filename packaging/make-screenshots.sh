#!/usr/bin/env bash
# Makes docs/screenshots/*.png with the real cwb GUI under Xvfb, on real data (the stories260K fixture):
#   main-window.png  the model tree and a head-ablation heatmap the GUI computes
#   pipeline.png     the pipeline editor: a variant's steps, the form generated from the method's parameters and the
#                    step's layers (targets, ignore patterns, per-layer overrides)
#   compare.png      the A/B view after the GUI evaluates the base and three variants
#   distillation.png the Run tab while a distillation step trains, with its live loss curves
# Usage: packaging/make-screenshots.sh [BUILD_DIR] [FIXTURES_DIR]   (needs xvfb-run: apt-get install xvfb xauth)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fixtures=${2:-${CWB_FIXTURES_DIR:-../shared/fixtures}}
cwb="$build/app/cwb"
model="$fixtures/models/stories260K.gguf"
text="$fixtures/text/tinystories_v2_valid_first100.txt"
for f in "$cwb" "$model" "$text"; do
    [[ -e "$f" ]] || { echo "make-screenshots: $f not found" >&2; exit 2; }
done
command -v xvfb-run >/dev/null || { echo "make-screenshots: xvfb-run not found (apt-get install xvfb xauth)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=docs/screenshots
mkdir -p "$out"

# A project with three variants, made with the CLI; the GUI computes and evaluates everything shown.
cat > "$work/rtn4.json" <<'JSON'
{"steps": [{"method": "quantize.rtn", "params": {"bits": 4, "granularity": "group", "group_size": 32}}]}
JSON
cat > "$work/rtn3.json" <<'JSON'
{"steps": [{"method": "quantize.rtn", "params": {"bits": 3, "granularity": "group", "group_size": 32}}]}
JSON
cat > "$work/magnitude50.json" <<'JSON'
{"steps": [{"method": "prune.magnitude", "params": {"sparsity": 0.5}}]}
JSON
project="$work/stories260K.cwbproj"
"$cwb" project create "$project" --model "$model" --calib "$text" --eval "$text" --ctx 128 --chunks 16 \
    --samples 8 --seq-len 64 --recipe "$work/rtn4.json" --recipe "$work/rtn3.json" --recipe "$work/magnitude50.json"

shot() { xvfb-run -a -s "-screen 0 1700x1000x24" env QT_QPA_PLATFORM=xcb XDG_CONFIG_HOME="$work/config" "$cwb" "$@"; }
shot "$project" --size 1600x900 --compute-importance heads.ablation --tab importance \
    --select-layer model.layers.2.self_attn.q_proj --screenshot "$out/main-window.png"
# The pipeline editor on a mixed-precision GPTQ variant: its parameters and its per-layer overrides in the Layers box.
mixed="$work/mixed.cwbproj"
"$cwb" project create "$mixed" --model "$model" --calib "$text" --eval "$text" --ctx 128 --chunks 16 \
    --samples 8 --seq-len 64 --recipe projects/recipes/mixed-precision.json
shot "$mixed" --size 1600x900 --tab pipeline --select-layer model.layers.0.mlp.up_proj --screenshot "$out/pipeline.png"
shot "$project" --size 1600x900 --run-all --tab compare --metric perplexity \
    --select-layer model.layers.0.self_attn.q_proj --screenshot "$out/compare.png"
# Distillation: magnitude 50% pruning recovered by distill.kd; grabbed while it trains.
cat > "$work/distill.json" <<'JSON'
{"steps": [{"method": "prune.magnitude", "params": {"sparsity": 0.5}},
           {"method": "distill.kd", "params": {"steps": 400, "batch_size": 4, "seq_len": 64, "eval_every": 50}}]}
JSON
distill="$work/distill.cwbproj"
"$cwb" project create "$distill" --model "$model" --calib "$text" --eval "$text" --ctx 128 --chunks 16 \
    --samples 32 --seq-len 64 --recipe "$work/distill.json"
shot "$distill" --size 1600x900 --run-all --grab-while-running 120 --screenshot "$out/distillation.png"
echo "screenshots in $out"
