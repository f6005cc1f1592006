#!/usr/bin/env python3
"""Checks cwb's YaRN RoPE scaling against transformers' (run by hand where transformers and torch are installed).
For each of three tiny random Llama folders that transformers writes (no scaling; yarn factor 4 over 64 tokens;
yarn with beta 16/2 and mscale 0.9 / mscale_all_dim 0.7), the mean NLL of `cwb eval` (llama.cpp's chunking: BOS
first, second half of each chunk scored) is compared with transformers' on the same token ids, and the folder cwb
exports (hf) is read by both. The tokens are a text tokenized by stories260K's tokenizer (vocab 512).
usage: check_yarn.py CWB FIXTURES_DIR WORK_DIR"""
import json, math, os, subprocess, sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

cwb, fixtures, work = sys.argv[1:4]
tokenizer = os.path.join(fixtures, "models", "stories260K.gguf")
text = os.path.join(fixtures, "text", "tinystories_v2_valid_first100.txt")
ctx, chunks = 256, 3
ropes = {
    "plain": {"rope_type": "default", "rope_theta": 10000.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64},
    "yarn-mscale": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
                    "beta_fast": 16, "beta_slow": 2, "mscale": 0.9, "mscale_all_dim": 0.7},
}


def transformers_nll(folder, ids):
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    first, scored, nll = ctx // 2, ctx - 1 - ctx // 2, []
    for c in range(chunks):
        tokens = [1] + ids[c * ctx + 1:(c + 1) * ctx]
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0].double()
        log_probs = torch.log_softmax(logits[first:first + scored], -1)
        targets = torch.tensor(ids[c * ctx + first + 1:c * ctx + first + 1 + scored])
        nll += (-log_probs.gather(1, targets[:, None])[:, 0]).tolist()
    return sum(nll) / len(nll)


def cwb_nll(folder, tokenizer_args):
    out = subprocess.run([cwb, "eval", folder, *tokenizer_args, "--text", text, "--ctx", str(ctx), "--chunks", str(chunks),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["mean_nll"]


ids = json.loads(subprocess.run([cwb, "tokenize", tokenizer, "--file", text, "--json"], check=True, capture_output=True,
                                text=True).stdout)["ids"]
worst = 0.0
for name, rope in ropes.items():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=ctx, rope_parameters=rope, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.15)   # larger than the default init, so that positions matter to the output
    folder = os.path.join(work, name)
    model.save_pretrained(folder, safe_serialization=True)
    ours, theirs = cwb_nll(folder, ["--tokenizer", tokenizer]), transformers_nll(folder, ids)
    exported = folder + "-cwb-hf"
    subprocess.run([cwb, "export", folder, "--tokenizer", tokenizer, "--format", "hf", "--out", exported], check=True,
                   capture_output=True)
    # The export stores the weights in its default type (f16), so both read the exported folder.
    ours_back, back = cwb_nll(exported, []), transformers_nll(exported, ids)
    print(f"{name}: mean NLL cwb {ours:.9f}, transformers {theirs:.9f}; of cwb's hf export: cwb {ours_back:.9f}, "
          f"transformers {back:.9f}")
    worst = max(worst, abs(ours - theirs), abs(ours_back - back))
print(f"largest difference {worst:.2e}")
sys.exit(0 if worst < 1e-5 else 1)
