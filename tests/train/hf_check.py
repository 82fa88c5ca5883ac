#!/usr/bin/python3
"""tests/train/hf_check.py — Hugging Face's side of tests/train/test_hf.sh.

Usage:
  hf_check.py make DIR SEED
      a randomly initialised GPT2LMHeadModel (2 layers, 4 heads, n_embd 64,
      64 positions, vocab 256; torch.manual_seed(SEED)) saved with
      save_pretrained (model.safetensors, config.json) into DIR
  hf_check.py loss DIR SHARDS SPLIT SEED BATCH T N
      GPT2LMHeadModel.from_pretrained(DIR) in eval mode, fp32, on the N batches
      spill draws (train.h: sample s of batch i starts at
      mix(mix(mix(mix(seed) ^ split) ^ i) ^ s) mod (tokens - T); split 0 train,
      1 val) from the llm.c shards of SHARDS; prints the mean over the batches
      of each batch's mean cross-entropy of the logits against the next tokens
      (the loss spill eval and spill train print)
Exits 77 when torch, numpy or transformers is missing.
"""
import glob
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # pragma: no cover
    print("SKIP: no torch/numpy/transformers: %s" % e)
    sys.exit(77)

M64 = (1 << 64) - 1


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def read_tokens(d, split):
    toks = []
    for p in sorted(glob.glob(os.path.join(d, "*.bin"))):
        if split not in os.path.basename(p):
            continue
        h = np.fromfile(p, dtype="<i4", count=256)
        assert h[0] == 20240520 and h[1] == 1, p
        toks.append(np.fromfile(p, dtype="<u2", offset=1024)[: h[2]])
    return np.concatenate(toks).astype(np.int64)


def make(d, seed):
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, n_positions=64, vocab_size=256)
    GPT2LMHeadModel(cfg).save_pretrained(d, safe_serialization=True)


def loss(d, shards, split, seed, batch, T, n):
    torch.set_num_threads(1)
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    tokens = read_tokens(shards, "val" if split == 1 else "train")
    starts = len(tokens) - T
    total = 0.0
    with torch.no_grad():
        for i in range(n):
            h0 = mix(mix(mix(seed) ^ split) ^ i)
            pos = [mix(h0 ^ s) % starts for s in range(batch)]
            x = torch.tensor(np.stack([tokens[p:p + T] for p in pos]))
            y = torch.tensor(np.stack([tokens[p + 1:p + T + 1] for p in pos]))
            logits = model(x).logits
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    print("%.9g" % (total / n))


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        d, shards = sys.argv[2], sys.argv[3]
        split, seed, batch, T, n = (int(x) for x in sys.argv[4:9])
        loss(d, shards, split, seed, batch, T, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
