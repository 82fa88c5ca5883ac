#!/usr/bin/env bash
# tools/gpu/shim_modes.sh — issue 35 on a GPU (tools/gpu/check.sh step shim):
# the PyTorch GPT-2 script tests/shim/torch_gpt_shim.py (GPT-2 small, batch 8,
# seq 512, 20 steps) run without the shim (the reference losses and its peak),
# then under spill run with a budget of half that peak in each mode — spill,
# uvm-prefetch, hostmap, uvm — and in spill mode again with
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and backend:cudaMallocAsync
# (run in the order: unlimited, the three spill runs, which must finish, then
# uvm-prefetch, hostmap, uvm, which share what time is left).
# Every run must print the reference's "step I loss X" lines exactly (a run cut
# by its time limit: those it printed). One line per run (mode, budget,
# tokens/s, seconds, losses equal, the shim's report), a target line, and last:
#   shim_vs_uvm=R shim_vs_uvm_prefetch=S shim_vs_unlimited=U   (tokens/s ratios)
# (targets R >= 5, S >= 1.5, U >= 0.5: reported, not enforced). Each run has its
# own time limit inside SHIM_MODES_TOTAL (280 s); a baseline cut by it is given
# as a bound (shim_vs_uvm>=R) from the steps it finished in the time it had.
# Exit 1 on a loss mismatch, a crash, or a spill-mode run that did not finish;
# 77 without a CUDA device or PyTorch with CUDA. Writes SHIM_MODES_JSON
# (bench/results/shim_modes.json; empty: none).
# Knobs: O (build/release), PYTHON (python3), SHIM_MODES_STEPS/BATCH/SEQ,
# SHIM_MODES_TOTAL, SHIM_MODES_LIMIT (the most one run gets, 120 s),
# SHIM_MODES_KILL_AFTER (5 s from the limit's SIGUSR1, which makes the shim
# print its report, to SIGKILL), SHIM_MODES_LOGS (a folder for each run's
# output, stamped with seconds), and SHIM_MODES_PROG, a program run instead of
# the PyTorch script (no device check then): tests/shim/test_shim_modes_logic.sh.
set -u
cd "$(dirname "$0")/../.." || exit 1
O=${O:-build/release}
spill=$O/bin/spill
py=${PYTHON:-python3}
steps=${SHIM_MODES_STEPS:-20} batch=${SHIM_MODES_BATCH:-8} seq=${SHIM_MODES_SEQ:-512}
total=${SHIM_MODES_TOTAL:-280} cap=${SHIM_MODES_LIMIT:-120} kill_after=${SHIM_MODES_KILL_AFTER:-5}
json=${SHIM_MODES_JSON-bench/results/shim_modes.json}
if [ -n "${SHIM_MODES_PROG:-}" ]; then
	prog=("$SHIM_MODES_PROG")
else
	prog=("$py" tests/shim/torch_gpt_shim.py)
fi
prog+=(--steps "$steps" --batch "$batch" --seq "$seq")
tok=$((batch * seq))

if [ ! -x "$spill" ] || [ ! -f "$O/lib/libspill-preload.so" ]; then
	echo "SKIP: the shim is not built ($O)"
	exit 77
fi
if [ -z "${SHIM_MODES_PROG:-}" ]; then
	SPILL_BACKEND=cuda "$spill" devices >/dev/null 2>&1 || { echo "SKIP: no CUDA device"; exit 77; }
	"$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
		{ echo "SKIP: no PyTorch with CUDA ($py)"; exit 77; }
fi
w=$(mktemp -d)
# each run's stamped output is kept in SHIM_MODES_LOGS (check.sh: its logs)
trap 'if [ -n "${SHIM_MODES_LOGS:-}" ]; then mkdir -p "$SHIM_MODES_LOGS" && cp "$w"/*.out "$SHIM_MODES_LOGS"/; fi; rm -rf "$w"' EXIT
t_start=$SECONDS
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# stamp: each line of stdin prefixed with the seconds since stamp started.
stamp() {
	local t0=${EPOCHREALTIME/[.,]/} l d
	while IFS= read -r l; do
		d=$((${EPOCHREALTIME/[.,]/} - t0))
		printf '%d.%06d %s\n' $((d / 1000000)) $((d % 1000000)) "$l"
	done
}

