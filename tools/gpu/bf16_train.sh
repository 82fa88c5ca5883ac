#!/usr/bin/env bash
# tools/gpu/bf16_train.sh — issue 30's training checks on a GPU (check.sh step
# bf16train): (1) spill train --precision bf16 on cuda against the same run on
# the host backend (CPU bf16 kernels), 20 steps, one device, the same plan and
# seed: per-step losses within 5e-3 relative (the two differ in summation order
# and where bf16 rounds; 5e-3 is the PyTorch comparison's tolerance); (2)
# tokens/s of GPT-2 (124M) in bf16 against fp32 on cuda with the same plan.
# Prints a summary; exit 1 when (1) fails. O: the build (build/release).
set -u
O=${O:-build/release}
spill="$O/bin/spill"
work=$(mktemp -d)
small=(--precision bf16 --layers 2 --channels 64 --heads 4 --seq 32 --batch 8 --steps 20
	--no-tune --schedule dp-swap --microbatch 8 --devices 1 --seed 2)
"$spill" train "${small[@]}" --backend host --stats-json "$work/h.json" >"$work/h.out" 2>&1 ||
	{ tail -5 "$work/h.out"; echo "bf16train: host run failed"; exit 1; }
"$spill" train "${small[@]}" --backend cuda --stats-json "$work/c.json" >"$work/c.out" 2>&1 ||
	{ tail -5 "$work/c.out"; echo "bf16train: cuda run failed"; exit 1; }
python3 - "$work/h.json" "$work/c.json" <<'PY' || exit 1
import json, sys
h, c = (json.load(open(p))["losses"] for p in sys.argv[1:3])
worst = max(abs(a - b) / abs(a) for a, b in zip(h, c))
print("bf16 losses, cpu:", " ".join("%.4f" % x for x in h[:5]), "...", "%.4f" % h[-1])
print("bf16 losses, gpu:", " ".join("%.4f" % x for x in c[:5]), "...", "%.4f" % c[-1])
print("worst relative loss difference over %d steps: %.3g (tolerance 5e-3)" % (len(h), worst))
sys.exit(0 if worst <= 5e-3 and len(h) == len(c) == 20 else 1)
PY
rc=$?
for p in fp32 bf16; do
	"$spill" train --backend cuda --model gpt2 --precision $p --steps 20 --no-tune \
		--schedule harmony-pp --microbatch 4 --group 4 --devices 1 \
		--stats-json "$work/$p.json" >"$work/$p.out" 2>&1 || { tail -3 "$work/$p.out"; rc=1; }
done
python3 - "$work/fp32.json" "$work/bf16.json" <<'PY'
import json, sys
f, b = (json.load(open(p)) for p in sys.argv[1:3])
print("GPT-2 124M on cuda, %s: fp32 %.0f tokens/s, bf16 %.0f tokens/s (%.2fx)" %
      (f["plan"], f["tokens_per_s"], b["tokens_per_s"], b["tokens_per_s"] / f["tokens_per_s"]))
PY
exit $rc
