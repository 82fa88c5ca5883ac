#!/usr/bin/env bash
# tests/train/test_tp_train_adv.sh — `spill train --tensor-parallel t` beyond
# test_tp_train.sh (an adversary's test), on the host backend:
#  1 harmony-pp (groups of 2) under t = 2 and t = 4 and gpipe under t = 4, with
#    evaluations every 2 steps, SGD with momentum and weight decay, 8 heads:
#    the same losses, validation losses and final checkpoint;
#  2 2bw with a flush every 3 steps under t = 2 and every 2 under t = 4: the
#    same losses and checkpoints (2bw_prev included), and t = 2's step-3
#    checkpoint resumed under t = 4 with a flush every 2, and under t = 2 with a
#    flush every step and the disk tier below a small host pool, ends in the
#    same bytes;
#  3 bad input is one line naming --tensor-parallel: harmony-dp, t = 8, heads
#    not a multiple of 4, the default --grad-clip (1).
set -u
spill="$O/bin/spill"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1

small=(--backend host --devices 4 --layers 3 --channels 32 --heads 8 --seq 8 --batch 8
	--no-tune --grad-clip 0 --weight-decay 0.1 --microbatch 2 --steps 6 --eval-every 2
	--eval-batches 2)
run() { # name, flags...: losses into $work/<name>.json, checkpoints into $work/<name>/
	local name=$1
	shift
	mkdir -p "$work/$name"
	"$spill" train "${small[@]}" --checkpoint-every 3 --keep 4 "$@" --checkpoint "$work/$name" \
		--stats-json "$work/$name.json" >"$work/$name.out" 2>&1 ||
		{ tail -5 "$work/$name.out"; fail "run $name ($*)"; }
}
losses() { tr -d '\n ' <"$work/$1.json" | sed -e 's/.*"losses":\[\([^]]*\)\].*/\1/'; }
evals() { grep "validation loss" "$work/$1.out"; }
same() { # a b: losses, evaluations, final checkpoint
	[ "$(losses "$1")" = "$(losses "$2")" ] || fail "$1 and $2: losses differ"
	[ "$(evals "$1")" = "$(evals "$2")" ] || fail "$1 and $2: validation losses differ"
	[ -n "$(evals "$1")" ] || fail "$1: no validation loss printed"
	cmp -s "$work/$1/step_00000006.safetensors" "$work/$2/step_00000006.safetensors" ||
		fail "$1 and $2: final checkpoints differ"
}

sgd=(--optim sgd --momentum 0.9 --lr 0.05)
run hp2 --tensor-parallel 2 --schedule harmony-pp --group 2 "${sgd[@]}"
run hp4 --tensor-parallel 4 --schedule harmony-pp --group 2 "${sgd[@]}"
run gp4 --tensor-parallel 4 --schedule gpipe "${sgd[@]}"
same hp2 hp4
same hp2 gp4
echo "harmony-pp and gpipe, t = 2 and 4: $(losses hp2)"

run b2 --tensor-parallel 2 --schedule 2bw --flush-every 3
run b4 --tensor-parallel 4 --schedule 2bw --flush-every 2
same b2 b4
echo "2bw, t = 2 (K 3) and 4 (K 2): $(losses b2)"
resume() { # name, flags...: t = 2's step-3 checkpoint resumed
	local name=$1
	shift
	mkdir -p "$work/$name"
	"$spill" train "${small[@]}" --checkpoint-every 3 --keep 4 "$@" \
		--resume "$work/b2/step_00000003.safetensors" --checkpoint "$work/$name" \
		>"$work/$name.out" 2>&1 || { tail -5 "$work/$name.out"; fail "resume $name ($*)"; }
	cmp -s "$work/b2/step_00000006.safetensors" "$work/$name/step_00000006.safetensors" ||
		fail "$name: t = 2's checkpoint resumed ($*) ends elsewhere"
}
resume r4 --tensor-parallel 4 --schedule 2bw --flush-every 2
mkdir -p "$work/disk"
resume rd --tensor-parallel 2 --schedule 2bw --flush-every 1 --disk "$work/disk" --host-mem 256K

bad() { # expected words, flags...
	local want=$1
	shift
	"$spill" train "$@" >"$work/bad.out" 2>&1 && fail "spill train $* ran"
	[ "$(wc -l <"$work/bad.out")" -le 1 ] || { cat "$work/bad.out"; fail "$*: more than a line"; }
	grep -q -- "--tensor-parallel" "$work/bad.out" && grep -q -- "$want" "$work/bad.out" ||
		{ cat "$work/bad.out"; fail "$*: no line naming --tensor-parallel and '$want'"; }
}
bad "harmony-dp" "${small[@]}" --tensor-parallel 2 --schedule harmony-dp
bad "1, 2 or 4" "${small[@]}" --tensor-parallel 8 --schedule 1f1b --devices 8
bad "multiples of 4" "${small[@]}" --tensor-parallel 2 --schedule 1f1b --heads 5 --channels 30
# the default --grad-clip is 1: tensor parallelism asks for 0
bad "grad-clip 0" --backend host --devices 4 --layers 2 --channels 32 --heads 4 --seq 8 \
	--batch 4 --no-tune --steps 2 --tensor-parallel 2 --schedule 1f1b

[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
