#!/usr/bin/env bash
# `make bench-shim`: what the preload shim costs a program that fits, on the
# host-emulated CUDA driver: per cuLaunchKernel (three pointer parameters, 100
# live allocations, all resident) and per cuMemAlloc + cuMemFree pair, the same
# program with and without LD_PRELOAD, alternating, best of BENCH_REPS (5) runs
# each. Overheads are differences of those best times; the emulated driver's
# own costs (a queue to a worker thread per launch, mmap per allocation) are
# printed beside them. Last line: launch_overhead_us=X alloc_overhead_us=Y
# (target X < 1). Writes bench/results/shim.json.
set -eu
out=${1:-bench/results/shim.json}
prog="$O/tests/shim/cuprog_bench"
lib="$O/lib/libspill-preload.so"
reps=${BENCH_REPS:-5}
launches=${BENCH_LAUNCHES:-200000}
allocs=${BENCH_ALLOCS:-20000}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SPILL_HOST_MEM=64M SPILL_SHIM_REPORT=0
for r in $(seq "$reps"); do
	"$prog" "$launches" "$allocs" >>"$work/plain"
	LD_PRELOAD="$lib" "$prog" "$launches" "$allocs" >>"$work/shim"
done
"$py" - "$work/plain" "$work/shim" "$out" "$reps" "$launches" "$allocs" <<'PY'
import json, os, platform, re, sys
def best(path):
    rows = [tuple(map(float, re.findall(r"=([0-9.]+)", l))) for l in open(path) if "launch_us" in l]
    return min(r[0] for r in rows), min(r[1] for r in rows)
pl, pa = best(sys.argv[1])
sl, sa = best(sys.argv[2])
lo, ao = sl - pl, sa - pa
print(f"{'':24s} {'without':>10s} {'with shim':>10s} {'overhead':>10s}")
print(f"{'per launch (us)':24s} {pl:10.3f} {sl:10.3f} {lo:10.3f}")
print(f"{'per alloc+free (us)':24s} {pa:10.3f} {sa:10.3f} {ao:10.3f}")
res = {"bench": "shim", "machine": platform.node(), "cpus": os.cpu_count(),
       "driver": "host-emulated (tests/shim/fakecuda.c)", "reps": int(sys.argv[4]),
       "launches": int(sys.argv[5]), "allocs": int(sys.argv[6]),
       "launch_us": {"without": pl, "with": sl}, "alloc_us": {"without": pa, "with": sa},
       "launch_overhead_us": lo, "alloc_overhead_us": ao, "target_launch_overhead_us": 1.0}
json.dump(res, open(sys.argv[3], "w"), indent=1)
print(f"launch_overhead_us={lo:.3f} alloc_overhead_us={ao:.3f}")
PY
