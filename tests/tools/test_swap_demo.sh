# `spill swap-demo` runs on the host and model backends, really swaps, and
# Belady (next-use hints) moves no more bytes than LRU.
set -u
spill="$O/bin/spill"
fails=0
for b in host model; do
	out=$(SPILL_BACKEND=$b "$spill" swap-demo 2>&1)
	rc=$?
	echo "$out"
	if [ $rc -ne 0 ]; then
		echo "FAIL: SPILL_BACKEND=$b spill swap-demo: exit $rc"; fails=$((fails + 1)); continue
	fi
	belady=$(awk '/^belady/ { print $(NF-3) }' <<<"$out")
	lru=$(awk '/^lru/ { print $(NF-3) }' <<<"$out")
	if ! awk -v b="$belady" -v l="$lru" 'BEGIN { exit !(b > 0 && b <= 1.0 && l == 1.0) }'; then
		echo "FAIL: $b: belady vs LRU ratio '$belady', LRU '$lru'"; fails=$((fails + 1))
	fi
done
exit $((fails > 0))
