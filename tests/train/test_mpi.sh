# `mpirun -np N spill train` (host backend, OpenMPI on localhost): data
# parallel across processes, bit for bit.
#  - the same global batch over 2 processes of 1 emulated GPU (dp-swap), over
#    2 processes of 2 GPUs each running a pipeline (gpipe, harmony-pp,
#    interleaved: a pack's gradient then crosses the nodes alone), and in one process
#    of 2 GPUs (dp-swap; test_transparency proves that one equal to the
#    reference loop), and under `mpirun -np 1`: the same per-step losses and
#    byte-identical final checkpoints; also in bf16, and with --update-on-cpu
#    and recompute;
#  - --zero1 (ZeRO-1: each process holds and updates its packs' optimizer
#    state, bf16's masters too, and broadcasts their weights): the same
#    losses and checkpoints on dp-swap, 1f1b, harmony-dp with the CPU update,
#    bf16, and resumed; one process refuses it;
#  - 2bw over 2 processes of 2 GPUs: the first two losses of one process's
#    (bit for bit; then another reduction order), and with --zero1 the same
#    losses and checkpoints as without, fp32 and bf16 with the CPU update;
#  - resumed under mpirun from a mid-run checkpoint (and that checkpoint
#    resumed by one process): the uninterrupted run's checkpoint, byte for
#    byte;
#  - a node killed mid-run (SIGKILL): the job ends within seconds, node 0
#    says in one line that it gave up on node 1, and the newest checkpoint
#    resumes;
#  - spill tune's models spread over 2 processes: the ranking, the validation
#    losses and the best model's checkpoint of one process with both devices;
#  - bad input: a batch the processes do not divide, and processes launched
#    with different flags: one line from node 0, every process exits non-zero.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (apt-get install openmpi-bin)"; exit 77; }
. "$here/pick_python.sh"
pick_python json || { echo "SKIP: no python3"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# localhost, more processes than cores
mpi=(mpirun --oversubscribe --bind-to none)

"$py" - "$work" <<'PY'
import sys, random
random.seed(2)
words = "in the beginning god created heaven and earth was without form void darkness".split()
with open(f"{sys.argv[1]}/text.txt", "w") as f:
    for line in range(900):
        f.write(" ".join(random.choice(words) for _ in range(9)) + ".\n")
PY
"$spill" prepare "$work/text.txt" -o "$work/data" --name t >/dev/null || fail "prepare"
model=(--layers 2 --channels 64 --heads 4 --seq 32 --batch 8 --data "$work/data" --backend host
	--no-tune --steps 6 --lr 3e-3 --warmup 1)

losses() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['losses'])" "$1"; }

# run NAME NP DEVICES SCHEDULE [flags...]: checkpoints in $work/NAME
run() {
	local name=$1 np=$2 dev=$3 sched=$4
	shift 4
	if [ "$np" = 1m ]; then # one process, through mpirun and the nodes' paths
		"${mpi[@]}" -np 1 "$spill" train "${model[@]}" --devices "$dev" --schedule "$sched" \
			--checkpoint "$work/$name" --checkpoint-every 3 --stats-json "$work/$name.json" "$@" \
			>"$work/$name.out" 2>&1
	elif [ "$np" = 1 ]; then
		"$spill" train "${model[@]}" --devices "$dev" --schedule "$sched" \
			--checkpoint "$work/$name" --checkpoint-every 3 --stats-json "$work/$name.json" "$@" \
			>"$work/$name.out" 2>&1
	else
		"${mpi[@]}" -np "$np" "$spill" train "${model[@]}" --devices "$dev" --schedule "$sched" \
			--checkpoint "$work/$name" --checkpoint-every 3 --stats-json "$work/$name.json" "$@" \
			>"$work/$name.out" 2>&1
	fi || { tail -5 "$work/$name.out"; fail "$name: exit $?"; }
}
same() { # same A B: losses and the step-6 checkpoints
	[ "$(losses "$work/$1.json")" = "$(losses "$work/$2.json")" ] ||
		fail "$1 and $2: losses differ: $(losses "$work/$1.json") vs $(losses "$work/$2.json")"
	cmp -s "$work/$1/step_00000006.safetensors" "$work/$2/step_00000006.safetensors" ||
		fail "$1 and $2: the step-6 checkpoints differ"
}

# 1. one process of 2 GPUs against 2 processes, dp and a pipeline in each
run one 1 2 dp-swap
run np1 1m 2 dp-swap
run np2 2 1 dp-swap
run np2pipe 2 2 gpipe
run np2hpp 2 2 harmony-pp
run np2il 2 2 interleaved --chunks 2 --budget 4M
same one np1
same one np2
same one np2pipe
same one np2hpp
same one np2il
grep -q "step 6/6" "$work/np2.out" || fail "np2: no progress from node 0"
[ "$(grep -c "^== GPT-2" "$work/np2.out")" = 1 ] || fail "np2: the report printed more than once"
grep -q "^inter-node" "$work/np2.out" || fail "np2: no inter-node row in the report"
grep -q "^utilization per node (its devices' mean): 0: [0-9]*% 1: [0-9]*%" "$work/np2.out" ||
	fail "np2: no per-node utilization (node 1's gathered)"
