# `spill tune` end to end: many models trained together under SHARP.
#  - host backend, default corpus, a 2x2 grid of tiny GPTs with a device budget
#    below one model's state: a progress table, every model done, a ranking of
#    all four by validation loss, the loss falls;
#  - successive halving stops at least one model of four (and ranks it too);
#  - a device killed mid-run (SPILL_HOST_FAIL) with --recover: every model
#    finishes with the same ranking and losses as without the fault; without
#    --recover: one line naming the device, exit 1;
#  - --sim with two presets on the model backend: a virtual makespan;
#  - bad input: an empty or malformed grid, an unknown policy or preset, a budget
#    below one layer (the message names the layer and the shortfall), a fault
#    asked of a backend that cannot inject it: one line on stderr, exit 1.
# The host backend throughout, also where a GPU would be the default.
set -u
spill="$O/bin/spill"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1 SPILL_BACKEND=host
command -v bible >/dev/null 2>&1 || { echo "SKIP: no bible-kjv (make deps)"; exit 77; }

"$spill" tune --steps 6 --seq 32 --grid lr=3e-3,1e-3 batch=4,8 >"$work/out" 2>&1 ||
	fail "tune: $(tail -3 "$work/out")"
cat "$work/out" | grep -v '^\[' | sed 's/^/    /'
grep -q 'spill tune: 4 models on 2 host' "$work/out" || fail "no banner"
[ "$(grep -c ' 6/6 .*done' "$work/out")" -eq 4 ] || fail "not every model did its 6 steps"
[ "$(grep -cE '^ +[1-4]\. tiny lr=' "$work/out")" -eq 4 ] || fail "no ranking of 4 models"
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
bad "is not KEY=V1" --grid lr=
bad "unknown key 'foo'" --grid foo=1
bad 'not a positive number' --grid lr=abc
bad 'not a positive integer' --grid batch=1.5
bad "policy 'bogus'" --policy bogus
bad "unknown model 'nope'" --model nope
bad 'layer 0 (embedding) needs .*short by' --budget 4K
SPILL_HOST_FAIL=5:1 bad "SPILL_HOST_FAIL: '5:1' is not DEV:N"
SPILL_HOST_FAIL=1:200 bad 'SPILL_HOST_FAIL: fault injection needs the host backend (this is model)' \
	--backend model
[ "$fails" -eq 0 ] || exit 1
echo ok
