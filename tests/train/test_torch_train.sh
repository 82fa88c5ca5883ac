# `spill train` against PyTorch: a GPT-2 of 2 blocks (C 64, 4 heads, T 32,
# vocab 256) trained under a budget that forces eviction (harmony-pp; on the
# host backend 2 emulated GPUs, on a GPU machine cuda and 1 GPU); from spill's
# step-1 checkpoint, PyTorch (fp32, CPU: Debian's python3-torch here;
# tests/train/torch_train.py) trains 20 steps on the same batches with AdamW
# loaded with spill's moments, and the same recipe: a warmup, then cosine
# decay, gradients clipped by global norm (clip_grad_norm_; torch's
# coefficient is clip / (norm + 1e-6), spill's clip / norm), weight decay on
# the matrices and embeddings. Every step's loss agrees within 1e-4 relative
# (on an H100: 1.41e-07 at worst). Then --precision bf16 from its own step-1
# checkpoint (fp32 masters) against the same fp32 PyTorch: within 5e-3.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pick_python.sh"
pick_python torch numpy || { echo "SKIP: no python3 with torch and numpy"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SPILL_THREADS=1

"$py" - "$work/text.txt" <<'PY'
import random, sys
random.seed(7)
words = "in the beginning god created heaven and earth was without form void".split()
open(sys.argv[1], "w").write("".join(" ".join(random.choice(words) for _ in range(9)) + ".\n"
                                     for _ in range(1500)))
PY
"$spill" prepare "$work/text.txt" -o "$work/data" --name t >/dev/null || exit 1
run=(--layers 2 --channels 64 --heads 4 --seq 32 --batch 4 --data "$work/data" --schedule harmony-pp
	--microbatch 1 --lr 1e-3 --seed 5 --warmup 3 --lr-schedule cosine --lr-min 0.1
	--grad-clip 0.5 --weight-decay 0.1)
recipe=(21 3 cosine 0.1 0.5 0.1)
"$spill" train "${run[@]}" --steps 1 --checkpoint "$work/ck" >/dev/null 2>&1 || { echo "FAIL: step 1"; exit 1; }
"$spill" train "${run[@]}" --steps 21 --stats-json "$work/run.json" >"$work/run.out" 2>&1 ||
	{ cat "$work/run.out"; echo "FAIL: 21 steps"; exit 1; }
"$py" "$here/torch_train.py" "$work/ck/step_00000001.safetensors" "$work/data" 20 "${recipe[@]}" >"$work/torch.txt"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { cat "$work/torch.txt"; echo "FAIL: torch_train.py exit $rc"; exit 1; }
"$py" - "$work/run.json" "$work/torch.txt" <<'PY'
import json, sys
spill = json.load(open(sys.argv[1]))
ref = [float(x) for x in open(sys.argv[2]).read().split()]
d2h = sum(spill["measured"]["d2h"].values())
ours = spill["losses"][1:]
assert len(ours) == len(ref) == 20, (len(ours), len(ref))
worst = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
for k, (a, b) in enumerate(zip(ours, ref)):
    print("step %2d  spill %.7f  torch %.7f  rel %.2e" % (k + 2, a, b, abs(a - b) / abs(b)))
print("plan: %s; %.0f KB written back per step; worst relative difference %.2e"
      % (spill["plan"], d2h / 1e3, worst))
assert d2h > 0, "nothing was evicted"
assert worst < 1e-4, "losses differ by %.2e (tolerance 1e-4)" % worst
assert ours[-1] < ours[0], "the loss did not fall"
PY
[ $? -eq 0 ] || exit 1

# bf16 mixed precision against the same fp32 PyTorch: spill's bf16 step-1
# checkpoint holds fp32 masters and moments, so torch continues the exact
# fp32 trajectory from the same state; spill's bf16 losses may differ by bf16's
# rounding only (8-bit mantissas: 2^-9 relative per stored value in the
# weights, activations and gradients, which the 128 losses a step averages
# shrink). Tolerance 5e-3 relative per step, 10x what was measured on the
# host backend (4.8e-4 at worst over the 20 steps).
"$spill" train "${run[@]}" --precision bf16 --steps 1 --checkpoint "$work/ckb" >/dev/null 2>&1 ||
	{ echo "FAIL: bf16 step 1"; exit 1; }
"$spill" train "${run[@]}" --precision bf16 --steps 21 --stats-json "$work/runb.json" >"$work/runb.out" 2>&1 ||
	{ cat "$work/runb.out"; echo "FAIL: bf16 21 steps"; exit 1; }
"$py" "$here/torch_train.py" "$work/ckb/step_00000001.safetensors" "$work/data" 20 "${recipe[@]}" >"$work/torchb.txt" ||
	{ cat "$work/torchb.txt"; echo "FAIL: torch_train.py on the bf16 checkpoint"; exit 1; }
"$py" - "$work/runb.json" "$work/torchb.txt" <<'PY'
import json, sys
spill = json.load(open(sys.argv[1]))
ref = [float(x) for x in open(sys.argv[2]).read().split()]
ours = spill["losses"][1:]
assert len(ours) == len(ref) == 20, (len(ours), len(ref))
worst = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
for k, (a, b) in enumerate(zip(ours, ref)):
    print("step %2d  spill bf16 %.7f  torch fp32 %.7f  rel %.2e" % (k + 2, a, b, abs(a - b) / abs(b)))
print("bf16: worst relative difference to fp32 PyTorch %.2e (tolerance 5e-3)" % worst)
assert worst < 5e-3, "bf16 losses differ by %.2e (tolerance 5e-3)" % worst
PY
