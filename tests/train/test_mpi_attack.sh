# Defects an adversarial review of `mpirun -np N spill train/tune` found
# (host backend, localhost), kept as regressions; each failed before its fix:
#  1. a node with another --eval-every / --eval-batches: refused at start
#     (the loss chain deadlocked);
#  2. spill tune with another grid on one node: refused (node 0 printed its
#     labels with node 1's results);
#  3. SIGINT to every node while one is slow: all stop after the same step
#     with a checkpoint, exit 130 (the waiting node gave up);
#  4. an error every node meets mid-run: one line, no MPI_Abort banner.
# Each case prints PASS or FAIL with what happened; every run has a timeout.
#   O=build/release bash tests/train/test_mpi_attack.sh
set -u
spill="$(cd "$(dirname "$O/bin/spill")" && pwd)/spill"
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SPILL_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none)
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

python3 - "$work" <<'PY'
import sys, random
random.seed(2)
words = "in the beginning god created heaven and earth was without form void darkness".split()
with open(f"{sys.argv[1]}/text.txt", "w") as f:
    for line in range(900):
        f.write(" ".join(random.choice(words) for _ in range(9)) + ".\n")
PY
"$spill" prepare "$work/text.txt" -o "$work/data" --name t >/dev/null || exit 1
model=(--layers 2 --channels 64 --heads 4 --seq 32 --batch 8 --data "$work/data" --backend host
	--no-tune --steps 4 --lr 3e-3 --warmup 1 --devices 1 --schedule dp-swap)
# node1 FLAGS...: the command line for node 1 gets FLAGS appended
node1() {
	local extra="$1"
	shift
	timeout -k 5 40 "${mpi[@]}" -np 2 bash -c \
		'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then set -- "$@" '"$extra"'; fi; exec "$@"' _ "$@"
}

# 1. --eval-every / --eval-batches are not in the launch hash: nodes that
#    differ evaluate different numbers of times and the loss chain deadlocks
for extra in "--eval-every 2" "--eval-batches 2 --eval-every 2"; do
	t0=$(date +%s)
	if [ "$extra" = "--eval-every 2" ]; then
		node1 "$extra" "$spill" train "${model[@]}" >"$work/e.out" 2>&1
	else
		node1 "--eval-batches 2" "$spill" train "${model[@]}" --eval-every 2 >"$work/e.out" 2>&1
	fi
	rc=$?
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		fail "node 1 alone with $extra: hung ($(($(date +%s) - t0)) s, killed by timeout)"
	elif grep -q "launched with other flags" "$work/e.out"; then
		pass "node 1 alone with $extra: refused"
	else
		fail "node 1 alone with $extra: rc $rc, $(grep '^spill' "$work/e.out" | head -2)"
	fi
done

# 2. spill tune under mpirun checks nothing: another grid on node 1 gives node
#    0's labels with node 1's results
tune=(tune --backend host --steps 4 --layers 2 --channels 64 --heads 4 --seq 32 --data "$work/data")
"$spill" "${tune[@]}" --devices 2 --grid lr=3e-3,1e-3 >"$work/t1.out" 2>&1
timeout -k 5 60 "${mpi[@]}" -np 2 bash -c \
	'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then set -- "$@" --grid lr=5e-3,2e-3; else set -- "$@" --grid lr=3e-3,1e-3; fi; exec "$@"' \
	_ "$spill" "${tune[@]}" --devices 1 >"$work/t2.out" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "other flags" "$work/t2.out"; then
	pass "tune with another grid on node 1: refused"
else
	fail "tune with another grid on node 1: rc $rc; one process: $(grep 'lr=0.001 ' "$work/t1.out" | tail -1 | tr -s ' ') / mpirun: $(grep 'lr=0.001 ' "$work/t2.out" | tail -1 | tr -s ' ')"
fi

# 3. SIGINT to every node (docs: all stop after the same step with a
#    checkpoint, exit 130) while one node is slower than the 0.5 s grace
ck="$work/sig"
setsid "${mpi[@]}" -np 2 bash -c \
	'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export SPILL_HOST_JITTER="*:30000"; fi; exec "$@"' \
	_ "$spill" train "${model[@]}" --steps 100000 --checkpoint "$ck" --checkpoint-every 2 >"$work/s.out" 2>&1 &
job=$!
for _ in $(seq 1 300); do sleep 0.1; ls "$ck"/step_*.safetensors >/dev/null 2>&1 && break; done
sleep 0.3
for p in $(pgrep -P $job); do kill -INT "$p"; done # the ranks (mpirun's children)
for _ in $(seq 1 200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && kill -9 -- -$job
wait $job
rc=$?
if [ $rc = 130 ] && grep -q "interrupted by SIGINT" "$work/s.out"; then
	pass "SIGINT to every node, node 1 slow: stopped with a checkpoint"
else
	fail "SIGINT to every node, node 1 slow: rc $rc: $(grep '^spill:' "$work/s.out" | head -2)"
fi

# 4. an error every node meets mid-run (this plan does not fit at step 1, in
#    one process too): one line from node 0
timeout -k 5 60 "${mpi[@]}" -np 2 "$spill" train --layers 2 --channels 64 --heads 4 --seq 32 \
	--batch 6 --data "$work/data" --backend host --no-tune --steps 4 --devices 1 \
	--schedule interleaved --chunks 2 --precision bf16 >"$work/x.out" 2>&1
n=$(grep -c "^spill train" "$work/x.out")
n=$((n - 1)) # the banner's first line
if [ "$n" = 1 ] && ! grep -q MPI_ABORT "$work/x.out"; then
	pass "an error on every node: one line"
else
	fail "an error on every node: $n error lines$(grep -q MPI_ABORT "$work/x.out" && echo ' and the MPI_ABORT banner')"
fi

[ "$fails" = 0 ] || exit 1
echo ok