# run NAME LIMIT CMD...: CMD (its stdout and stderr) stamped into $w/NAME.out,
# then "rc N". At LIMIT seconds it gets SIGUSR1 (the shim prints its report
# and goes on; a program without the shim ends), kill_after seconds later SIGKILL.
run() {
	local name=$1 lim=$2
	shift 2
	{
		PYTHONUNBUFFERED=1 timeout -s USR1 -k "$kill_after" "$lim" "$@" 2>&1 </dev/null
		echo "rc $?"
	} 2>&1 | stamp >"$w/$name.out"
}

# limit KIND NRUNS: the time limit of the next run, NRUNS runs (this one
# included) still to come: an equal share of what is left, and a run that
# must finish more if 20 s still stay for each later run; at most cap.
limit() {
	local left=$((total - (SECONDS - t_start))) l
	l=$((left / $2))
	[ "$1" = must ] && [ $((left - 20 * ($2 - 1))) -gt "$l" ] && l=$((left - 20 * ($2 - 1)))
	[ "$l" -gt "$cap" ] && l=$cap
	echo "$l"
}

# examine NAME LIMIT: reads $w/NAME.out into globals: st (ok, timeout or
# crash), nsteps (step lines), secs, tps (tokens/s; a timed-out run's upper
# bound), why (for a timeout, how the bound was made; for a crash, the tail),
# report (the shim's report lines), and the step lines into $w/NAME.loss.
examine() {
	local f=$w/$1.out lim=$2 rc end err
	sed -n 's/^[0-9.]* \(step [0-9][0-9]* loss .*\)$/\1/p' "$f" >"$w/$1.loss"
	nsteps=$(wc -l <"$w/$1.loss")
	rc=$(sed -n 's/^[0-9.]* rc \([0-9]*\)$/\1/p' "$f")
	end=$(sed -n 's/^\([0-9.]*\) rc [0-9]*$/\1/p' "$f")
	secs=$(sed -n 's/^[0-9.]* seconds \([0-9.]*\)$/\1/p' "$f" | tail -1)
	report=$(sed -n 's/^[0-9.]* \(spill shim: .*\)$/\1/p' "$f")
	why="" tps=""
	if [ "${rc:-1}" = 0 ] && [ "$nsteps" -eq "$steps" ] && [ -n "$secs" ]; then
		st=ok
		tps=$(awk -v n="$steps" -v t="$tok" -v s="$secs" 'BEGIN { printf "%.1f", (s > 0 ? (n - 1) * t / s : 0) }')
	elif { [ "${rc:-1}" = 124 ] || [ "${rc:-1}" = 137 ]; } &&
		awk -v e="${end:-0}" -v l="$lim" 'BEGIN { exit !(e >= l - 0.5) }'; then
		st=timeout
		# the steps after the first that ended within the limit: fewer than
		# n+1 steps in (lim - the first step's end) seconds
		read -r tps why < <(awk -v l="$lim" -v t="$tok" '
			$2 == "step" && $1 <= l { if ($3 == 0) t0 = $1; else if (t0 != "") n++ }
			END {
				if (t0 == "") { printf "%.1f step 0 not done in %d s\n", t / l, l; exit }
				d = l - t0 < 0.1 ? 0.1 : l - t0
				printf "%.1f %d steps done in the %.1f s after step 0\n", (n + 1) * t / d, n, d
			}' "$f")
	else
		st=crash
		# its error (the report's tables may follow it), else its last lines
		err=$(grep -v '^[0-9.]* \(step\|rc\|spill shim:\) ' "$f" | cut -d' ' -f2-)
		why=$(echo "$err" | grep -E 'Error|error|refused|Killed|fault|Abort|dumped' | tail -2)
		why="rc ${rc:-?}, $nsteps of $steps steps: $(echo "${why:-$(echo "$err" | tail -3)}" | tr '\n' ' ')"
	fi
}

# same_losses NAME: "yes" (with "(first N of M steps)" for a partial run) or
# "no (step I: X, reference Y)"; a reference step missing from a finished run
# is "no" too.
same_losses() {
	awk -v n="$nsteps" -v m="$steps" -v part="$([ "$st" = ok ] || echo 1)" '
		NR == FNR { ref[FNR] = $0; next }
		$0 != ref[FNR] && !bad { bad = 1; split(ref[FNR], r, " "); printf "no (step %s: %s, reference %s)\n", $2, $4, r[4] }
		END {
			if (bad) exit
			if (n < m && !part) printf "no (%d of %d steps)\n", n, m
			else if (n < m) printf "yes (first %d of %d steps)\n", n, m
			else print "yes"
		}' "$w/ref.loss" "$w/$1.loss"
}

declare -A TPS ST SECS BOUND EQ REP
# measure NAME KIND LABEL CMD...: runs, examines, prints its line, records it.
measure() {
	local name=$1 kind=$2 label=$3 lim eq line
	shift 3
	lim=$(limit "$kind" "$runs_left")
	runs_left=$((runs_left - 1))
	if [ "$lim" -lt 10 ] && [ "$lim" -lt "$cap" ]; then
		echo "mode $label  not run: ${lim}s of SHIM_MODES_TOTAL left"
		[ "$kind" = must ] && fail "$label: not run (no time left)"
		ST[$name]=skipped
		return
	fi
	run "$name" "$lim" "$@"
	examine "$name" "$lim"
	eq=$(same_losses "$name")
	ST[$name]=$st TPS[$name]=$tps SECS[$name]=$secs EQ[$name]=$eq REP[$name]=$report BOUND[$name]=""
	case $st in
	ok) line="tokens/s $tps  seconds $secs" ;;
	timeout)
		BOUND[$name]=1
		line="tokens/s <=$tps  seconds >$(awk -v n="$steps" -v t="$tok" -v r="$tps" 'BEGIN { printf "%.1f", (n - 1) * t / r }') (cut at its ${lim}s limit; a bound: $why)" ;;
	crash) line="crashed ($why)" ;;
	esac
	printf 'mode %-32s budget %-7s %s  losses equal %s  | %s\n' "$label" "${budget:--}" "$line" "$eq" \
		"$(echo "${report:--}" | head -1)"
	[ -n "$report" ] && echo "$report" | sed -n '2,6s/^/    /p'
	case $eq in no*) fail "$label: losses differ from the run without the shim: ${eq#no }" ;; esac
	[ "$st" = crash ] && fail "$label: crashed: $why"
	[ "$st" = timeout ] && [ "$kind" = must ] && fail "$label: did not finish in ${lim}s"
}

