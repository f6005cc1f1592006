#!/usr/bin/env python3
"""Checks the tokenizer files cwb writes into Hugging Face exports of GGUF and llama2.c models with Hugging Face's
own libraries (run by hand where `tokenizers`, and optionally `transformers` and `sentencepiece`, are installed):
 - stories260K (GGUF and llama2.c) and llama-2-tiny-random (Llama 2's 32000-token vocabulary) are exported with
   `cwb export --format hf`; the `tokenizers` library's ids on every line of the two fixture texts are compared with
   SentencePiece's own on tok512.model (stories260K), with transformers' AutoTokenizer, and, on a sample of lines,
   with the ids cwb itself gives the source model (`cwb generate --json`, prompt_ids);
 - byte-level BPE: a Llama-3-style tokenizer (Split regex + ByteLevel, ignore_merges, BOS template) is trained with
   `tokenizers` on the TinyStories text and put in a small random Llama folder; cwb exports that folder as GGUF,
   then the GGUF as a Hugging Face folder; the written tokenizer.json must give the trained one's ids on every line.
usage: check_tokenizer_export.py CWB FIXTURES_DIR WORK_DIR"""
import json, os, random, re, struct, subprocess, sys

from tokenizers import Tokenizer

cwb, fixtures, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
failures = 0


def say(line):
    print(line, flush=True)


def lines_of(path):
    with open(path, "rb") as f:
        return [line.decode("utf-8") for line in f.read().split(b"\n")]


texts = lines_of(os.path.join(fixtures, "text/tinystories_v2_valid_first100.txt")) + \
        lines_of(os.path.join(fixtures, "text/wiki.test.raw"))


def export(source, fmt, out):
    subprocess.run([cwb, "export", source, "--format", fmt, "--out", out], check=True, capture_output=True)


def cwb_prompt_ids(model, text):
    run = subprocess.run([cwb, "generate", model, "--prompt", text, "--tokens", "1", "--json"],
                         check=True, capture_output=True)
    return json.loads(run.stdout)["prompt_ids"]


def compare(name, reference, candidate, sample):
    global failures
    differing = [t for t in sample if reference(t) != candidate(t)]
    failures += len(differing)
    first = f"; first: {differing[0][:60]!r}" if differing else ""
    say(f"{name}: {len(sample) - len(differing)} of {len(sample)} lines agree{first}")


try:
    from transformers import AutoTokenizer
except ImportError as e:
    AutoTokenizer = None
    say(f"transformers check skipped: {e}")
try:
    import sentencepiece
except ImportError as e:
    sentencepiece = None
    say(f"sentencepiece check skipped: {e}")

# --- SentencePiece vocabularies written from GGUF and llama2.c models
random.seed(0)
prompt_sample = random.sample([t for t in texts if 0 < len(t) < 300], 40)
for source in ("models/stories260K.gguf", "models/stories260K.bin", "models/llama-2-tiny-random.gguf"):
    path = os.path.join(fixtures, source)
    out = os.path.join(work, os.path.basename(source).replace(".", "-") + "-hf")
    export(path, "hf", out)
    hf = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    hf_ids = lambda t: hf.encode(t).ids
    label = os.path.basename(source)
    if sentencepiece and "stories260K" in source:
        sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(fixtures, "models/tok512.model"))
        # tok512.model's normalizer removes extra spaces (leading, trailing, repeated) and llama.cpp's tokenizer does
        # not; compare the merges on text that normalization leaves unchanged.
        squeezed = [re.sub(" +", " ", t).strip(" ") for t in texts]
        compare(f"{label}: tokenizers vs SentencePiece (tok512.model), spaces squeezed", lambda t: [1] + sp.encode(t),
                hf_ids, squeezed)
    if AutoTokenizer:
        auto = AutoTokenizer.from_pretrained(out)
        compare(f"{label}: tokenizers vs transformers {type(auto).__name__}", hf_ids,
                lambda t: auto(t)["input_ids"], texts)
    compare(f"{label}: tokenizers vs cwb on the source", lambda t: cwb_prompt_ids(path, t), hf_ids, prompt_sample)
    decoded = sum(hf.decode(hf_ids(t), skip_special_tokens=True) == t for t in texts)
    say(f"{label}: tokenizers decodes {decoded} of {len(texts)} lines back to the text")

