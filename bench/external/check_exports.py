#!/usr/bin/env python3
"""Checks cwb's exports with other engines' own readers (run by hand where they are installed):
 - transformers loads every Hugging Face folder, dense or GPTQ/AWQ packed (the packed ones through GPTQModel, which runs
   on the CPU), and its logits for ids 1..32 are compared with the logits cwb computed from the same folder
   (<folder>.logits.f32, written by bench_export_results);
 - for the packed folders, each quantized module's weight as GPTQModel dequantizes it (in fp16) is compared with the
   dense export of the same variant (<folder>-dense) rounded to fp16;
 - llama.cpp's gguf-py reads every GGUF file and dequantizes each tensor with its own decoders; the result is compared
   with the f32 export of the same model (the relative error must be what re-quantization adds, not garbage);
 - llama.cpp's llama-perplexity (path in $LLAMA_PERPLEXITY) runs every GGUF file on eval.txt with ctx 256.
usage: check_exports.py FILES_DIR"""
import glob, os, re, subprocess, sys

import numpy as np

files = sys.argv[1]
report = []

def say(line):
    print(line, flush=True)
    report.append(line)

# --- transformers
try:
    import json
    import torch
    from transformers import AutoModelForCausalLM

    from cwb_checks import logits_agreement

    def load(folder):
        """transformers' model of the folder, and the kernel of its first quantized layer (or "dense"). GPTQModel's
        default CPU kernel wants out_features divisible by 16; where it refuses, its plain torch kernel is asked for."""
        try:
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, device_map="cpu")
        except Exception as e:
            qc = json.load(open(os.path.join(folder, "config.json"))).get("quantization_config")
            if not qc or qc.get("quant_method") != "gptq":
                raise
            from transformers import GPTQConfig
            say(f"  ({os.path.basename(folder)}: default kernel refused: {str(e).splitlines()[0][:120]}; using backend torch)")
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, device_map="cpu",
                                                         quantization_config=GPTQConfig.from_dict({**qc, "backend": "torch"}))
        kernel = next((type(m).__name__ for m in model.modules() if hasattr(m, "qweight")), "dense")
        return model, kernel

    def packed_head(folder):
        """A folder written with --pack-head: transformers' GPTQ loader would leave its head unread (see below)."""
        config = os.path.join(folder, "config.json")
        return os.path.isfile(config) and bool(json.load(open(config)).get("quantization_config", {}).get("lm_head"))

    for logits_file in sorted(glob.glob(os.path.join(files, "*.logits.f32"))):
        folder = logits_file[: -len(".logits.f32")]
        if folder.endswith("-ct") or packed_head(folder):
            continue   # compressed-tensors folders: bench/external/check_compressed_tensors.py
        try:
            model, kernel = load(folder)
        except ImportError as e:
            say(f"transformers {os.path.basename(folder)}: skipped ({e})")
            continue
        diff, same = logits_agreement(model, logits_file)
        say(f"transformers {os.path.basename(folder)}: {type(model).__name__} ({kernel}), max |Δlogit| / max |logit| = {diff:.2e}, argmax agreement {same:.3f}")

    # GPTQModel dequantizes in fp16, so its weights are compared with the dense export rounded to fp16: a layout
    # error (bit order, zero offset, group index) shows as differences of whole quantization steps.
    from safetensors.numpy import load_file as load_numpy
    for folder in sorted(glob.glob(os.path.join(files, "*-gptq*")) + glob.glob(os.path.join(files, "*-awq*"))):
        if folder.endswith(("-dense", "-ct")) or not os.path.isdir(folder) or not os.path.isdir(folder + "-dense") or packed_head(folder):
            continue
        try:
            model, _ = load(folder)
        except ImportError as e:
            say(f"GPTQModel {os.path.basename(folder)}: skipped ({e})")
            continue
        dense = load_numpy(os.path.join(folder + "-dense", "model.safetensors"))
        modules, worst, kernels = 0, 0.0, set()
        for name, module in model.named_modules():
            if not hasattr(module, "qweight"):
                continue
            theirs = module.dequantize_weight().float().numpy()                  # [in, out]
            ref = dense[name + ".weight"].T.astype(np.float16).astype(np.float32)
            worst = max(worst, float(np.abs(theirs - ref).max() / np.abs(ref).max()))
            modules += 1
            kernels.add(type(module).__name__)
        say(f"GPTQModel {os.path.basename(folder)}: {modules} quantized modules ({', '.join(sorted(kernels))}); "
            f"max |dequantized − fp16(dense export)| / max |w| = {worst:.3g}")
    # A head packed with --pack-head ("lm_head": true) is read by GPTQModel's own loader (transformers' GPTQ loader
    # converts the block layers only). Its TorchLinear kernel takes fp16 or bf16; fp16 dequantizes exactly as the
    # dense export rounded to fp16.
    for folder in sorted(glob.glob(os.path.join(files, "*-gptq"))):
        if not packed_head(folder):
            continue
        try:
            from gptqmodel import BACKEND, GPTQModel
        except ImportError as e:
            say(f"GPTQModel {os.path.basename(folder)}: skipped ({e})")
            continue
        hf = GPTQModel.load(folder, device="cpu", backend=BACKEND.TORCH, dtype=torch.float16).model
        head = hf.lm_head
        if not hasattr(head, "qweight"):
            say(f"GPTQModel {os.path.basename(folder)}: FAILED, lm_head loaded as {type(head).__name__}, not packed")
            continue
        dense = load_numpy(os.path.join(folder + "-dense", "model.safetensors")) if os.path.isdir(folder + "-dense") else None
        worst = 0.0
        if dense is not None:
            for name, module in hf.named_modules():
                if hasattr(module, "qweight"):
                    theirs = module.dequantize_weight().float().numpy()
                    ref = dense[name + ".weight"].T.astype(np.float16).astype(np.float32)
                    worst = max(worst, float(np.abs(theirs - ref).max() / np.abs(ref).max()))
        diff, same = logits_agreement(hf, folder + ".logits.f32")
        say(f"GPTQModel {os.path.basename(folder)} (packed head, fp16): lm_head {type(head).__name__}; max |dequantized − "
            f"fp16(dense export)| / max |w| over every packed module = {worst:.3g}; max |Δlogit| / max |logit| = {diff:.2e}, "
            f"argmax agreement {same:.3f}")