# The reference: no shim, no budget.
echo "shim_modes: ${prog[*]} ($tok tokens a step; $((steps - 1)) timed steps); ${total}s in all"
runs_left=7 budget=""
lim=$(limit must "$runs_left")
if [ "$lim" -lt 10 ] && [ "$lim" -lt "$cap" ]; then
	fail "the run without the shim: not run (${lim}s of SHIM_MODES_TOTAL left)"
	echo "shim_vs_uvm=nan shim_vs_uvm_prefetch=nan shim_vs_unlimited=nan"
	exit 1
fi
run unlimited "$lim" "${prog[@]}"
examine unlimited "$lim"
if [ "$st" = crash ] && [ "$nsteps" -eq 0 ] && grep -q '^[0-9.]* rc 77$' "$w/unlimited.out"; then
	echo "SKIP: $(grep -m1 SKIP "$w/unlimited.out" | cut -d' ' -f2- | sed 's/^SKIP: *//')"
	exit 77
fi
cp "$w/unlimited.loss" "$w/ref.loss"
peak=$(sed -n 's/^[0-9.]* peak \([0-9]*\)$/\1/p' "$w/unlimited.out" | tail -1)
if [ "$st" != ok ] || [ -z "$peak" ]; then
	fail "the run without the shim: ${why:-no peak line}"
	tail -5 "$w/unlimited.out"
	echo "shim_vs_uvm=nan shim_vs_uvm_prefetch=nan shim_vs_unlimited=nan"
	exit 1
