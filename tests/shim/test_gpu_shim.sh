# The shim on a real GPU (make test-gpu; skips without one): a CUDA C program
# built by nvcc with its default static cudart, 12 buffers of 64 MiB under a
# 256 MiB budget (3x oversubscribed), prints the same checksum as without the
# shim. PyTorch, cuBLAS and NCCL under the shim are not covered yet (docs/shim.md).
set -u
P="$O/lib/libspill-preload.so"
prog="$O/tests/shim/gpu_oversub"
[ -f "$P" ] && [ -x "$prog" ] || { echo "SKIP: the shim or gpu_oversub is not built"; exit 77; }
SPILL_BACKEND=cuda "$O/bin/spill" devices >/dev/null 2>&1 || { echo "SKIP: no CUDA device"; exit 77; }
a=$("$prog" 12 64 4) || { echo "FAIL: without the shim"; exit 1; }
b=$(LD_PRELOAD="$P" SPILL_DEVICE_MEM=256M SPILL_HOST_MEM=2G "$prog" 12 64 4) || { echo "FAIL: with the shim"; exit 1; }
echo "without: $a; with the shim (256 MiB budget): $b"
[ "$a" = "$b" ] || { echo "FAIL: checksums differ"; exit 1; }
