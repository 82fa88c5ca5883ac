#!/usr/bin/python3
"""bench/block_gpu.py — one GPT-2 block forward+backward in PyTorch eager on the
GPU, the baseline for bench/block_gpu.c. Usage: block_gpu.py B T C NH ITERS [fp32|bf16].
Prints "torch_ms <ms per forward+backward>" (CUDA events, after warm-up). The
block is the same math as spill's (pre-LN, causal softmax attention, tanh
GELU): fp32 with TF32 off and explicit attention, or bf16 parameters and
activations with F.scaled_dot_product_attention(is_causal=True) (flash).
Exits 77 without torch or a CUDA device."""
import math
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)


def block(x, p, NH, flash=False):
    B, T, C = x.shape
    hs = C // NH
    h = F.layer_norm(x, (C,), p[0], p[1], eps=1e-5)
    q, k, v = F.linear(h, p[2], p[3]).split(C, dim=2)
    q = q.view(B, T, NH, hs).transpose(1, 2)
    k = k.view(B, T, NH, hs).transpose(1, 2)
    v = v.view(B, T, NH, hs).transpose(1, 2)
    if flash:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = att @ v
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    x2 = x + F.linear(y, p[4], p[5])
    h2 = F.layer_norm(x2, (C,), p[6], p[7], eps=1e-5)
    return x2 + F.linear(F.gelu(F.linear(h2, p[8], p[9]), approximate="tanh"), p[10], p[11])


def main():
    B, T, C, NH, iters = (int(a) for a in sys.argv[1:6])
    bf16 = len(sys.argv) > 6 and sys.argv[6] == "bf16"
    dt = torch.bfloat16 if bf16 else torch.float32
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device for torch")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    shapes = [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,),
              (4 * C, C), (4 * C,), (C, 4 * C), (C,)]
    p = [(torch.randn(s, device=dev) * 0.02).to(dt).requires_grad_() for s in shapes]
    x = torch.randn(B, T, C, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(B, T, C, device=dev, dtype=dt)
    for _ in range(3):
        block(x, p, NH, bf16).backward(dy)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        block(x, p, NH, bf16).backward(dy)
    stop.record()
    torch.cuda.synchronize()
    print("torch_ms %.4f" % (start.elapsed_time(stop) / iters))
    return 0


if __name__ == "__main__":
    sys.exit(main())
