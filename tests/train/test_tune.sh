# `spill tune` end to end: many models trained together under SHARP.
#  - host backend, default corpus, a 2x2 grid of tiny GPTs with a device budget
#    below one model's state: a progress table, every model done, a ranking of
#    all four by validation loss, the loss falls; --save-best writes the first
#    one's checkpoint, which spill eval scores as the ranking did;
#  - successive halving stops at least one model of four (and ranks it too);
#  - a device killed mid-run (SPILL_HOST_FAIL) with --recover: every model
#    finishes with the same ranking and losses as without the fault; without
#    --recover: one line naming the device, exit 1;
#  - device 0 lost, during training or the validation pass after it, with
#    --recover: the same ranking (without: one line naming it);
#  - --lr alone fixes the default grid's lr; the banner's largest model;
#  - --sim with two presets on the model backend: a virtual makespan;
#  - bad input: an empty or malformed grid, an unknown policy or preset, a budget
#    below one layer (the message names the layer and the shortfall), a fault
#    asked of a backend that cannot inject it, out-of-range numbers, grids too
#    large for an int or longer than 1 KiB, more than 16 presets, an unknown
#    flag at the end: one line on stderr, non-zero exit.
# The host backend throughout, also where a GPU would be the default.
set -u
spill="$O/bin/spill"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1 SPILL_BACKEND=host
command -v bible >/dev/null 2>&1 || { echo "SKIP: no bible-kjv (make deps)"; exit 77; }

"$spill" tune --steps 6 --seq 32 --grid lr=3e-3,1e-3 batch=4,8 --save-best "$work/best" \
	>"$work/out" 2>&1 || fail "tune: $(tail -3 "$work/out")"
cat "$work/out" | grep -v '^\[' | sed 's/^/    /'
grep -q 'spill tune: 4 models on 2 host' "$work/out" || fail "no banner"
[ "$(grep -c ' 6/6 .*done' "$work/out")" -eq 4 ] || fail "not every model did its 6 steps"
[ "$(grep -cE '^ +[1-4]\. tiny lr=' "$work/out")" -eq 4 ] || fail "no ranking of 4 models"
# --save-best: the first-ranked model's checkpoint, whose validation loss
# spill eval gives back to the last digit the ranking printed
best=$(sed -n 's/^ *1\. .* \([0-9.]*\)$/\1/p' "$work/out")
ck=$(ls "$work"/best/step_*.safetensors 2>/dev/null)
[ -n "$ck" ] || fail "--save-best wrote no checkpoint"
ev=$("$spill" eval "$ck" 2>&1 | sed -n 's/.*validation loss \([0-9.]*\) .*/\1/p')
[ -n "$best" ] && [ "$ev" = "$best" ] || fail "--save-best: eval gives '$ev', the ranking '$best'"
SPILL_HOST_FAIL=1:200 "$spill" tune --recover --steps 6 --seq 32 --grid lr=3e-3,1e-3 batch=4,8 \
	>"$work/rec" 2>&1 || fail "recover: $(tail -3 "$work/rec")"
grep -q 'recovered from 1 failed device' "$work/rec" || fail "recover: no failure recovered"
grep -E '^ +[1-4]\. ' "$work/out" >"$work/rank0"
grep -E '^ +[1-4]\. ' "$work/rec" >"$work/rank1"
cmp -s "$work/rank0" "$work/rank1" || fail "recover: ranking differs: $(cat "$work/rank1")"
if SPILL_HOST_FAIL=1:200 "$spill" tune --steps 6 --seq 32 --grid lr=3e-3 batch=4,8 \
	>"$work/nr" 2>"$work/nre"; then
	fail "a failed device without --recover succeeded"
fi
grep -v ' WARN ' "$work/nre" >"$work/nre1"
[ "$(wc -l <"$work/nre1")" -eq 1 ] && grep -q 'device 1 failed' "$work/nre1" ||
	fail "no recovery: wanted one line naming device 1, got: $(cat "$work/nre")"
