# `spill train --precision bf16` against `--precision fp32` on the default
# corpus (Debian's bible-kjv, the demo's), the tiny model under the same plan
# (gpipe, 3 packs, microbatch 4, 2 emulated devices, update on the CPU, a
# fixed budget, no tuner, seed BF16_SEED: default the trainer's, 1337),
# BF16_STEPS steps (default 60; bench/bf16_compare.sh runs 200). Until the
# trainer warmed up, decayed and clipped (2026-11-27), the default seed's bf16
# run met a batch at step 20 on which its loss spiked and lagged fp32 by ~7%
# at 200 steps, so this test ran seed 2; with the recipe the 200-step runs end
# within 0.10% (final loss 2.2376 fp32, 2.2399 bf16; validation -0.01%):
#  - the final loss (the mean of the last 10 steps' losses: single batches of
#    this corpus spike by up to 2 nats in either precision) and the validation
#    loss at the end are within 2% of fp32's;
#  - the weight bytes over the host link (H2D) are exactly half of fp32's,
#    measured and predicted by the taskgraph (the update on the CPU keeps the
#    fp32 masters and the optimizer state in host memory: only bf16 W goes down);
#  - `spill sim --precision bf16` predicts the halved weights for GPT-2 too.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pick_python.sh"
pick_python json || { echo "SKIP: no python3"; exit 77; }
command -v bible >/dev/null || { echo "SKIP: no bible (the default corpus)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SPILL_THREADS=1
steps=${BF16_STEPS:-60}
plan=(--seed "${BF16_SEED:-1337}" --schedule gpipe --packs 3 --microbatch 4 --update-on-cpu --budget 64M --no-tune
	--steps "$steps" --eval-every "$steps" --eval-batches 8)
for p in fp32 bf16; do
	"$spill" train "${plan[@]}" --precision "$p" --stats-json "$work/$p.json" >"$work/$p.out" 2>&1 ||
		{ cat "$work/$p.out"; echo "FAIL: spill train --precision $p"; exit 1; }
	grep -A 3 "swap volume per step" "$work/$p.out"
done
grep -q "bf16 mixed precision" "$work/bf16.out" || { echo "FAIL: no bf16 in the banner"; exit 1; }
for p in fp32 bf16; do
	"$spill" sim --precision "$p" --steps 2 --schedule harmony-pp --packs 7 --microbatch 2 \
		--update-on-cpu --stats-json "$work/sim_$p.json" >"$work/sim_$p.out" 2>&1 ||
		{ cat "$work/sim_$p.out"; echo "FAIL: spill sim --precision $p"; exit 1; }
done
"$py" - "$work" "$steps" <<'PY'
import json, sys
w, steps = sys.argv[1], int(sys.argv[2])
f, b = (json.load(open("%s/%s.json" % (w, p))) for p in ("fp32", "bf16"))
assert f["plan"] == b["plan"], (f["plan"], b["plan"])
assert len(f["losses"]) == len(b["losses"]) == steps
mf, mb = (sum(r["losses"][-10:]) / 10 for r in (f, b))
print("%d steps, plan %s" % (steps, f["plan"]))
print("final loss (mean of the last 10 steps): fp32 %.4f, bf16 %.4f (%+.2f%%)"
      % (mf, mb, 100 * (mb - mf) / mf))
print("last step's loss: fp32 %.4f, bf16 %.4f" % (f["last_loss"], b["last_loss"]))
print("validation loss: fp32 %.4f, bf16 %.4f (%+.2f%%)"
      % (f["last_eval"], b["last_eval"], 100 * (b["last_eval"] - f["last_eval"]) / f["last_eval"]))
wf, wb = f["measured"]["h2d"]["weight"], b["measured"]["h2d"]["weight"]
pf, pb = f["predicted"]["h2d"]["weight"], b["predicted"]["h2d"]["weight"]
print("weight bytes over the host link per step: fp32 %.0f, bf16 %.0f (predicted %.0f, %.0f)"
      % (wf, wb, pf, pb))
assert mf < f["losses"][0] - 1 and mb < b["losses"][0] - 1, "the loss did not fall"
assert abs(mb - mf) < 0.02 * mf, "bf16's final loss is not within 2% of fp32's"
assert abs(b["last_eval"] - f["last_eval"]) < 0.02 * f["last_eval"], "validation loss"
half = lambda a, b: a > 0 and abs(2 * b - a) <= 1e-9 * a  # per-step means: floats
assert half(wf, wb) and half(pf, pb), "weights over the host link not halved"
sf, sb = (json.load(open("%s/sim_%s.json" % (w, p))) for p in ("fp32", "bf16"))
s1, s2 = sf["predicted"]["h2d"]["weight"], sb["predicted"]["h2d"]["weight"]
print("spill sim GPT-2 (%s): weights over the host link fp32 %.0f, bf16 %.0f" % (sf["plan"], s1, s2))
assert half(s1, s2) and half(sf["measured"]["h2d"]["weight"], sb["measured"]["h2d"]["weight"])
PY