echo "1 process x 2 GPUs = 2 x 1 (dp-swap) = 2 x 2 (gpipe): $(losses "$work/one.json")"

# the update on the CPU with recompute, and bf16
run onecpu 1 2 dp-swap --update-on-cpu --recompute
run np2cpu 2 1 harmony-dp --update-on-cpu --recompute
same onecpu np2cpu
run onebf 1 2 dp-swap --precision bf16
run np2bf 2 1 dp-swap --precision bf16
same onebf np2bf

# ZeRO-1: the optimizer state (and bf16's masters) sharded over the processes,
# the weights broadcast from each pack's owner: the same bits, the same file
run np2z 2 1 dp-swap --zero1
same one np2z
grep -q "^ZeRO-1: node 0 holds" "$work/np2z.out" || fail "np2z: no ZeRO-1 line"
run np2zpipe 2 2 1f1b --zero1
same one np2zpipe
run np2zcpu 2 1 harmony-dp --update-on-cpu --recompute --zero1
same onecpu np2zcpu
run np2zbf 2 1 dp-swap --precision bf16 --zero1
same onebf np2zbf
# 2bw (two weight versions, the delayed update) across processes. One
# process runs it with one replica (its gradient summed microbatch by
# microbatch), 2 processes sum their nodes' gradients: another order, so from
# the first step that reads updated weights (the third: 2BW's first two read
# the initial ones) the numbers differ in the last bits. Bit for bit: the
# first two losses against one process, and --zero1 (the owner updates and
# broadcasts the newest version) against the run without it, fp32 and bf16
# with the CPU update.
run one2bw 1 2 2bw
run np2bw 2 2 2bw
run np2zbw 2 2 2bw --zero1
run np2bwbf 2 2 2bw --precision bf16 --update-on-cpu
run np2zbwbf 2 2 2bw --zero1 --precision bf16 --update-on-cpu
same np2bw np2zbw
same np2bwbf np2zbwbf
"$py" - "$work/one2bw.json" "$work/np2bw.json" "$work/one.json" <<'PY' || fail "2bw over 2 processes"
import json, sys
a, b, dp = (json.load(open(p))["losses"] for p in sys.argv[1:])
assert a[:2] == b[:2], (a, b)
assert all(abs(x - y) < 1e-5 * abs(x) for x, y in zip(a, b)), (a, b)
assert a[2:] != dp[2:], ("2bw gave the losses of the plain rule", a, dp)
print("2bw over 2 processes:", b)
PY
mkdir -p "$work/resz"
cp "$work/np2z/step_00000003.safetensors" "$work/resz/"
"${mpi[@]}" -np 2 "$spill" train "${model[@]}" --devices 1 --schedule dp-swap --zero1 \
	--checkpoint "$work/resz" --resume >"$work/resz.out" 2>&1 || fail "resume with --zero1"
cmp -s "$work/resz/step_00000006.safetensors" "$work/one/step_00000006.safetensors" ||
	fail "resumed with --zero1: not the uninterrupted run's checkpoint"
"$spill" train "${model[@]}" --devices 2 --zero1 --steps 1 >"$work/z1.out" 2>&1 &&
	fail "--zero1 in one process ran"
grep -q "zero1 shards the optimizer state over the nodes" "$work/z1.out" ||
	fail "--zero1 alone: $(cat "$work/z1.out")"

# 2. resumed under mpirun from step 3, and that checkpoint in one process
mkdir -p "$work/res2" "$work/res1"
cp "$work/np2/step_00000003.safetensors" "$work/res2/"
cp "$work/np2/step_00000003.safetensors" "$work/res1/"
"${mpi[@]}" -np 2 "$spill" train "${model[@]}" --devices 1 --schedule dp-swap \
	--checkpoint "$work/res2" --resume >"$work/res2.out" 2>&1 || fail "resume under mpirun"
cmp -s "$work/res2/step_00000006.safetensors" "$work/one/step_00000006.safetensors" ||
	fail "resumed under mpirun: not the uninterrupted run's checkpoint"
"$spill" train "${model[@]}" --devices 2 --schedule dp-swap --checkpoint "$work/res1" --resume \
	>"$work/res1.out" 2>&1 || fail "resume in one process"
cmp -s "$work/res1/step_00000006.safetensors" "$work/one/step_00000006.safetensors" ||
	fail "resumed in one process: not the uninterrupted run's checkpoint"

# 3. a node killed mid-run
"${mpi[@]}" -np 2 "$spill" train "${model[@]}" --devices 1 --schedule dp-swap --steps 100000 \
	--checkpoint "$work/kill" --checkpoint-every 5 >"$work/kill.out" 2>"$work/kill.err" &