# --- byte-level BPE through GGUF and back
from tokenizers import decoders, models, pre_tokenizers, processors, trainers, Regex

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
trained = Tokenizer(models.BPE(ignore_merges=True))
trained.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
trained.decoder = decoders.ByteLevel()
special = ["<|begin_of_text|>", "<|end_of_text|>"]
trained.train_from_iterator(lines_of(os.path.join(fixtures, "text/tinystories_v2_valid_first100.txt")),
                            trainers.BpeTrainer(vocab_size=1000, special_tokens=special,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
bos = trained.token_to_id(special[0])
trained.post_processor = processors.TemplateProcessing(single=f"{special[0]} $A", pair=f"{special[0]} $A {special[0]} $B",
                                                       special_tokens=[(special[0], bos)])
vocab = trained.get_vocab_size()
folder = os.path.join(work, "bytelevel-src")
os.makedirs(folder, exist_ok=True)
trained.save(os.path.join(folder, "tokenizer.json"))
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] | trim }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
json.dump({"add_bos_token": True, "bos_token": special[0], "eos_token": special[1], "pad_token": special[1],
           "chat_template": CHAT_TEMPLATE}, open(os.path.join(folder, "tokenizer_config.json"), "w"))
hidden, ffn, heads, kv, layers = 64, 128, 4, 2, 1
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": ffn, "num_attention_heads": heads, "num_key_value_heads": kv,
           "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
           "bos_token_id": bos, "eos_token_id": trained.token_to_id(special[1])},
          open(os.path.join(folder, "config.json"), "w"))
shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden], "model.norm.weight": [hidden]}
for i in range(layers):
    p = f"model.layers.{i}."
    head_dim = hidden // heads
    shapes.update({p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden],
                   p + "self_attn.q_proj.weight": [hidden, hidden], p + "self_attn.k_proj.weight": [kv * head_dim, hidden],
                   p + "self_attn.v_proj.weight": [kv * head_dim, hidden], p + "self_attn.o_proj.weight": [hidden, hidden],
                   p + "mlp.gate_proj.weight": [ffn, hidden], p + "mlp.up_proj.weight": [ffn, hidden],
                   p + "mlp.down_proj.weight": [hidden, ffn]})
header, blobs, offset = {}, [], 0
for name, shape in shapes.items():
    count = 1
    for d in shape:
        count *= d
    blob = struct.pack(f"<{count}f", *[random.gauss(0, 0.02) for _ in range(count)])
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
    blobs.append(blob)
    offset += len(blob)
head = json.dumps(header).encode()
with open(os.path.join(folder, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))

gguf = os.path.join(work, "bytelevel.gguf")
export(folder, "gguf", gguf)
back = os.path.join(work, "bytelevel-gguf-hf")
export(gguf, "hf", back)
written = Tokenizer.from_file(os.path.join(back, "tokenizer.json"))
compare("byte-level (trained, Llama 3 regex) -> GGUF -> hf: written tokenizer.json vs the trained one",
        lambda t: trained.encode(t).ids, lambda t: written.encode(t).ids, texts)
if AutoTokenizer:
    auto = AutoTokenizer.from_pretrained(back)
    compare(f"byte-level: trained vs transformers {type(auto).__name__} on the export",
            lambda t: trained.encode(t).ids, lambda t: auto(t)["input_ids"], texts)
    # The chat template and pad token travel HF -> GGUF -> HF; transformers renders the same prompt with it.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Tell me a story. "}]
    source_auto = AutoTokenizer.from_pretrained(folder)
    same = source_auto.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        auto.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    failures += 0 if same and auto.pad_token == special[1] else 1
    say(f"byte-level: chat template after GGUF and back renders {'the same' if same else 'differently'}; "
        f"pad token {auto.pad_token!r}")
compare("byte-level: trained vs cwb on the GGUF", lambda t: trained.encode(t).ids,
        lambda t: cwb_prompt_ids(gguf, t), prompt_sample)

say("all agree" if failures == 0 else f"{failures} disagreements")
sys.exit(1 if failures else 0)
