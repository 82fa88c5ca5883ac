# Bad input to the `spill` command: every malformed SPILL_* value, an unknown
# backend, more devices than exist, an unknown command — one line on stderr that
# names what is wrong, a non-zero exit, and no crash (exit code < 128).
set -u
spill="$O/bin/spill"
fails=0
bad_profile=$(mktemp --suffix=.prof)
trap 'rm -f "$bad_profile"' EXIT
printf 'name = x\nflop = 1 TFLOP/s\n' >"$bad_profile"
expect_error() { # expect_error PATTERN ENV... -- ARGS...
	local pattern=$1; shift
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	local out rc
	out=$(env "${envs[@]}" "$spill" "$@" 2>&1 >/dev/null)
	rc=$?
	if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then
		echo "FAIL: ${envs[*]} spill $*: exit $rc (want 1..127)"; fails=$((fails + 1)); return
	fi
	if ! grep -q -- "$pattern" <<<"$out"; then
		echo "FAIL: ${envs[*]} spill $*: message '$out' lacks '$pattern'"; fails=$((fails + 1)); return
	fi
	if [ "$(grep -c . <<<"$out")" -ne 1 ]; then
		echo "FAIL: ${envs[*]} spill $*: want one line, got: $out"; fails=$((fails + 1)); return
	fi
	echo "ok: ${envs[*]} spill $* -> $out"
}
expect_error SPILL_BACKEND SPILL_BACKEND=tpu -- devices
expect_error SPILL_DEVICE_MEM SPILL_DEVICE_MEM=lots -- devices
expect_error SPILL_DEVICE_MEM SPILL_DEVICE_MEM=1.5G -- params
expect_error SPILL_DEVICES SPILL_DEVICES=-2 -- devices
expect_error SPILL_DEVICES SPILL_DEVICES=two -- devices
expect_error SPILL_HOST_MEM SPILL_HOST_MEM=12Q -- devices
expect_error SPILL_IO_QUEUE_DEPTH SPILL_IO_QUEUE_DEPTH=x -- devices
expect_error SPILL_STATS SPILL_STATS=maybe -- devices
expect_error SPILL_DEBUG SPILL_DEBUG=LOUD -- devices
expect_error DISKS SPILL_DEBUG_SUBSYS=VMM,DISKS -- devices
expect_error no-such-profile SPILL_BACKEND=model SPILL_PROFILE=no-such-profile -- devices
expect_error "no CUDA device" SPILL_BACKEND=cuda CUDA_VISIBLE_DEVICES= -- devices
expect_error "device" SPILL_BACKEND=host SPILL_DEVICES=999 -- devices
expect_error "profile gtx1080ti-x4 has 4" SPILL_BACKEND=model SPILL_DEVICES=8 -- devices
expect_error "CUDA device" SPILL_BACKEND=cuda SPILL_DEVICES=15 -- devices
expect_error "unknown key 'flop'" SPILL_BACKEND=model SPILL_PROFILE=$bad_profile -- devices
expect_error "subsystem .DISKS. (expected ALL, VMM" SPILL_DEBUG_SUBSYS=VMM,DISKS -- devices
expect_error "unknown command" -- frobnicate
# and the good paths work
for b in host model; do
	if ! SPILL_BACKEND=$b "$spill" devices >/dev/null; then
		echo "FAIL: SPILL_BACKEND=$b spill devices"; fails=$((fails + 1))
	fi
done
"$spill" params >/dev/null || { echo "FAIL: spill params"; fails=$((fails + 1)); }
exit $((fails > 0))
