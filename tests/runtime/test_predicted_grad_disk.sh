#!/bin/bash
# A pipeline case where the executor's measured host<->disk traffic differs
# from tg_sim_swap's prediction in strict order (an adversary's finding, from
# `fuzz_predicted_disk 4000 123`, case 532, shrunk): 1f1b and 2bw on 2
# devices, 3 one-layer packs, 3 microbatches, the device budget at the
# predictor's minimum and a 4 U host pool over the disk tier. The gradients
# go host->disk and back 2 U each way where the prediction says 1 U (with the
# CPU update on 7 layers, case 532 itself: 6 U against 5 U). gpipe's same
# plan agrees. Present before the 2bw merge (760b2f5^1), so not 2bw's own;
# docs/taskgraph.md holds the executor to the prediction in strict order.
set -u
f="$O/tests/runtime/fuzz_predicted_disk"
[ -x "$f" ] || { echo "SKIP: $f is not built"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
spec="dev=2 packs=1,2,3 mb=1 m=3 group=1 cpu=0 recompute=0 keep=000 stash=000 work=000 out=101 y=1 budget=+0 host=4"
for s in gpipe 1f1b 2bw; do
	if "$f" -c "sched=$s $spec" >"$work/$s.out" 2>&1; then
		echo "$s: measured = predicted"
	else
		echo "FAIL: $s: measured != predicted"
		grep differs "$work/$s.out"
		fails=$((fails + 1))
	fi
done
spec7="sched=2bw dev=2 packs=4,6,7 mb=1 m=7 group=1 cpu=1 recompute=0 keep=000 stash=000 work=000 out=101 y=1 budget=+0 host=4"
"$f" -c "$spec7" >"$work/7.out" 2>&1 ||
	{ echo "FAIL: case 532: measured != predicted"; grep differs "$work/7.out"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ]