fi
ST[unlimited]=ok TPS[unlimited]=$tps SECS[unlimited]=$secs EQ[unlimited]=reference REP[unlimited]="" BOUND[unlimited]=""
budget=$((peak / 2 / 1048576))M
printf 'mode %-32s budget %-7s tokens/s %s  seconds %s  losses: the reference  | peak reserved %s B, the budget half of it\n' \
	unlimited - "$tps" "$secs" "$peak"
runs_left=6

with=("$spill" run --budget "$budget" --mode)
measure spill must spill "${with[@]}" spill -- "${prog[@]}"
measure expandable must "spill expandable_segments:True" \
	env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${with[@]}" spill -- "${prog[@]}"
measure async must "spill backend:cudaMallocAsync" \
	env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync "${with[@]}" spill -- "${prog[@]}"
for m in uvm-prefetch hostmap uvm; do
	measure "$m" base "$m" "${with[@]}" "$m" -- "${prog[@]}"
done

# ratio BASELINE: the shim's tokens/s over BASELINE's, "=R" or ">=R" (bound) or "=nan".
ratio() {
	if [ "${ST[spill]}" != ok ] || [ -z "${TPS[$1]:-}" ]; then
		echo "=nan"
		return
	fi
	awk -v a="${TPS[spill]}" -v b="${TPS[$1]}" -v op="$([ -n "${BOUND[$1]:-}" ] && echo ">=" || echo "=")" \
		'BEGIN { printf "%s%.2f\n", op, (b > 0 ? a / b : 0) }'
}
# holds NAME RATIO TARGET: one clause of the target line.
holds() {
	awk -v n="$1" -v r="$2" -v t="$3" 'BEGIN {
		v = r; sub(/^>?=/, "", v)
		if (v == "nan") w = "unknown"
		else if (v + 0 >= t) w = "holds"
		else if (r ~ /^>=/) w = "not shown (a bound)"
		else w = "missed"
		printf "%s%s (target >= %s) %s", n, r, t, w }'
}
R=$(ratio uvm) S=$(ratio uvm-prefetch) U=$(ratio unlimited) H=$(ratio hostmap)
echo "targets: $(holds shim_vs_uvm "$R" 5); $(holds shim_vs_uvm_prefetch "$S" 1.5); $(holds shim_vs_unlimited "$U" 0.5); shim_vs_hostmap$H (no target)"

if [ -n "$json" ]; then
	esc() { sed 's/\\/\\\\/g; s/"/\\"/g' | awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }'; }
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
	{
		printf '{"bench":"shim_modes","machine":"%s","gpu":"%s","steps":%d,"batch":%d,"seq":%d,' \
			"$(hostname | esc)" "$(printf '%s' "$gpu" | esc)" "$steps" "$batch" "$seq"
		printf '"peak_bytes":%s,"budget":"%s","runs":[' "$peak" "$budget"
		first=1
		for n in unlimited spill expandable async uvm-prefetch hostmap uvm; do
			[ $first = 1 ] || printf ','
			first=0
			printf '\n{"run":"%s","status":"%s","tokens_per_s":%s,"tokens_per_s_is_upper_bound":%s,"seconds":%s,"losses_equal":"%s","report":"%s"}' \
				"$n" "${ST[$n]:-skipped}" "${TPS[$n]:-null}" "$([ -n "${BOUND[$n]:-}" ] && echo true || echo false)" \
				"${SECS[$n]:-null}" "$(printf '%s' "${EQ[$n]:-}" | esc)" "$(printf '%s' "${REP[$n]:-}" | esc)"
		done
		printf '],\n"shim_vs_uvm":"%s","shim_vs_uvm_prefetch":"%s","shim_vs_unlimited":"%s","shim_vs_hostmap":"%s","failures":%d}\n' \
			"${R#=}" "${S#=}" "${U#=}" "${H#=}" "$fails"
	} >"$json"
fi
echo "shim_vs_uvm$R shim_vs_uvm_prefetch$S shim_vs_unlimited$U"
[ "$fails" -eq 0 ]
