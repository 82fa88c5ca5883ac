#!/usr/bin/python3
"""tests/train/torch_train.py — a PyTorch (CPU, fp32) GPT-2 trained from a spill
checkpoint on the batches spill draws, for tests/train/test_torch_train.sh.

Usage: torch_train.py CKPT SHARD_DIR STEPS [TOTAL WARMUP SCHEDULE LR_MIN CLIP WD].
The optional recipe is spill train's: TOTAL steps in the run, WARMUP steps
of linear warmup, then SCHEDULE (cosine, linear, constant) down to LR_MIN x
lr, gradients clipped to the global norm CLIP (0: none;
torch.nn.utils.clip_grad_norm_), AdamW weight decay WD on the matrices and
embeddings (spill's groups). Without it: constant lr, no clipping, no decay.
Reads the spill checkpoint (only
json and numpy: the safetensors header, llm.c's tensor names and shapes, the
AdamW moments adam_m.* / adam_v.*, the step and config in __metadata__), the
llm.c token shards of SHARD_DIR (train shards, header int 3 = vocab), and runs
STEPS training steps from the checkpoint's step on with torch.optim.AdamW
loaded with spill's moments, each step's batch drawn as train.h says (sample s
of step i starts at mix(mix(mix(mix(seed) ^ 0) ^ i) ^ s) mod (tokens - T)).
Prints one loss per line. Exits 77 when torch or numpy is missing.
"""
import glob
import json
import math
import os
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print("SKIP: no torch/numpy: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels"))
from torch_ref import block_forward  # noqa: E402 (the kernels' reference block)

M64 = (1 << 64) - 1
BLOCK = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb"]


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def read_ckpt(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", name
        b, e = t["data_offsets"]
        tensors[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"]).copy()
    return tensors, meta


def read_train_tokens(d):
    toks = []
    for p in sorted(glob.glob(os.path.join(d, "*.bin"))):
        if "train" not in os.path.basename(p):
            continue
        h = np.fromfile(p, dtype="<i4", count=256)
        assert h[0] == 20240520 and h[1] == 1, p
        toks.append(np.fromfile(p, dtype="<u2", offset=1024)[: h[2]])
    return np.concatenate(toks).astype(np.int64)


def lr_at(step, lr, total, warmup, sched, lr_min):
    """train.c's tr_lr_at."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if sched == "constant" or total <= warmup + 1:
        return lr
    frac = min(1.0, (step - warmup) / (total - warmup - 1))
    lo = lr * lr_min
    if sched == "linear":
        return lr - frac * (lr - lo)
    return lo + 0.5 * (1 + math.cos(math.pi * frac)) * (lr - lo)


def main():
    ckpt, shards, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    recipe = sys.argv[4:10]
    torch.set_num_threads(1)
    t, meta = read_ckpt(ckpt)
    cfg = json.loads(meta["config"])
    L, C, NH, V, T, B = (cfg[k] for k in ("layers", "channels", "heads", "vocab", "seq", "batch"))
    seed, lr, step0 = cfg["seed"], cfg["lr"], int(meta["step"])
    names = ["wte", "wpe"] + ["h.%d.%s" % (l, b) for l in range(L) for b in BLOCK] + ["lnfw", "lnfb"]
    params = [torch.tensor(t[n], requires_grad=True) for n in names]
    total, warmup, sched, lr_min, clip, wd = steps + step0, 0, "constant", 1.0, 0.0, 0.0
    if recipe:
        total, warmup, sched = int(recipe[0]), int(recipe[1]), recipe[2]
        lr_min, clip, wd = float(recipe[3]), float(recipe[4]), float(recipe[5])
    decayed = lambda n: n in ("wte", "wpe") or n.split(".")[-1] in ("qkvw", "attprojw", "fcw", "fcprojw")
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in zip(names, params) if decayed(n)], "weight_decay": wd},
         {"params": [p for n, p in zip(names, params) if not decayed(n)], "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8)
    for n, p in zip(names, params):  # spill's moments and step count
        opt.state[p] = {"step": torch.tensor(float(step0)),
                        "exp_avg": torch.tensor(t["adam_m." + n]),
                        "exp_avg_sq": torch.tensor(t["adam_v." + n])}
    tokens = read_train_tokens(shards)
    starts = len(tokens) - T
    for i in range(step0, step0 + steps):
        h0 = mix(mix(mix(seed) ^ 0) ^ i)
        pos = [mix(h0 ^ s) % starts for s in range(B)]
        x = torch.tensor(np.stack([tokens[p:p + T] for p in pos]))
        y = torch.tensor(np.stack([tokens[p + 1:p + T + 1] for p in pos]))
        opt.zero_grad()
        wte, wpe = params[0], params[1]
        h = wte[x] + wpe[:T]
        for l in range(L):
            h = block_forward(h, params[2 + 12 * l: 14 + 12 * l], NH)
        h = F.layer_norm(h, (C,), params[-2], params[-1], eps=1e-5)
        loss = F.cross_entropy((h @ wte.t()).view(-1, V), y.view(-1))
        loss.backward()
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
            print("step %d: gradient norm %.4f%s" % (i + 1, norm, " (clipped)" if norm > clip else ""), file=sys.stderr)
        for g in opt.param_groups:
            g["lr"] = lr_at(i, lr, total, warmup, sched, lr_min)
        opt.step()
        print("%.9g" % loss.item())
    return 0


if __name__ == "__main__":
    sys.exit(main())
