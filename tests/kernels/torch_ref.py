#!/usr/bin/python3
"""tests/kernels/torch_ref.py — PyTorch (CPU, fp32) reference for test_torch.c.

Usage: torch_ref.py DIR. Reads DIR/config.txt ("mode B T C NH V maxT L lr beta1
beta2 eps wd steps [optim momentum]", mode = block | model, optim = adamw (the
default) | sgd), DIR/params.bin (fp32, spill's layout:
wte, wpe, per block ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb
fcprojw fcprojb, then lnfw lnfb; block mode: one block's 12 tensors) and the
inputs (block: x.bin, dy.bin; model: tokens.bin, targets.bin, int32). Runs
`steps` iterations of forward, backward, torch.optim.AdamW (or SGD) step
(weight decay on 2-D tensors only) and writes ref_losses.bin (loss of each step), and from
the first step ref_out.bin (block: y; model: per-position losses),
ref_grads.bin (layout order), ref_dx.bin (block), then ref_params.bin after
the last step. Exits 77 when torch is missing.
"""
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print("SKIP: no torch/numpy: %s" % e)
    sys.exit(77)


def block_shapes(C):
    return [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,),
            (4 * C, C), (4 * C,), (C, 4 * C), (C,)]


def block_forward(x, p, NH):
    B, T, C = x.shape
    hs = C // NH
    h = F.layer_norm(x, (C,), p[0], p[1], eps=1e-5)
    qkv = F.linear(h, p[2], p[3])
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    x2 = x + F.linear(y, p[4], p[5])
    h2 = F.layer_norm(x2, (C,), p[6], p[7], eps=1e-5)
    m = F.linear(F.gelu(F.linear(h2, p[8], p[9]), approximate="tanh"), p[10], p[11])
    return x2 + m


def main():
    d = sys.argv[1]
    cfg = open(os.path.join(d, "config.txt")).read().split()
    mode = cfg[0]
    B, T, C, NH, V, maxT, L = (int(v) for v in cfg[1:8])
    lr, beta1, beta2, eps, wd = (float(v) for v in cfg[8:13])
    steps = int(cfg[13])
    optim = cfg[14] if len(cfg) > 14 else "adamw"
    momentum = float(cfg[15]) if len(cfg) > 15 else 0.0
    torch.manual_seed(0)
    torch.set_num_threads(1)
    flat = np.fromfile(os.path.join(d, "params.bin"), dtype=np.float32)

    shapes = []
    if mode == "model":
        shapes += [(V, C), (maxT, C)]
        for _ in range(L):
            shapes += block_shapes(C)
        shapes += [(C,), (C,)]
    else:
        shapes += block_shapes(C)
    params, off = [], 0
    for s in shapes:
        n = int(np.prod(s))
        params.append(torch.tensor(flat[off:off + n].reshape(s), requires_grad=True))
        off += n
    assert off == flat.size, "params.bin has %d floats, layout needs %d" % (flat.size, off)

    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": wd},
              {"params": no_decay, "weight_decay": 0.0}]
    if optim == "sgd":
        opt = torch.optim.SGD(groups, lr=lr, momentum=momentum)
    else:
        opt = torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)

    if mode == "model":
        tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32)
                                  .astype(np.int64).reshape(B, T))
        targets = torch.from_numpy(np.fromfile(os.path.join(d, "targets.bin"),
                                               dtype=np.int32).astype(np.int64).reshape(B, T))
    else:
        x = torch.tensor(np.fromfile(os.path.join(d, "x.bin"), dtype=np.float32)
                         .reshape(B, T, C), requires_grad=True)
        dy = torch.tensor(np.fromfile(os.path.join(d, "dy.bin"), dtype=np.float32)
                          .reshape(B, T, C))

    losses = []
    for step in range(steps):
        opt.zero_grad()
        if mode == "model":
            wte, wpe = params[0], params[1]
            h = wte[tokens] + wpe[:T]
            for l in range(L):
                h = block_forward(h, params[2 + 12 * l: 14 + 12 * l], NH)
            h = F.layer_norm(h, (C,), params[-2], params[-1], eps=1e-5)
            logits = h @ wte.t()
            per_pos = F.cross_entropy(logits.view(-1, V), targets.view(-1), reduction="none")
            loss = per_pos.mean()
            out = per_pos
        else:
            if x.grad is not None:
                x.grad.zero_()
            y = block_forward(x, params, NH)
            loss = (y * dy).sum()
            out = y
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            out.detach().numpy().astype(np.float32).tofile(os.path.join(d, "ref_out.bin"))
            torch.cat([p.grad.reshape(-1) for p in params]).numpy().astype(np.float32) \
                .tofile(os.path.join(d, "ref_grads.bin"))
            if mode != "model":
                x.grad.numpy().astype(np.float32).tofile(os.path.join(d, "ref_dx.bin"))
        opt.step()
    np.array(losses, dtype=np.float32).tofile(os.path.join(d, "ref_losses.bin"))
    torch.cat([p.detach().reshape(-1) for p in params]).numpy().astype(np.float32) \
        .tofile(os.path.join(d, "ref_params.bin"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
