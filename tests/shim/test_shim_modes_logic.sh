# The logic of tools/gpu/shim_modes.sh (the GPU side-by-side of the shim's
# modes), not the shim: no GPU, no PyTorch. A stand-in for torch_gpt_shim.py
# (SHIM_MODES_PROG) prints its lines with fixed "seconds" per mode under the
# real `spill run`, which it reads back (SPILL_SHIM_MODE, SPILL_DEVICE_MEM):
#  1. every run finishes with the reference losses: exit 0, the ratios from
#     the stand-in's seconds (uvm 12 s, uvm-prefetch 3.2 s, unlimited 1 s,
#     spill 1.6 s: 7.50, 2.00, 0.62), the budget half the peak, the report
#     lines, valid JSON;
#  2. uvm slower than its limit, hostmap's loss off at step 3, the
#     cudaMallocAsync run crashing at step 2: exit 1, FAIL lines naming hostmap
#     (step 3) and cudaMallocAsync, uvm's ratio a bound (shim_vs_uvm>=),
#     the others still exact;
#  3. without the stand-in and with no PyTorch: exit 77.
# About 4 s. Skipped in sanitizer builds (a sanitized shim does not preload
# into the stand-in, a bash script; the script's logic is the same).
set -u
S="$(dirname "$0")/../../tools/gpu/shim_modes.sh"
[ -f "$O/lib/libspill-preload.so" ] || { echo "SKIP: the shim is not built"; exit 77; }
[ -z "${TEST_SAN_FLAGS:-}" ] || { echo "SKIP: a sanitizer build ($TEST_SAN_FLAGS)"; exit 77; }
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cat >"$w/prog" <<'EOF'
#!/usr/bin/env bash
# stands in for torch_gpt_shim.py: --steps N; FAKE_SLOW, FAKE_BAD, FAKE_CRASH name a run
steps=6
[ "$1" = --steps ] && steps=$2
m=unlimited
case ${LD_PRELOAD:-} in *libspill-preload*) m=${SPILL_SHIM_MODE:-spill} ;; esac
[ -n "${PYTORCH_CUDA_ALLOC_CONF:-}" ] && m="$m+$PYTORCH_CUDA_ALLOC_CONF"
report() { [ "$m" = unlimited ] || echo "spill shim: mode ${SPILL_SHIM_MODE:-spill}, budget $SPILL_DEVICE_MEM (stand-in)
spill shim: moved nothing (stand-in)" >&2; }
trap report USR1
exec 9<> <(:) # nap: read -t on a pipe nobody writes (a sleep process would load the shim again)
for ((i = 0; i < steps; i++)); do
	[ "$m" = "${FAKE_CRASH:-}" ] && [ $i = 2 ] && { echo "RuntimeError: CUDA error: an illegal memory access" >&2; exit 1; }
	if [ "$m" = "${FAKE_SLOW:-}" ]; then read -rt 0.4 -u 9; else read -rt 0.01 -u 9; fi
	l=$((10900 - 37 * i))
	[ "$m" = "${FAKE_BAD:-}" ] && [ $i = 3 ] && l=$((l + 1))
	printf 'step %d loss %d.%03d000\n' $i $((l / 1000)) $((l % 1000))
done
echo "peak 1073741824"
case $m in
unlimited) echo "seconds 1.0000" ;; spill) echo "seconds 1.6000" ;; uvm) echo "seconds 12.0000" ;;
uvm-prefetch) echo "seconds 3.2000" ;; hostmap) echo "seconds 8.0000" ;; *) echo "seconds 1.7000" ;;
esac
report
EOF
chmod +x "$w/prog"
export SHIM_MODES_PROG=$w/prog SHIM_MODES_STEPS=6 SHIM_MODES_KILL_AFTER=0.2

# 1 and 2 at once (2 waits for its cut run)
SHIM_MODES_JSON=$w/r.json bash "$S" >"$w/1" 2>&1 &
p1=$!
FAKE_SLOW=uvm FAKE_BAD=hostmap FAKE_CRASH="spill+backend:cudaMallocAsync" SHIM_MODES_LIMIT=1 SHIM_MODES_JSON='' \
	bash "$S" >"$w/2" 2>&1 &
p2=$!
wait $p1
rc=$?
sed 's/^/1| /' "$w/1"
[ $rc = 0 ] || fail "1: exit $rc"
[ "$(tail -1 "$w/1")" = "shim_vs_uvm=7.50 shim_vs_uvm_prefetch=2.00 shim_vs_unlimited=0.62" ] || fail "1: last line"
grep -q '^targets: shim_vs_uvm=7.50 (target >= 5) holds; .* shim_vs_unlimited=0.62 (target >= 0.5) holds' "$w/1" ||
	fail "1: target line"
[ "$(grep -c '^mode .* budget 512M .* losses equal yes  | spill shim: mode ' "$w/1")" = 6 ] || fail "1: six runs under 512M"
grep -q '^mode uvm-prefetch .*tokens/s 6400.0  seconds 3.2000 .*| spill shim: mode uvm-prefetch, budget 512M' "$w/1" ||
	fail "1: uvm-prefetch's line (5 x 4096 tokens in 3.2 s)"
grep -q '^    spill shim: moved nothing' "$w/1" || fail "1: the report's second line"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(d["shim_vs_uvm"] != "7.50")' "$w/r.json" ||
	fail "1: JSON"

wait $p2
rc=$?
sed 's/^/2| /' "$w/2"
[ $rc = 1 ] || fail "2: exit $rc"
grep -q '^FAIL: hostmap: losses differ .*(step 3: 10.790000, reference 10.789000)' "$w/2" || fail "2: hostmap's mismatch"
grep -q '^FAIL: spill backend:cudaMallocAsync: crashed: rc 1, 2 of 6 steps: .*illegal memory access' "$w/2" ||
	fail "2: the crash"
grep -q '^mode uvm .*tokens/s <=.*(cut at its 1s limit; a bound: .*losses equal yes (first [0-9] of 6 steps)  | spill shim: mode uvm' "$w/2" ||
	fail "2: uvm's bound"
tail -1 "$w/2" | grep -qx 'shim_vs_uvm>=[0-9.]* shim_vs_uvm_prefetch=2.00 shim_vs_unlimited=0.62' || fail "2: last line"
[ "$(grep -c '^FAIL' "$w/2")" = 2 ] || fail "2: two FAIL lines"

env -u SHIM_MODES_PROG PYTHON=/nonexistent/python3 bash "$S" >"$w/3" 2>&1
rc=$?
sed 's/^/3| /' "$w/3"
if [ $rc != 77 ] || ! grep -q '^SKIP: ' "$w/3"; then
	fail "3: exit $rc, not 77 with SKIP"
fi
[ "$fails" = 0 ] || exit 1
echo "ok (the script's logic, with a stand-in program)"
