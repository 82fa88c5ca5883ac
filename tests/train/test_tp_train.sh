#!/usr/bin/env bash
# tests/train/test_tp_train.sh — `spill train --tensor-parallel t` end to end
# on the host backend (issue 34):
#  1 t = 2 (2 stages x 2) and t = 4 (1 stage x 4) under 1f1b, t = 2 under 2bw
#    and interleaved, write byte-identical checkpoints and the same losses
#    (every t computes the blocks' tensor-parallel form), and the checkpoint
#    of t = 2 resumes under t = 4 (a checkpoint is the whole model, llm.c's
#    layout) and continues with the uninterrupted run's losses;
#  2 the loss of the tp form stays within 1e-4 of the plain blocks' (t = 1);
#  3 bad input is one line naming --tensor-parallel: t = 3, t not dividing the
#    devices, heads not a multiple of 4, auto and data-parallel schedules,
#    bf16, clipping, recomputation.
set -u
spill="$O/bin/spill"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1

small=(--backend host --devices 4 --layers 4 --channels 64 --heads 4 --seq 16 --batch 8
	--no-tune --grad-clip 0 --weight-decay 0.1 --microbatch 2 --steps 6)
ck=(--checkpoint-every 3 --keep 4)
run() { # name, flags...: losses into $work/<name>.json, checkpoints into $work/<name>/
	local name=$1
	shift
	mkdir -p "$work/$name"
	"$spill" train "${small[@]}" "${ck[@]}" "$@" --checkpoint "$work/$name" --stats-json "$work/$name.json" \
		>"$work/$name.out" 2>&1 || { tail -5 "$work/$name.out"; fail "run $name ($*)"; }
}
losses() { tr -d '\n ' <"$work/$1.json" | sed -e 's/.*"losses":\[\([^]]*\)\].*/\1/'; }

run t2 --tensor-parallel 2 --schedule 1f1b
run t4 --tensor-parallel 4 --schedule 1f1b
run b2 --tensor-parallel 2 --schedule 2bw --flush-every 1
run i2 --tensor-parallel 2 --schedule interleaved --chunks 2 --budget 1M
run plain --schedule 1f1b
grep -q "2 stages x tensor parallel 2" "$work/t2.out" || fail "t = 2: plan line"
grep -q "1 stage x tensor parallel 4" "$work/t4.out" || fail "t = 4: plan line"
cmp -s "$work/t2/step_00000006.safetensors" "$work/t4/step_00000006.safetensors" ||
	fail "t = 2 and t = 4: final checkpoints differ"
cmp -s "$work/t2/step_00000006.safetensors" "$work/i2/step_00000006.safetensors" ||
	fail "t = 2 1f1b and interleaved: final checkpoints differ"
[ "$(losses t2)" = "$(losses t4)" ] || fail "t = 2 and t = 4: losses differ"
[ "$(losses t2)" = "$(losses i2)" ] || fail "1f1b and interleaved under t = 2: losses differ"
echo "t = 2 and 4 losses: $(losses t2)"
echo "t = 1 (plain)      : $(losses plain)"
awk -v a="$(losses t2)" -v b="$(losses plain)" 'BEGIN { n = split(a, x, ","); split(b, y, ",");
	for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-4) exit 1 } }' ||
	fail "the tp form's losses are not within 1e-4 of the plain blocks'"
# resume t = 2's step-3 checkpoint under t = 4: the same steps 4..6
mkdir -p "$work/r4"
"$spill" train "${small[@]}" "${ck[@]}" --tensor-parallel 4 --schedule 1f1b \
	--resume "$work/t2/step_00000003.safetensors" --checkpoint "$work/r4" \
	--stats-json "$work/r4.json" >"$work/r4.out" 2>&1 || { tail -5 "$work/r4.out"; fail "resume"; }
cmp -s "$work/t2/step_00000006.safetensors" "$work/r4/step_00000006.safetensors" ||
	fail "t = 2 resumed under t = 4: final checkpoint differs"

bad() { # expected words, flags...
	local want=$1
	shift
	"$spill" train "${small[@]}" "$@" >"$work/bad.out" 2>&1 && fail "spill train $* ran"
	[ "$(wc -l <"$work/bad.out")" -le 2 ] || { cat "$work/bad.out"; fail "$*: more than a line"; }
	grep -q -- "--tensor-parallel" "$work/bad.out" && grep -q -- "$want" "$work/bad.out" ||
		{ cat "$work/bad.out"; fail "$*: no line naming --tensor-parallel and '$want'"; }
}
bad "1, 2 or 4" --tensor-parallel 3 --schedule 1f1b
bad "stages x 4" --tensor-parallel 4 --schedule 1f1b --devices 2
bad "multiples of 4" --tensor-parallel 2 --schedule 1f1b --heads 2
bad "pipeline schedule" --tensor-parallel 2
bad "pipeline schedule" --tensor-parallel 2 --schedule dp-swap
bad "fp32" --tensor-parallel 2 --schedule 1f1b --precision bf16
bad "grad-clip 0" --tensor-parallel 2 --schedule 1f1b --grad-clip 1
bad "recompute" --tensor-parallel 2 --schedule 1f1b --recompute

[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
