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
# Issue 33, one CLI: errors name the flag typed, not the SPILL_* variable behind it
expect_no_var() { # expect_no_var PATTERN ARGS...: expect_error, and no SPILL_ in the line
	local pattern=$1; shift
	expect_error "$pattern" -- "$@"
	if "$spill" "$@" 2>&1 >/dev/null | grep -q SPILL_; then
		echo "FAIL: spill $*: names a SPILL_* variable, not the flag"; fails=$((fails + 1))
	fi
}
expect_no_var "--devices: 1000 devices is out of range" train --devices 1000 --steps 1
expect_no_var "--devices: 1000 devices is out of range" sim --devices 1000
expect_no_var "--devices: 1000 devices is out of range" devices --devices 1000
expect_no_var "--budget abc: not a size" run --budget abc -- true
expect_no_var "--backend tpu is not one of" train --backend tpu
# sizes below the minimum are refused, saying it, not rounded to 0 B
expect_no_var "--budget 1K: below the minimum, 64K" train --budget 1K
expect_no_var "--budget 0: below the minimum, 64K" train --budget 0
expect_no_var "--budget 1M: below the minimum, 2M" run --budget 1M -- true
expect_no_var "--budget 1K: below the minimum, 64K" tune --budget 1K
expect_no_var "--device-mem 32K: below the minimum, 64K" sim --device-mem 32K
# a host pool too small is blamed on --host-mem, not on the device budget
expect_no_var "--host-mem 1.00 MiB is too small" train --host-mem 1M --steps 1
# the disk tier never creates a missing directory (held on main already)
nodir=$(mktemp -u -d)
expect_error "No such file or directory" -- train --disk "$nodir" --layers 1 --channels 32 --steps 1
[ ! -e "$nodir" ] || { echo "FAIL: --disk $nodir created it"; fails=$((fails + 1)); rm -rf "$nodir"; }
# an unknown schedule names the flag and the schedules there are
expect_no_var "--schedule 2BX: unknown schedule; one of auto, .*, 2bw" sim --model tiny --schedule 2BX
expect_no_var "--schedule twobw: unknown schedule; one of auto" train --layers 1 --channels 32 --steps 1 \
	--schedule twobw
# sim is the model backend only
expect_no_var "--backend host: sim runs on the model backend only" sim --backend host
expect_no_var "the model backend moves no data: no --resume" sim --resume
# sizes in messages are human-readable, not raw byte counts
expect_error "needs 12.89 GiB with microbatch 32, 15% reserve leaves 8.61 GiB" -- \
	tune --sim --model gpt2 --grid batch=32 --devices 8 --profile gtx1080ti-x8
# --help on every command: its own usage on stdout, exit 0, nothing run
for c in params devices swap-demo train sim tune report plan run prepare eval sample export version; do
	for h in --help -h; do
		out=$(timeout 10 "$spill" "$c" "$h" 2>&1)
		rc=$?
		if [ $rc -ne 0 ] || ! grep -q "^usage: spill $c" <<<"$out"; then
			echo "FAIL: spill $c $h: exit $rc, first line '$(head -1 <<<"$out")'"; fails=$((fails + 1))
		fi
	done
done
grep -q "default gpt2" <(timeout 10 "$spill" sim --help) || { echo "FAIL: sim --help: not its own defaults"; fails=$((fails + 1)); }
if "$spill" swap-demo --help | grep -q "^policy"; then echo "FAIL: swap-demo --help ran the demo"; fails=$((fails + 1)); fi
for c in train run; do # --budget's two meanings are told apart in both
	"$spill" $c --help | grep -q "budget.*share\|share.*budget\|--budget SIZE .*device memory the program sees" ||
		{ echo "FAIL: spill $c --help: --budget not explained"; fails=$((fails + 1)); }
done
# devices takes the backend flags
"$spill" devices --backend model | grep -q "^backend model" || { echo "FAIL: spill devices --backend model"; fails=$((fails + 1)); }
# one version string: include/spill.h's
want=$(sed -n 's/^#define SPILL_VERSION_STRING "\(.*\)"/\1/p' "$(dirname "$0")/../../include/spill.h")
for v in version --version; do
	[ "$("$spill" $v)" = "spill $want" ] || { echo "FAIL: spill $v: '$("$spill" $v 2>&1)', want 'spill $want'"; fails=$((fails + 1)); }
done
# progress lines fit 80 columns; "-" for no loss (model backend), "nan" for a diverged
# run, null in the JSON, and spill report reads it back
tmp=$(mktemp -d)
"$spill" sim --steps 2 --stats-json "$tmp/sim.json" >"$tmp/sim.out" 2>&1 || { echo "FAIL: spill sim --steps 2"; fails=$((fails + 1)); }
# (a diverged run stops with exit 1, the profile and the stats written)
if "$spill" train --layers 1 --channels 32 --steps 2 --lr 1e30 --grad-clip 0 --no-tune \
	--stats-json "$tmp/nan.json" >"$tmp/nan.out" 2>&1; then
	echo "FAIL: a diverging train exited 0"; fails=$((fails + 1))
fi
if awk 'length($0) > 79' "$tmp/sim.out" "$tmp/nan.out" | grep '^step'; then
	echo "FAIL: progress lines wider than 79 columns"; fails=$((fails + 1))
fi
grep -q '^step 1/2 | loss - ' "$tmp/sim.out" || { echo "FAIL: sim progress: no 'loss -'"; fails=$((fails + 1)); }
grep -q '^step 2/2 | loss nan ' "$tmp/nan.out" || { echo "FAIL: diverged progress: no 'loss nan'"; fails=$((fails + 1)); }
grep -q '"last_loss": null' "$tmp/sim.json" && grep -q '"losses": \[null, null\]' "$tmp/sim.json" &&
	grep -q '"last_loss": null' "$tmp/nan.json" || { echo "FAIL: NaN not written as null"; fails=$((fails + 1)); }
"$spill" report "$tmp/sim.json" | grep -q "no loss (the model backend" || { echo "FAIL: report of sim.json"; fails=$((fails + 1)); }
"$spill" report "$tmp/nan.json" | grep -q -- "-> nan: training diverged" || { echo "FAIL: report of nan.json"; fails=$((fails + 1)); }
rm -rf "$tmp"
# and the good paths work
for b in host model; do
	if ! SPILL_BACKEND=$b "$spill" devices >/dev/null; then
		echo "FAIL: SPILL_BACKEND=$b spill devices"; fails=$((fails + 1))
	fi
done
"$spill" params >/dev/null || { echo "FAIL: spill params"; fails=$((fails + 1)); }
exit $((fails > 0))
