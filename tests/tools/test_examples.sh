# The public API from outside: `make install` into a fresh prefix, then the
# examples built against it with pkg-config alone (examples/Makefile) and run:
# the custom-layer MLP's loss falls under a budget that forces eviction, the
# raw task graph computes the right numbers while swapping; and the installed
# libspill.so exports nothing but spill_* symbols.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
fails=0
# shellcheck disable=SC2086 # the variant's knobs are separate words
if ! make -C "$repo" --no-print-directory -s ${TEST_MAKE_VARIANT:-} O="$O" PREFIX="$prefix" install \
	>"$work/install.log" 2>&1; then
	cat "$work/install.log"
	echo "FAIL: make install PREFIX=$prefix"
	exit 1
fi
for f in include/spill.h lib/libspill.so lib/libspill.a lib/pkgconfig/spill.pc bin/spill; do
	[ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; fails=$((fails + 1)); }
done
others=$(nm -D --defined-only "$prefix/lib/libspill.so" | awk '$3 != "" && $3 !~ /^spill_/ { print $3 }')
exported=$(nm -D --defined-only "$prefix/lib/libspill.so" | awk '$3 ~ /^spill_/' | wc -l)
echo "libspill.so exports $exported spill_* symbols"
if [ -n "$others" ]; then
	echo "FAIL: libspill.so exports symbols outside spill_*:"; echo "$others" | head -20
	fails=$((fails + 1))
fi
[ "$exported" -ge 20 ] || { echo "FAIL: only $exported spill_* symbols exported"; fails=$((fails + 1)); }
cp "$repo"/examples/*.c "$repo/examples/Makefile" "$work/"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
echo "pkg-config --cflags --libs spill: $(pkg-config --cflags --libs spill)"
if ! make -C "$work" --no-print-directory CFLAGS="-O2 -Wall -Wextra -Werror ${TEST_SAN_FLAGS:-}"; then
	echo "FAIL: the examples do not build against the installed library"
	exit 1
fi
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for ex in mlp graph; do
	if "$work/$ex"; then
		echo "ok: examples/$ex"
	else
		echo "FAIL: examples/$ex (exit $?)"; fails=$((fails + 1))
	fi
done
exit $((fails > 0))