except ImportError as e:
    say(f"transformers check skipped: {e}")

# --- gguf-py
try:
    import gguf
    from gguf.quants import dequantize

    def tensors(path):
        r = gguf.GGUFReader(path)
        return {t.name: dequantize(t.data, t.tensor_type).reshape([int(x) for x in reversed(t.shape)]) for t in r.tensors}, r

    for model in ("stories260K", "synthetic256"):
        reference, _ = tensors(os.path.join(files, f"{model}-f32.gguf"))
        for path in sorted(glob.glob(os.path.join(files, f"{model}-*.gguf"))):
            got, reader = tensors(path)
            worst, name_worst = 0.0, ""
            for name, ref in reference.items():
                if name not in got:
                    continue
                err = float(((got[name].astype(np.float64) - ref) ** 2).sum() / max((ref.astype(np.float64) ** 2).sum(), 1e-30))
                if err > worst:
                    worst, name_worst = err, name
            types = sorted({t.tensor_type.name for t in reader.tensors})
            say(f"gguf-py {os.path.basename(path)}: {len(reader.tensors)} tensors ({', '.join(types)}); "
                f"worst relative error vs f32 {worst:.2e} ({name_worst})")
except ImportError as e:
    say(f"gguf-py check skipped: {e}")

# --- llama.cpp perplexity
tool = os.environ.get("LLAMA_PERPLEXITY")
if tool:
    for path in sorted(glob.glob(os.path.join(files, "*.gguf"))):
        run = subprocess.run([tool, "-m", path, "-f", os.path.join(files, "eval.txt"), "-c", "256", "-b", "256", "-t", "8"],
                             capture_output=True, text=True)
        text = run.stdout + run.stderr
        m = re.search(r"Final estimate: PPL = (\S+) \+/- (\S+)", text)
        chunks = re.findall(r"\[(\d+)\]([0-9.]+|nan|inf)", text)
        if m:
            say(f"llama.cpp {os.path.basename(path)}: PPL = {m.group(1)} +/- {m.group(2)}")
        elif chunks and run.returncode == 0:
            # llama.cpp logs from a thread; its last line is sometimes lost at exit. The running estimate after the
            # last chunk is the same number.
            say(f"llama.cpp {os.path.basename(path)}: PPL = {chunks[-1][1]} (running estimate after chunk {chunks[-1][0]}; final line lost)")
        else:
            say(f"llama.cpp {os.path.basename(path)}: no final estimate (rc {run.returncode}); output ends: {(run.stdout + run.stderr)[-600:]}")

