"""tests/shim/torch_gpt_shim.py — a PyTorch training loop of GPT-2-small shape
on random tokens, for the preload shim's GPU test (test_gpu_shim.sh).

Prints one line per step, "step I loss X" (deterministic algorithms, fixed
seeds: the same losses with and without the shim), then "peak BYTES" (the
caching allocator's peak reservation) and "seconds S" (the timed steps after
the first). Exits 77 when PyTorch or a CUDA device is missing.
usage: torch_gpt_shim.py [--steps N] [--batch B] [--seq T] [--layers L]"""
import argparse
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no PyTorch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: PyTorch sees no CUDA device")
    sys.exit(77)


class Block(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.nh = nh

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.nh, c // self.nh).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (c // self.nh) ** 0.5
        mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq, layers, c, nh):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, nh) for _ in range(layers))
        self.ln = nn.LayerNorm(c)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.ln(x) @ self.wte.weight.t()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--layers", type=int, default=12)
    a = ap.parse_args()
    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    vocab = 50257
    model = GPT(vocab, a.seq, a.layers, 768, 12).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
    g = torch.Generator().manual_seed(99)
    data = torch.randint(0, vocab, (a.steps, a.batch, a.seq + 1), generator=g)
    t0 = None
    for s in range(a.steps):
        if s == 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        xy = data[s].to(dev)
        logits = model(xy[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {s} loss {loss.item():.6f}", flush=True)
    torch.cuda.synchronize()
    print(f"peak {torch.cuda.max_memory_reserved()}")
    print(f"seconds {time.perf_counter() - t0:.4f}")


if __name__ == "__main__":
    main()