# device 0 lost: training and the validation pass after it (on device 0 while
# it lives) go on on device 1. Faults from the first kernel to past the end
# of training: every run ranks as without one, and one of them at least fails
# during the validation pass (recovered there from the state training left)
A=(--layers 2 --channels 32 --heads 2 --seq 16 --steps 5 --grid lr=3e-3,1e-3 batch=4,8 --seed 7)
"$spill" tune "${A[@]}" >"$work/a0" 2>&1 || fail "small grid: $(tail -3 "$work/a0")"
grep -E '^ +[1-4]\. ' "$work/a0" >"$work/ra0"
in_val=0
for n in 1 300 900 1000 1100 1200 1300 1400; do
	SPILL_HOST_FAIL=0:$n "$spill" tune "${A[@]}" --recover >"$work/a1" 2>&1 ||
		fail "device 0 at kernel $n: $(grep -v ' WARN ' "$work/a1" | tail -2)"
	grep -E '^ +[1-4]\. ' "$work/a1" | cmp -s - "$work/ra0" ||
		fail "device 0 at kernel $n: ranking differs: $(grep -E '^ +[1-4]\. ' "$work/a1")"
	grep -q 'failed during the validation pass: it ran again' "$work/a1" && in_val=$((in_val + 1))
done
[ "$in_val" -gt 0 ] || fail "no fault hit the validation pass (kernel counts moved? pick others)"
for n in 1100 1200 1300 1400; do # without --recover: one line naming the device
	if SPILL_HOST_FAIL=0:$n "$spill" tune "${A[@]}" >"$work/a2" 2>"$work/a2e"; then
		continue # (this fault hit nothing)
	fi
	grep -v ' WARN ' "$work/a2e" >"$work/a2e1"
	[ "$(wc -l <"$work/a2e1")" -eq 1 ] && grep -q 'device 0 failed' "$work/a2e1" ||
		fail "device 0 at kernel $n, no --recover: wanted one line naming it, got: $(cat "$work/a2e")"
done

# --lr (or --batch) without --grid fixes that axis of the default grid
"$spill" tune --layers 2 --channels 32 --heads 2 --seq 16 --steps 1 --lr 1e-2 >"$work/l" 2>&1 ||
	fail "--lr alone: $(tail -2 "$work/l")"
[ "$(grep -cE '^ +[12]\. tiny batch=(8|16) ' "$work/l")" -eq 2 ] ||
	fail "--lr alone: wanted the two batch sizes, got: $(grep -E '^ +[0-9]+\. ' "$work/l")"
# the banner names the largest model, whatever the grid's order
l1=$("$spill" tune --sim --model tiny --grid batch=4,8 --steps 1 | sed -n 's/.*largest model.s state: \([^)]*\).*/\1/p')
l2=$("$spill" tune --sim --model tiny --grid batch=8,4 --steps 1 | sed -n 's/.*largest model.s state: \([^)]*\).*/\1/p')
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "largest model's state: '$l1' against '$l2'"

budget=$(sed -n 's/.*device(s), \([0-9.]*\) MiB budget each (the largest model.s state: \([0-9.]*\) MiB.*/\1 \2/p' "$work/out")
awk -v b="$budget" 'BEGIN { split(b, x, " "); exit !(x[1] > 0 && x[1] < x[2]) }' ||
	fail "budget per device not below one model's state: '$budget'"

"$spill" tune --steps 4 --seq 32 --halving 2 --grid lr=3e-3,1e-3,3e-4,1e-4 >"$work/h" 2>&1 ||
	fail "halving: $(tail -3 "$work/h")"
grep -q 'stopped (successive halving)' "$work/h" || fail "successive halving stopped nothing"
[ "$(grep -cE '^ +[1-4]\. ' "$work/h")" -eq 4 ] || fail "halving: ranking incomplete"

