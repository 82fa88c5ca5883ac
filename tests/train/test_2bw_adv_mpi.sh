#!/usr/bin/env bash
# tests/train/test_2bw_adv_mpi.sh — 2bw without a flush over 2 processes
# (mpirun, host backend; an adversary's test): the losses of --flush-every
# 1, 3, 4 and of --zero1 with --flush-every 3 (and bf16 + ZeRO-1, K 5 against
# K 1) must be the same bits, and a run checkpointed every 5 steps under K 3,
# resumed from step 5 under K 2 (ZeRO-1), continues with the uninterrupted
# losses and final checkpoint.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun"; exit 77; }
. "$here/pick_python.sh"
pick_python json || { echo "SKIP: no python3"; exit 77; }
work=$(mktemp -d)
trap '[ -n "${ADV_KEEP:-}" ] || rm -rf "$work"' EXIT; echo "work $work"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none -np 2)
"$py" - "$work" <<'PY'
import sys, random
random.seed(5)
words = "in the beginning god created heaven and earth was without form void darkness".split()
with open(f"{sys.argv[1]}/text.txt", "w") as f:
    for line in range(900):
        f.write(" ".join(random.choice(words) for _ in range(9)) + ".\n")
PY
"$spill" prepare "$work/text.txt" -o "$work/data" --name t >/dev/null || fail "prepare"
model=(--layers 2 --channels 64 --heads 4 --seq 32 --batch 8 --data "$work/data" --backend host
	--no-tune --steps 10 --lr 3e-3 --warmup 3 --devices 2 --schedule 2bw --microbatch 2)
run() { # name flags...
	local name=$1
	shift
	"${mpi[@]}" "$spill" train "${model[@]}" --stats-json "$work/$name.json" "$@" \
		>"$work/$name.out" 2>&1 || { tail -5 "$work/$name.out"; fail "$name ($*)"; }
}
losses() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['losses'][int(sys.argv[2]):])" "$1" "${2:-0}"; }
same() { # A B [from]
	[ "$(losses "$work/$1.json")" = "$(losses "$work/$2.json" "${3:-0}")" ] ||
		[ "$(losses "$work/$1.json" "${3:-0}")" = "$(losses "$work/$2.json")" ] ||
		fail "$1 and $2: losses differ: $(losses "$work/$1.json") vs $(losses "$work/$2.json")"
}
ckeq() { # A B: the final checkpoints, byte for byte
	cmp -s "$work/$1/step_00000010.safetensors" "$work/$2/step_00000010.safetensors" ||
		fail "$1 and $2: the step-10 checkpoints differ"
}
for r in "k1 --flush-every 1" "k3 --flush-every 3" "k4 --flush-every 4" \
	"z3 --flush-every 3 --zero1" "b1 --flush-every 1 --precision bf16 --zero1" \
	"b5 --flush-every 5 --precision bf16 --zero1 --eval-every 3"; do
	set -- $r
	mkdir -p "$work/$1"
	run "$@" --checkpoint "$work/$1"
done
same k1 k3
same k1 k4
same k1 z3
same b1 b5
ckeq k1 k3
ckeq k1 k4
ckeq k1 z3
ckeq b1 b5
mkdir -p "$work/ck" "$work/rs"
run ck --flush-every 3 --zero1 --checkpoint "$work/ck" --checkpoint-every 5
same k1 ck
cp "$work/ck/step_00000005.safetensors" "$work/rs/" || fail "no step-5 checkpoint"
run rs --flush-every 2 --zero1 --checkpoint "$work/rs" --checkpoint-every 5 --resume
[ "$(losses "$work/ck.json" 5)" = "$(losses "$work/rs.json")" ] ||
	fail "resumed at 5 under K 2: $(losses "$work/rs.json") vs $(losses "$work/ck.json" 5)"
cmp -s "$work/ck/step_00000010.safetensors" "$work/rs/step_00000010.safetensors" ||
	fail "resumed at 5 under K 2: the step-10 checkpoint differs"
echo "2bw over mpirun: $fails failures"
[ "$fails" = 0 ]
