#!/usr/bin/env python3
"""Checks cwb's compressed-tensors exports with compressed-tensors' and transformers' own code (run by hand where
they are installed: pip install compressed-tensors transformers torch). For every folder DIR/*-ct that
bench_export_results wrote:
 - each compressed layer is decompressed by compressed-tensors' own compressor for its format (model-free, from the
   safetensors tensors and the layer's config group) and compared with the dense export of the same variant
   (<folder>-dense): the decompressed weight must equal it as rounded to the scale's dtype (fp16 scales for integer
   layers, f32 for FP8);
 - the dense weight, with cwb's scales and zero points, is compressed again by compressed-tensors' compressor, and the
   packed words, zero points and FP8 bytes must equal cwb's file bit for bit;
 - transformers loads the folder (its compressed-tensors quantizer) and its logits for ids 1..32 are compared with
   the logits cwb computed from the same folder (<folder>.logits.f32).
usage: check_compressed_tensors.py FILES_DIR"""
import glob, json, os, re, sys, warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
files = sys.argv[1]

from compressed_tensors.compressors import BaseCompressor
from compressed_tensors.quantization import QuantizationScheme
from safetensors.torch import load_file

from cwb_checks import logits_agreement


def group_of(qc, layer):
    """The config group whose targets match the layer, as compressed-tensors matches them (class "Linear", "re:"
    prefix with re.match, or the whole name)."""
    for group in qc["config_groups"].values():
        for t in group["targets"]:
            if t == "Linear" or (t.startswith("re:") and re.match(t[3:], layer)) or t == layer:
                return group
    return None


def check_folder(folder):
    qc = json.load(open(os.path.join(folder, "config.json")))["quantization_config"]
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    dense = load_file(os.path.join(folder + "-dense", "model.safetensors"))
    layers = sorted({k.rsplit(".", 1)[0] for k in tensors if k.endswith((".weight_packed", ".weight_scale"))})
    worst_decompressed, mismatched, formats = 0.0, [], set()
    for layer in layers:
        group = group_of(qc, layer)
        scheme = QuantizationScheme.model_validate({k: v for k, v in group.items() if k != "format"} | {"targets": ["Linear"]})
        fmt = group.get("format") or qc["format"]
        formats.add(fmt)
        compressor = BaseCompressor.get_value_from_registry(fmt)
        ours = {k.rsplit(".", 1)[1]: v for k, v in tensors.items() if k.rsplit(".", 1)[0] == layer}
        decompressed = compressor.decompress(dict(ours), scheme)["weight"].float()
        reference = dense[layer + ".weight"].to(ours["weight_scale"].dtype).float()
        worst_decompressed = max(worst_decompressed, float((decompressed - reference).abs().max() / reference.abs().max()))
        # Compress the dense weight again with cwb's scales and zero points (unpacked as the format defines them).
        state = {"weight": dense[layer + ".weight"].to(ours["weight_scale"].dtype), "weight_scale": ours["weight_scale"]}
        if "weight_zero_point" in ours:
            from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
            rows, groups = int(ours["weight_shape"][0]), ours["weight_scale"].shape[1]
            state["weight_zero_point"] = unpack_from_int32(ours["weight_zero_point"], scheme.weights.num_bits, (rows, groups), packed_dim=0)
        again = compressor.compress(state, scheme)
        for key, value in again.items():
            if key in ("weight_scale",):
                continue
            mine = ours.get(key)
            if mine is None or mine.shape != value.shape or not torch.equal(mine.view(torch.uint8) if mine.dtype == torch.float8_e4m3fn else mine,
                                                                            value.view(torch.uint8) if value.dtype == torch.float8_e4m3fn else value):
                mismatched.append(f"{layer}.{key}")
    return len(layers), formats, worst_decompressed, mismatched


failed = False
for folder in sorted(glob.glob(os.path.join(files, "*-ct"))):
    if not os.path.isdir(folder):
        continue
    name = os.path.basename(folder)
    if os.path.isdir(folder + "-dense"):
        n, formats, worst, mismatched = check_folder(folder)
        failed |= worst != 0 or bool(mismatched)
        print(f"compressed-tensors {name}: {n} layers ({', '.join(sorted(formats))}); decompressed vs dense export "
              f"(in the scales' dtype): max |Δ| / max |w| = {worst:.3g}; compressed again: "
              + ("bit-identical" if not mismatched else f"{len(mismatched)} tensors differ, e.g. {mismatched[:3]}"), flush=True)
    logits_file = folder + ".logits.f32"
    if not os.path.exists(logits_file):
        continue
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, device_map="cpu")
    except Exception as e:
        print(f"transformers {name}: refused to load: {str(e).splitlines()[0][:200]}", flush=True)
        continue
    diff, same = logits_agreement(model, logits_file)
    print(f"transformers {name}: {type(model).__name__}, max |Δlogit| / max |logit| = {diff:.2e}, argmax agreement {same:.3f}", flush=True)
sys.exit(1 if failed else 0)
