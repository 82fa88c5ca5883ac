#!/usr/bin/env bash
# Regenerates the SPILL_* table in README.md (between the PARAMS markers) from
# common/params.def, through `spill params --markdown`.
# Usage: update-readme.sh SPILL_BINARY [--check]   (--check: fail if stale)
set -eu
bin=$1
mode=${2:-}
readme=$(dirname "$0")/../README.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk -v table="$("$bin" params --markdown)" '
	/<!-- PARAMS:BEGIN/ { print; print table; skip = 1; next }
	/<!-- PARAMS:END/ { skip = 0 }
	!skip { print }
' "$readme" >"$tmp"
if [ "$mode" = --check ]; then
	if ! cmp -s "$tmp" "$readme"; then
		echo "README.md's SPILL_* table is stale: run 'make readme'"
		diff -u "$readme" "$tmp" | head -20
		exit 1
	fi
	echo "README table up to date"
	exit 0
fi
cp "$tmp" "$readme"
echo "README.md: SPILL_* table updated"
