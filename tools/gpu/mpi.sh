#!/usr/bin/env bash
# On a GPU machine (tools/gpu/check.sh step mpi): spill train on cuda through
# the multi-node path, `mpirun -np 1` (the NCCL communicator made with
# ncclCommInitRank, its id through MPI; every pack's gradient all-reduced by
# it), against the same run without mpirun: the same losses. 120 s at most.
set -u
S=build/release/bin/spill
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v mpirun >/dev/null || { echo "mpi: no mpirun here"; exit 77; }
w=$(mktemp -d)
args=(--backend cuda --devices 1 --layers 4 --channels 256 --heads 4 --seq 256 --batch 16
	--steps 20 --schedule dp-swap --no-tune)
"$S" train "${args[@]}" --stats-json "$w/one.json" >"$w/one.out" 2>&1 || { tail -5 "$w/one.out"; exit 1; }
mpirun -np 1 --bind-to none "$S" train "${args[@]}" --stats-json "$w/mpi.json" >"$w/mpi.out" 2>&1 ||
	{ tail -20 "$w/mpi.out"; exit 1; }
tail -3 "$w/mpi.out"
python3 - "$w/one.json" "$w/mpi.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))["losses"]
b = json.load(open(sys.argv[2]))["losses"]
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("losses without / with mpirun -np 1:", a[-1], b[-1])
print("mpi_nccl_same=%d worst_rel=%.3g" % (a == b, worst))
sys.exit(0 if worst < 1e-6 else 1)
PY
