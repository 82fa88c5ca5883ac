# The smallest device budget an error names is one the plan runs in: for
# several schedules on 2 emulated GPUs, a budget too small fails with "the
# smallest device budget this plan can run in is about X" (the executor) or
# "... it packs into is about X" (the planner), and a budget of X (plus the
# 0.01 MiB the message rounds away) runs. The estimate
# once summed the objects' bytes, not what the device pools hold (aligned, in
# size classes): interleaved was told 1.79 MiB and failed at 2 MiB.
set -u
spill="$O/bin/spill"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1
command -v bible >/dev/null 2>&1 || { echo "SKIP: no bible-kjv (make deps)"; exit 77; }
base=(train --layers 2 --channels 64 --heads 4 --seq 32 --batch 4 --backend host --devices 2
	--no-tune --steps 1)
for plan in "interleaved --chunks 2" "gpipe" "1f1b" "harmony-pp" "dp-swap" "harmony-dp --microbatch 1"; do
	# shellcheck disable=SC2086
	"$spill" "${base[@]}" --schedule $plan --budget 256K >"$work/small" 2>&1 &&
		{ fail "$plan: ran in 256K"; continue; }
	min=$(sed -n 's/.*smallest device budget \(this plan can run in\|it packs into\) is about \([0-9.]*\) \([KM]\)iB.*/\2 \3/p' \
		"$work/small" | head -1)
	[ -n "$min" ] || { fail "$plan: no smallest budget in: $(cat "$work/small")"; continue; }
	k=$(echo "$min" | awk '{ v = $1 * ($2 == "M" ? 1024 : 1); printf "%d", v + 11 }')
	# shellcheck disable=SC2086
	if "$spill" "${base[@]}" --schedule $plan --budget "${k}K" >"$work/run" 2>&1; then
		echo "$plan: the named minimum $min ran (budget ${k}K)"
	else
		fail "$plan: the named minimum $min (budget ${k}K) did not run: $(grep spill "$work/run" | tail -1)"
	fi
done
[ "$fails" = 0 ] || exit 1
echo ok
