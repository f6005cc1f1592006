#!/usr/bin/env python3
"""Checks that cwb reads compressed-tensors checkpoints that compressed-tensors itself wrote (run by hand where
compressed-tensors and transformers are installed; CPU only). For each scheme below, the dense folder that
bench_export_results wrote (synthetic256-hf-f32: every dimension a multiple of 256) is loaded in transformers, the
scheme applied with compressed-tensors (min-max scales and zero points computed here, as llm-compressor's default
observer does), compressed by compressed-tensors' ModelCompressor and saved. Then the perplexity is computed twice on
the same tokens: by `cwb eval` on the saved folder, and by the compressed model in memory (compressed-tensors
decompresses it for the forward pass, so its own reading of its own tensors is the reference). Both quantize the
activations of W8A8 and FP8_DYNAMIC per token as they run (each with its own rounding rule), so those rows also
differ by what the two activation quantizers do differently; FP8 with static activation scales must be refused.
usage: check_ct_checkpoints.py CWB FILES_DIR TEXT"""
import contextlib, json, math, os, shutil, subprocess, sys, warnings

import torch

warnings.filterwarnings("ignore")
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme
from transformers import AutoModelForCausalLM

from cwb_checks import perplexity

cwb, files, text = sys.argv[1], sys.argv[2], sys.argv[3]
CTX, CHUNKS = 128, 8
SCHEMES = ["W4A16", "W4A16_ASYM", "W8A16", "W3A16", "W2A16", "FP8_DYNAMIC", "W8A8", "FP8"]
# Weight-only schemes must agree to float rounding; with activation quantization each side rounds its own way.
TOLERANCE = {"FP8_DYNAMIC": 1e-3, "W8A8": 1e-3}
failed = False


def run_json(*args):
    done = subprocess.run([cwb, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    return json.loads(done.stdout)


def set_minmax_parameters(model):
    for _, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None:
            continue
        w, args = module.weight.data, scheme.weights
        if args.type == "float":
            amax = w.abs().amax(dim=1, keepdim=True) if args.strategy == "channel" else w.abs().amax().reshape(1)
            module.weight_scale.data.copy_((amax / 448.0).reshape(module.weight_scale.shape))
            continue
        qmax, qmin = 2 ** (args.num_bits - 1) - 1, -(2 ** (args.num_bits - 1))
        g = w.reshape(w.shape[0], -1, args.group_size) if args.strategy == "group" else w.unsqueeze(1)
        if args.symmetric:
            scale = g.abs().amax(-1) / ((qmax - qmin) / 2)
        else:
            lo, hi = g.amin(-1).clamp(max=0), g.amax(-1).clamp(min=0)
            scale = (hi - lo) / (qmax - qmin)
            zero = (qmin - torch.round(lo / scale)).clamp(qmin, qmax)
            module.weight_zero_point.data.copy_(zero.reshape(module.weight_zero_point.shape).to(module.weight_zero_point.dtype))
        module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape).to(module.weight_scale.dtype))
        if getattr(module, "input_scale", None) is not None:   # static activations: any scale; cwb must refuse them
            module.input_scale.data.fill_(1.0)



source = os.path.join(files, "synthetic256-hf-f32")
ids = run_json("tokenize", source, "--file", text, "--json")["ids"]
print("| checkpoint (written by compressed-tensors) | format | cwb reads it as | cwb PPL | compressed-tensors PPL | relative difference |")
print("| --- | --- | --- | ---: | ---: | ---: |")
for preset in SCHEMES:
    out = os.path.join(files, f"ct-written-synthetic256-{preset}")
    shutil.rmtree(out, ignore_errors=True)
    with contextlib.redirect_stdout(sys.stderr), contextlib.redirect_stderr(open(os.devnull, "w")):
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(preset, ["Linear"])},
                                                           ignore=["lm_head"]))
        set_minmax_parameters(model)
        compressor = ModelCompressor.from_pretrained_model(model)
        compressor.compress_model(model)
        model.save_pretrained(out)
        compressor.update_config(out)
        for f in os.listdir(source):
            if f.startswith("token") or f == "special_tokens_map.json":
                shutil.copy(os.path.join(source, f), out)
        static = preset == "FP8"   # static input scales set to 1 above: no meaningful reference, cwb must refuse it
        theirs = float("nan") if static else perplexity(model, ids, ids[0], CTX, CHUNKS)
    fmt = json.load(open(os.path.join(out, "config.json")))["quantization_config"]["format"]
    try:
        info = run_json("info", out, "--json")
        kinds = sorted({t.get("compressed", "") for t in info.get("tensors", []) if t.get("compressed")})
        ours = run_json("eval", out, "--text", text, "--ctx", str(CTX), "--chunks", str(CHUNKS), "--json")["perplexity"]
        print(f"| {preset} | {fmt} | {', '.join(kinds) or '?'} | {ours:.4f} | {theirs:.4f} | {abs(ours - theirs) / theirs:.1e} |", flush=True)
        failed |= abs(ours - theirs) / theirs > TOLERANCE.get(preset, 1e-6)
    except RuntimeError as e:
        failed |= preset != "FP8"   # only static activation scales are meant to be refused
        print(f"| {preset} | {fmt} | refused: {e} | — | {'—' if math.isnan(theirs) else f'{theirs:.4f}'} | — |", flush=True)
sys.exit(1 if failed else 0)
