#!/usr/bin/env bash
# tests/train/test_2bw_adv_train.sh — the trainer under 2bw without a flush
# (an adversary's test): the contract is that every --flush-every gives the
# bits of the reference's 2BW rule, so
#  1 the losses of --flush-every 1, 3, 5, 8, 64 and the default are the same
#    bits (a learning-rate schedule with warm-up: each step its own lr);
#  2 evaluations between blocks (--eval-every 3, 5) change no later loss;
#  3 a run checkpointed every 5 (odd K: blocks end there, mid-way through a
#    program) and resumed from step 5 and step 10 under another --flush-every
#    (1, 3, 7, 2) continues with the uninterrupted run's losses, and writes
#    the same final checkpoint bytes.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$here/pick_python.sh"
pick_python numpy || { echo "SKIP: no python3 with numpy"; exit 77; }
export SPILL_THREADS=1

"$py" - "$work" <<'PY'
import sys, random
random.seed(3)
words = "the of and to in that he shall unto for his i a lord they be is him not".split()
with open(f"{sys.argv[1]}/text.txt", "w") as f:
    for line in range(900):
        f.write(" ".join(random.choice(words) for _ in range(8)) + ".\n")
PY
"$spill" prepare "$work/text.txt" -o "$work/data" --name tiny >/dev/null || fail "prepare"

steps=${ADV_STEPS:-15}
prec=${ADV_PREC:-fp32}
small=(--layers 2 --channels 64 --heads 4 --seq 32 --batch 8 --data "$work/data"
	--schedule 2bw --no-tune --precision "$prec" --devices 2 --microbatch 2
	--warmup 4 --steps "$steps" ${ADV_EXTRA:-})

run() { # name, flags...: losses into $work/<name>.json
	local name=$1
	shift
	"$spill" train "${small[@]}" "$@" --stats-json "$work/$name.json" >"$work/$name.out" 2>&1 ||
		{ tail -5 "$work/$name.out"; fail "run $name ($*)"; }
}

last=$(printf %08d "$steps")
mkdir -p "$work/base" "$work/k3" "$work/k5" "$work/k8" "$work/k64" "$work/kdef" "$work/e3" "$work/e5"
run base --flush-every 1 --checkpoint "$work/base"
for k in 3 5 8 64; do run "k$k" --flush-every $k --checkpoint "$work/k$k"; done
run kdef --checkpoint "$work/kdef"
run e3 --flush-every 5 --eval-every 3 --checkpoint "$work/e3"
run e5 --flush-every 3 --eval-every 5 --checkpoint "$work/e5"
for n in k3 k5 k8 k64 kdef e3 e5; do # the final state, byte for byte
	cmp -s "$work/base/step_$last.safetensors" "$work/$n/step_$last.safetensors" ||
		fail "$n: the final checkpoint differs from --flush-every 1's"
done
"$py" - "$work" k3 k5 k8 k64 kdef e3 e5 <<'PY' || fail "flush-every / eval: losses differ"
import json, sys
w = sys.argv[1]
base = json.load(open(f"{w}/base.json"))["losses"]
bad = 0
for n in sys.argv[2:]:
    l = json.load(open(f"{w}/{n}.json"))["losses"]
    if l != base:
        d = [i for i in range(min(len(l), len(base))) if l[i] != base[i]]
        print(f"{n}: losses differ from --flush-every 1 at steps {d[:5]} (len {len(l)} vs {len(base)})")
        bad = 1
print("flush-every 1/3/5/8/64/default and evaluations: same losses" if not bad else "")
sys.exit(bad)
PY

# checkpoints every 5 under K = 3 (blocks 3,2 | 3,2 | ...), resumed under others
mkdir -p "$work/ck"
run ck --flush-every 3 --checkpoint "$work/ck" --checkpoint-every 5
for spec in "5 1" "5 7" "10 2" "10 64"; do
	set -- $spec
	at=$1
	k=$2
	d="$work/r${at}k$k"
	mkdir -p "$d"
	cp "$work/ck/step_$(printf %08d "$at").safetensors" "$d/" || fail "no checkpoint at $at"
	run "r${at}k$k" --flush-every "$k" --checkpoint "$d" --checkpoint-every 5 --resume
	cmp -s "$work/ck/step_$last.safetensors" "$d/step_$last.safetensors" ||
		fail "resumed at $at under --flush-every $k: the final checkpoint differs"
	"$py" - "$work/base.json" "$work/r${at}k$k.json" "$at" <<'PY' ||
import json, sys
a, b = (json.load(open(p))["losses"] for p in sys.argv[1:3])
at = int(sys.argv[3])
if a[at:] != b:
    print("resumed losses", b, "uninterrupted", a[at:])
    sys.exit(1)
PY
		fail "resumed at $at under --flush-every $k: losses differ"
done
echo "2bw trainer: $fails failures"
[ "$fails" = 0 ]