job=$!
victim=
for _ in $(seq 1 150); do # the first checkpoint, then node 1's process
	sleep 0.1
	ls "$work/kill"/step_*.safetensors >/dev/null 2>&1 || continue
	for p in $(pgrep -P "$job" || true); do # mpirun's own children: not another job's
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
	done
	[ -n "$victim" ] && break
done
if [ -z "$victim" ]; then
	fail "killed node: no checkpoint or no node 1 within 15 s"
	kill "$job" 2>/dev/null
else
	t0=$(date +%s)
	kill -9 "$victim"
	for _ in $(seq 1 200); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$job" 2>/dev/null; then
		fail "killed node: the job still runs 20 s later"
		pkill -9 -P "$job" || true
		kill -9 "$job" 2>/dev/null
	fi
	wait "$job" && fail "killed node: mpirun exited 0"
	echo "killed node 1: the job ended in $(($(date +%s) - t0)) s"
	grep "^spill: node 0:" "$work/kill.err" || fail "killed node: no line from node 0: $(cat "$work/kill.err")"
	[ "$(grep -c "^spill: node 0:" "$work/kill.err")" -le 1 ] || fail "killed node: more than one line from node 0"
	last=$(ls "$work/kill"/step_*.safetensors | tail -1)
	"$spill" train "${model[@]}" --devices 2 --schedule dp-swap --steps 100000 --resume "$last" \
		--checkpoint "$work/kill" --overwrite --steps "$((10#$(basename "$last" .safetensors | tr -dc 0-9) + 1))" \
		>"$work/kill-resume.out" 2>&1 || fail "killed node: $last does not resume: $(tail -2 "$work/kill-resume.out")"
fi

# 4. spill tune: 4 models over 2 processes of 1 device against one process of
# 2: the same ranking and validation losses, and the best model's checkpoint
# (written by the node that trained it) byte for byte
tune=(tune --backend host --steps 4 --layers 2 --channels 64 --heads 4 --seq 32 --data "$work/data"
	--grid lr=3e-3,1e-3 batch=4,8)
"$spill" "${tune[@]}" --devices 2 --save-best "$work/best1" >"$work/tune1.out" 2>&1 ||
	fail "tune in one process: $(tail -2 "$work/tune1.out")"
"${mpi[@]}" -np 2 "$spill" "${tune[@]}" --devices 1 --save-best "$work/best2" >"$work/tune2.out" 2>&1 ||
	fail "tune under mpirun: $(tail -2 "$work/tune2.out")"
sed -n '/^ranking/,/^best/p' "$work/tune1.out" >"$work/rank1"
sed -n '/^ranking/,/^best/p' "$work/tune2.out" | sed 's/ (its node writes it)//' >"$work/rank2"
[ -s "$work/rank1" ] && cmp -s "$work/rank1" "$work/rank2" ||
	fail "tune: the rankings differ: $(cat "$work/rank1") vs $(cat "$work/rank2")"
grep -q "^spill tune: 4 models over 2 nodes" "$work/tune2.out" || fail "tune: no nodes line"
cmp -s "$work"/best1/step_*.safetensors "$work"/best2/step_*.safetensors ||
	fail "tune: the best model's checkpoints differ"
cat "$work/rank2"
"${mpi[@]}" -np 2 "$spill" "${tune[@]}" --devices 1 --halving 2 >"$work/tune3.out" 2>&1 &&
	fail "tune --halving under mpirun ran"
[ "$(grep -c "halving 2: successive halving compares" "$work/tune3.out")" = 1 ] ||
	fail "tune --halving: $(cat "$work/tune3.out")"

# 5. bad input
"${mpi[@]}" -np 2 "$spill" train "${model[@]}" --batch 7 >"$work/bad.out" 2>&1 && fail "batch 7 on 2 nodes ran"
[ "$(grep -c "does not split over 2 nodes" "$work/bad.out")" = 1 ] || fail "batch 7: $(cat "$work/bad.out")"
"${mpi[@]}" -np 2 bash -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then set -- "$@" --seed 9; fi; exec "$@"' \
	_ "$spill" train "${model[@]}" --steps 2 >"$work/diff.out" 2>&1 && fail "different flags ran"
[ "$(grep -c "node 1 was launched with other flags" "$work/diff.out")" = 1 ] ||
	fail "different flags: $(cat "$work/diff.out")"
"${mpi[@]}" -np 2 "$spill" train "${model[@]}" --nodes 2 >"$work/nodes.out" 2>&1 && fail "--nodes in train ran"
[ "$(grep -c "spill sim takes --nodes" "$work/nodes.out")" = 1 ] || fail "--nodes: $(cat "$work/nodes.out")"

[ "$fails" = 0 ] || exit 1
echo "ok"
