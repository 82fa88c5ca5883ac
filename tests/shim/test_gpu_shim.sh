# The shim on a real GPU (make test-gpu; each part skips without its program):
#  1. a CUDA C program built by nvcc with its default static cudart, 12 buffers
#     of 64 MiB under a 256 MiB budget (3x oversubscribed), prints the same
#     checksum as without the shim;
#  2. PyTorch (torch_gpt_shim.py, GPT-2-small shape, random tokens) under a
#     budget of 60% of its peak, with PYTORCH_NO_CUDA_MEMORY_CACHING=1 and with
#     the default caching allocator: the same per-step losses as without the shim;
#  3. the same script with a budget above its need: time with the shim over time
#     without, best of 3 alternating runs, at most 1.02;
#  4. cuBLAS and a one-rank NCCL all-reduce (gpu_cublas_nccl) over 2x the
#     budget: no crash, the same checksum.
set -u
P="$O/lib/libspill-preload.so"
[ -f "$P" ] || { echo "SKIP: the shim is not built"; exit 77; }
SPILL_BACKEND=cuda "$O/bin/spill" devices >/dev/null 2>&1 || { echo "SKIP: no CUDA device"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 ran=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
shim() { LD_PRELOAD="$P" SPILL_HOST_MEM=${SPILL_HOST_MEM:-8G} "$@"; }

# same_checksum N PROG BUDGET ARGS...: PROG prints the same line with and without
# the shim under BUDGET.
same_checksum() {
	local n="$1" prog="$O/tests/shim/$2" budget="$3" a b
	shift 3
	if [ ! -x "$prog" ]; then
		echo "$n. SKIP: $(basename "$prog") not built"
		return
	fi
	ran=$((ran + 1))
	a=$("$prog" "$@") || fail "$(basename "$prog") without the shim"
	b=$(shim env SPILL_DEVICE_MEM="$budget" "$prog" "$@") || fail "$(basename "$prog") with the shim"
	echo "$n. $(basename "$prog") $*: without $a; with the shim ($budget budget): $b"
	[ "$a" = "$b" ] || fail "$(basename "$prog"): checksums differ"
}

same_checksum 1 gpu_oversub 256M 12 64 4

py=$(command -v python3 || true)
script="$(dirname "$0")/torch_gpt_shim.py"
if [ -n "$py" ] && "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	ran=$((ran + 1))
	"$py" "$script" >"$work/ref" 2>&1 || fail "torch without the shim: $(tail -3 "$work/ref")"
	peak=$(sed -n 's/^peak //p' "$work/ref")
	budget=$(( ${peak:-0} * 6 / 10 / 1048576 ))M
	echo "2. torch: peak reserved ${peak:-?} B, budget $budget"
	grep '^step' "$work/ref" >"$work/ref.loss"
	for caching in 1 0; do
		shim env SPILL_DEVICE_MEM=$budget PYTORCH_NO_CUDA_MEMORY_CACHING=$caching \
			"$py" "$script" >"$work/s$caching" 2>&1 ||
			fail "torch with the shim (NO_CUDA_MEMORY_CACHING=$caching): $(grep -m3 'refused' "$work/s$caching") $(tail -3 "$work/s$caching")"
		grep '^step' "$work/s$caching" >"$work/s$caching.loss"
		cmp -s "$work/ref.loss" "$work/s$caching.loss" ||
			fail "torch (NO_CUDA_MEMORY_CACHING=$caching): losses differ: $(paste -d' ' "$work/ref.loss" "$work/s$caching.loss" | head -3)"
		echo "   PYTORCH_NO_CUDA_MEMORY_CACHING=$caching: $(tr '\n' ' ' <"$work/s$caching.loss")"
	done
	best_a=9999 best_b=9999
	for k in 1 2 3; do
		t=$("$py" "$script" | sed -n 's/^seconds //p')
		best_a=$(awk -v a="$best_a" -v t="${t:-9999}" 'BEGIN { print (t < a ? t : a) }')
		t=$(shim env SPILL_DEVICE_MEM=$(( ${peak:-0} * 2 / 1048576 ))M "$py" "$script" | sed -n 's/^seconds //p')
		best_b=$(awk -v a="$best_b" -v t="${t:-9999}" 'BEGIN { print (t < a ? t : a) }')
	done
	ratio=$(awk -v a="$best_a" -v b="$best_b" 'BEGIN { printf "%.4f", b / a }')
	echo "3. torch, budget above its need: ${best_a} s without, ${best_b} s with the shim: slowdown=$ratio"
	awk -v r="$ratio" 'BEGIN { exit !(r <= 1.02) }' || fail "slowdown $ratio > 1.02"
else
	echo "2./3. SKIP: no PyTorch with CUDA"
fi

same_checksum 4 gpu_cublas_nccl 128M 8 2048 2 # 256 MiB allocated
[ "$ran" -gt 0 ] || { echo "SKIP: nothing to run"; exit 77; }
[ "$fails" -eq 0 ] || exit 1
echo ok
