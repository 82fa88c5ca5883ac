#!/usr/bin/env bash
# Runs test executables and scripts, each under a timeout; prints one line per
# test and ends with "N passed, N failed, N skipped". Exit 77 means skipped.
# Usage: run-tests.sh [--gpu] [--filter PATTERN] TEST...
#   --gpu      run only tests named *gpu* and count a skip as a failure
#   TEST_TIMEOUT=seconds (default 600), TEST_LOG_DIR (default $O/test-logs)
set -u
gpu=0
filter=""
while [ $# -gt 0 ]; do
	case "$1" in
	--gpu) gpu=1; shift ;;
	--filter) filter="$2"; shift 2 ;;
	*) break ;;
	esac
done
timeout_s=${TEST_TIMEOUT:-600}
logdir=${TEST_LOG_DIR:-${O:-build}/test-logs}
mkdir -p "$logdir"
# CUDA's runtime reserves address space that ASAN's shadow gap would otherwise
# protect; harmless without a device, needed with one.
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

passed=0 failed=0 skipped=0
failed_names=()
for t in "$@"; do
	case "$t" in *"$filter"*) ;; *) continue ;; esac
	name=${t#"${O:-build}"/}
	name=${name#./}
	if [ "$gpu" = 1 ]; then
		case "$name" in *gpu*) ;; *) continue ;; esac
	fi
	log="$logdir/$(echo "$name" | tr '/' '_').log"
	start=$(date +%s.%N)
	if [[ "$t" == *.sh ]]; then
		O=${O:-build} timeout -k 10 "$timeout_s" bash "$t" >"$log" 2>&1 </dev/null
	else
		timeout -k 10 "$timeout_s" "$t" >"$log" 2>&1 </dev/null
	fi
	rc=$?
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		printf 'PASS  %-50s %6ss\n' "$name" "$secs"
	elif [ $rc -eq 77 ] && [ "$gpu" = 0 ]; then
		skipped=$((skipped + 1))
		why=$(grep -m1 -i 'skip' "$log" | cut -c1-80)
		printf 'SKIP  %-50s %6ss  %s\n' "$name" "$secs" "$why"
	else
		failed=$((failed + 1))
		failed_names+=("$name")
		what="exit $rc"
		[ $rc -eq 124 ] && what="timed out after ${timeout_s}s"
		[ $rc -gt 128 ] && [ $rc -ne 137 ] && what="killed by signal $((rc - 128))"
		[ $rc -eq 77 ] && what="skipped, but --gpu needs it to run"
		printf 'FAIL  %-50s %6ss  (%s; log %s)\n' "$name" "$secs" "$what" "$log"
		tail -n 40 "$log" | sed 's/^/      | /'
	fi
done
if [ ${#failed_names[@]} -gt 0 ]; then
	echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