"$spill" tune --sim --model gpt2,gpt2-medium --grid batch=8 --steps 2 --devices 4 >"$work/s" 2>&1 ||
	fail "sim: $(tail -3 "$work/s")"
grep -q 'makespan .* s (virtual)' "$work/s" || fail "sim: no makespan"

# bf16 mixed precision: every model of the grid trains in it under SHARP, and the
# ranking differs from fp32's in the last digits (the precision really changed)
"$spill" tune --precision bf16 --steps 4 --seq 32 --grid lr=3e-3,1e-3 >"$work/b16" 2>&1 ||
	fail "tune --precision bf16: $(tail -3 "$work/b16")"
"$spill" tune --steps 4 --seq 32 --grid lr=3e-3,1e-3 >"$work/f32" 2>&1 || fail "tune fp32"
grep -A2 '^ranking' "$work/b16"
[ "$(grep -c '^ *[12]\. tiny' "$work/b16")" -eq 2 ] || fail "bf16: no ranking of 2 models"
cmp -s <(grep '^ *[12]\. tiny' "$work/b16") <(grep '^ *[12]\. tiny' "$work/f32") &&
	fail "bf16 and fp32 rank with the same losses"

bad() {
	local want="$1"
	shift
	if "$spill" tune --steps 1 "$@" >"$work/o" 2>"$work/e"; then
		fail "tune $* succeeded"
	elif [ "$(wc -l <"$work/e")" -ne 1 ] || ! grep -q "$want" "$work/e"; then
		fail "tune $*: wanted one line with '$want', got: $(cat "$work/e")"
	fi
}
bad 'grid: empty' --grid
bad '\-\-precision fp16: wants fp32 or bf16' --precision fp16
bad "is not KEY=V1" --grid lr=
bad "unknown key 'foo'" --grid foo=1
bad 'not a positive number' --grid lr=abc
bad 'not a positive integer' --grid batch=1.5
bad "policy 'bogus'" --policy bogus
bad "unknown model 'nope'" --model nope
bad 'layer 0 (embedding) needs .*short by' --budget 64K
SPILL_HOST_FAIL=5:1 bad "SPILL_HOST_FAIL: '5:1' is not DEV:N"
SPILL_HOST_FAIL=1:200 bad 'SPILL_HOST_FAIL: fault injection needs the host backend (this is model)' \
	--backend model
bad '\-\-lr nan: wants a positive number' --lr nan
bad '\-\-lr 0: wants a positive number' --lr 0
bad '\-\-seed 1.5: wants an integer' --seed 1.5
bad '\-\-reserve -0.1: wants a fraction' --reserve -0.1
bad 'give at least 1 to \-\-steps' --steps 0
bad 'give at least 1 to \-\-batch' --batch 0
bad '\-\-lr 1e-50: wants a positive number' --lr 1e-50 # 0 as a float
bad '\-\-momentum 1: wants a fraction' --momentum 1
bad 'lr=1e39 is not a positive number' --grid lr=1e39
bad 'unknown flag \-\-bogus' --bogus
v=$(printf '1,%.0s' $(seq 63))1 # 64^6 models: more than an int holds
bad 'give 68719476736 models; at most 64' --grid lr=$v batch=$v seq=$v layers=$v channels=$v heads=$v
lrs=$(seq -f '%.20fe-9' 1 60 | paste -sd,) # 1700 characters: the bad value at the end still read
bad 'lr=abc is not a positive number' --grid "lr=$lrs,abc"
t17=$(printf 'tiny,%.0s' $(seq 17))
bad 'give 68 models; at most 64' --model "${t17%,}" --grid lr=1e-3,2e-3,3e-3,4e-3
bad "unknown model 'nope'" --lr 1e-3 --batch 8 --model "${t17}nope"
bad '0% reserve leaves' --layers 2 --channels 32 --heads 2 --seq 16 --grid batch=8 --budget 900K --reserve 0
[ "$fails" -eq 0 ] || exit 1
echo ok