# --- GPTQ and AWQ layouts, unpacked here from their published descriptions (AutoGPTQ v1: levels packed along the
# input dim, zero − 1 stored; AutoAWQ GEMM: levels packed along the output dim in the order 0 2 4 6 1 3 5 7),
# compared with the dense export of the same variant (<folder>-dense).
try:
    import json
    from safetensors.numpy import load_file

    def unpack_stream(words, bits):
        # GPTQ: the last axis is a little-endian bit stream, `bits` per value (3 bits: values straddle words).
        w = words.astype(np.uint32).astype(np.uint64)   # int32 words: wrap, not sign-extend
        n = w.shape[-1] * 32 // bits
        out = np.zeros((*w.shape[:-1], n), dtype=np.int64)
        for j in range(n):
            word, offset = divmod(bits * j, 32)
            v = w[..., word] >> np.uint64(offset)
            if offset + bits > 32:
                v |= w[..., word + 1] << np.uint64(32 - offset)
            out[..., j] = (v & np.uint64((1 << bits) - 1)).astype(np.int64)
        return out

    def unpack(words, bits, axis_order=None):
        k = 32 // bits
        w = words.astype(np.uint32)
        parts = [(w >> (bits * j)) & ((1 << bits) - 1) for j in range(k)]
        if axis_order is not None:
            ordered = [None] * k
            for j in range(k):
                ordered[axis_order[j]] = parts[j]
            parts = ordered
        return np.stack(parts, axis=-1).reshape(*w.shape[:-1], w.shape[-1] * k).astype(np.int64)

    for folder in sorted(glob.glob(os.path.join(files, "*-gptq*")) + glob.glob(os.path.join(files, "*-awq*"))):
        if folder.endswith("-dense") or not os.path.isdir(folder) or not os.path.isdir(folder + "-dense"):
            continue
        qc = json.load(open(os.path.join(folder, "config.json")))["quantization_config"]
        if qc.get("quant_method") not in ("gptq", "awq"):
            continue   # "synthetic256-gptq-w4g128-ct" is compressed-tensors: check_compressed_tensors.py
        packed, dense = load_file(os.path.join(folder, "model.safetensors")), load_file(os.path.join(folder + "-dense", "model.safetensors"))
        worst = 0.0
        for name in [n[: -len(".qweight")] for n in packed if n.endswith(".qweight")]:
            scales = packed[name + ".scales"].astype(np.float32)                 # [groups, out]
            if qc["quant_method"] == "gptq":
                g = packed[name + ".g_idx"].astype(np.int64)                       # [in]
                # A last partial word (features not a multiple of 32 / bits) holds zero-filled padding: drop it.
                q = unpack_stream(packed[name + ".qweight"].T, qc["bits"]).T[: g.shape[0]]              # [in, out]
                z = unpack_stream(packed[name + ".qzeros"], qc["bits"])[:, : scales.shape[1]] + 1     # [groups, out]
                w = (q - z[g]) * scales[g]
            else:
                order = [0, 2, 4, 6, 1, 3, 5, 7]
                q = unpack(packed[name + ".qweight"], 4, order)                    # [in, out]
                z = unpack(packed[name + ".qzeros"], 4, order)                     # [groups, out]
                g = np.arange(q.shape[0]) // qc["group_size"]
                w = (q - z[g]) * scales[g]
            ref = dense[name + ".weight"].T                                          # [in, out]
            worst = max(worst, float(np.abs(w - ref).max()))
        say(f"layout {os.path.basename(folder)} ({qc['quant_method']}, {qc['bits']} bits, group {qc['group_size']}, "
            f"desc_act {qc.get('desc_act', False)}): max |unpacked − dense export| = {worst:.3g}")
except ImportError as e:
    say(f"layout check skipped: {e}")
