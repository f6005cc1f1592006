#!/usr/bin/env python3
"""Checks that cwb reads checkpoints another tool quantized (run by hand where GPTQModel is installed; it runs on the
CPU). GPTQModel quantizes the dense folders bench_export_results writes (synthetic256-hf-f32: every dimension a
multiple of 256; stories260K-hf-f16: trained, MLP 172, so a last partial word) into GPTQ and AWQ checkpoints; then the
perplexity of each is computed twice on the same tokens, by `cwb eval` and by transformers with GPTQModel's kernels.
A wrong bit order, zero offset, group index or padding moves the perplexity by whole percent; agreement within fp16
rounding (GPTQModel dequantizes in fp16) says cwb reads the checkpoint as GPTQModel meant it.
usage: check_gptqmodel_checkpoints.py CWB FILES_DIR TEXT  (GPTQMODEL_CPU_WORKERS=2 on a machine with 2 cores)"""
import contextlib, json, math, os, subprocess, sys

import torch
from gptqmodel import GPTQModel, QuantizeConfig
from gptqmodel.quantization import METHOD, FORMAT
from transformers import AutoModelForCausalLM, GPTQConfig

from cwb_checks import perplexity

cwb, files, text = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
if os.sep in cwb:
    cwb = os.path.abspath(cwb)
os.chdir(files)   # GPTQModel writes a ./logs folder wherever it runs: keep it beside the checkpoints, out of the checkout
CTX, CHUNKS = 128, 8

# (dense source folder, output name, GPTQModel's config)
CASES = [
    ("synthetic256-hf-f32", "gptqmodel-synthetic256-gptq-w4g128", QuantizeConfig(bits=4, group_size=128, sym=True)),
    ("synthetic256-hf-f32", "gptqmodel-synthetic256-gptq-w4g128-actorder", QuantizeConfig(bits=4, group_size=128, desc_act=True, sym=True)),
    ("synthetic256-hf-f32", "gptqmodel-synthetic256-gptq-w3g128", QuantizeConfig(bits=3, group_size=128, sym=True)),
    ("synthetic256-hf-f32", "gptqmodel-synthetic256-gptq-w8g128", QuantizeConfig(bits=8, group_size=128, sym=True)),
    ("synthetic256-hf-f32", "gptqmodel-synthetic256-awq-w4g128", QuantizeConfig(bits=4, group_size=128, quant_method=METHOD.AWQ, format=FORMAT.GEMM)),
    ("stories260K-hf-f16", "gptqmodel-stories260K-gptq-w4-channel-actorder", QuantizeConfig(bits=4, group_size=-1, desc_act=True, sym=True)),
]


def run_json(*args):
    return json.loads(subprocess.run([cwb, *args], capture_output=True, text=True, check=True).stdout)


def their_perplexity(folder, ids, bos):
    qc = json.load(open(os.path.join(folder, "config.json"))).get("quantization_config", {})
    kwargs = {}
    if qc.get("quant_method") == "gptq":
        # GPTQModel's default CPU kernel wants features divisible by 16 (not stories260K's 172); its torch one does not.
        kwargs["quantization_config"] = GPTQConfig.from_dict({**qc, "backend": "torch"})
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, device_map="cpu", **kwargs)
    ppl = perplexity(model, ids, bos, CTX, CHUNKS)
    kernel = next((type(m).__name__ for m in model.modules() if hasattr(m, "qweight")), "dense")
    return ppl, kernel


torch.manual_seed(0)
calibration = [{"input_ids": torch.randint(3, 500, (128,)).tolist(), "attention_mask": [1] * 128} for _ in range(16)]
print("| checkpoint (written by GPTQModel) | cwb reads it as | cwb PPL | transformers + GPTQModel PPL (kernel) | relative difference |")
print("| --- | --- | ---: | ---: | ---: |")
for source, name, config in CASES:
    out = os.path.join(files, name)
    if not os.path.isdir(out):
        with contextlib.redirect_stdout(sys.stderr):   # GPTQModel's progress and tables: keep stdout for the table
            model = GPTQModel.load(os.path.join(files, source), config, device="cpu")
            model.quantize(calibration, batch_size=4)
            model.save(out)
        del model
    info = run_json("info", out, "--json")
    kinds = sorted({t.get("compressed", "") for t in info.get("tensors", []) if t.get("compressed")})
    ids = run_json("tokenize", out, "--file", text, "--json")["ids"]
    ours = run_json("eval", out, "--text", text, "--ctx", str(CTX), "--chunks", str(CHUNKS), "--json")["perplexity"]
    with contextlib.redirect_stdout(sys.stderr):
        theirs, kernel = their_perplexity(out, ids, ids[0])
    print(f"| {name} | {', '.join(kinds) or '?'} | {ours:.4f} | {theirs:.4f} ({kernel}) | {abs(ours - theirs) / theirs:.1e} |", flush=True)
