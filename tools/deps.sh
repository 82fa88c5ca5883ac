#!/usr/bin/env bash
# Installs the Debian packages spill builds and tests with, when missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -eu
pkgs=(build-essential liburing-dev libopenblas-dev libopenmpi-dev openmpi-bin fio
	glpk-utils libglpk-dev python3-torch python3-numpy clang-format bible-kjv)
if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: not a Debian system; install by hand: ${pkgs[*]} (and the CUDA toolkit at /usr/local/cuda)"
	exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages: ${missing[*]}"
	echo "deps: run: sudo apt-get update && sudo apt-get install -y ${missing[*]}"
	exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/spill-deps.log 2>&1 || {
	tail -n 30 /tmp/spill-deps.log
	echo "deps: apt-get install failed (full log: /tmp/spill-deps.log)"
	exit 1
}
echo "deps: installed"
