#!/usr/bin/python3
"""bench/cpu_step_torch.py — the PyTorch side of bench/cpu_step.c: one fp32 GPT-2
training step (forward, backward, torch.optim.AdamW) on the CPU at one thread.

Usage: cpu_step_torch.py B T C NH V L. Builds the model spill's bench times (the
same shapes, tied LM head, pre-LN blocks from tests/kernels/torch_ref.py with GELU
approximate='tanh', AdamW weight decay 0.1 on the matrices and embeddings, eps
1e-8), prints "ready", then answers each line "N" on stdin with "torch_s S P": the
seconds N more steps took, wall clock (S) and process CPU time (P). Prints "skip <why>" and exits 0 without torch.
"""
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print("skip no torch (%s)" % e, flush=True)
    sys.exit(0)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "kernels"))
from torch_ref import block_forward, block_shapes  # noqa: E402


def main():
    B, T, C, NH, V, L = (int(v) for v in sys.argv[1:7])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    shapes = [(V, C), (T, C)]
    for _ in range(L):
        shapes += block_shapes(C)
    shapes += [(C,), (C,)]
    params = []
    for s in shapes:
        p = torch.randn(s) * 0.02 if len(s) == 2 else torch.zeros(s)
        params.append(p.requires_grad_(True))
    for l in range(L):  # layernorm weights at 1
        params[2 + 12 * l].data.fill_(1)
        params[2 + 12 * l + 6].data.fill_(1)
    params[-2].data.fill_(1)
    decay = [p for p in params if p.dim() == 2]
    no_decay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (B, T), generator=g)
    y = torch.randint(0, V, (B, T), generator=g)

    def step():
        opt.zero_grad()
        wte, wpe = params[0], params[1]
        h = wte[x] + wpe[:T]
        for l in range(L):
            h = block_forward(h, params[2 + 12 * l: 14 + 12 * l], NH)
        h = F.layer_norm(h, (C,), params[-2], params[-1], eps=1e-5)
        loss = F.cross_entropy((h @ wte.t()).view(-1, V), y.view(-1))
        loss.backward()
        opt.step()

    step()  # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            step()
        print("torch_s %.9f %.9f" % (time.perf_counter() - t0, time.process_time() - c0),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
