#!/usr/bin/env bash
# Installs the Debian packages spill builds and tests with, when missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
# Then Hugging Face's transformers (Debian has no package) with pip into
# Debian's python3, beside its torch: tests/train/test_hf.sh loads spill's
# exports with it. That one never fails the script: without it (no network,
# not root) the test skips, saying so.
set -eu
pkgs=(build-essential liburing-dev libopenblas-dev libopenmpi-dev openmpi-bin fio
	glpk-utils libglpk-dev python3-torch python3-numpy python3-pip clang-format bible-kjv)
# the newest release that still runs on Debian 12's torch 1.13 (CPU)
hf_pin="transformers==4.44.2"
hf_install() {
	local py=/usr/bin/python3
	"$py" -c "import torch, transformers" 2>/dev/null && return 0
	"$py" -c "import torch" 2>/dev/null || {
		echo "deps: no torch in $py: not installing transformers (test_hf.sh will skip)"
		return 0
	}
	if [ "$(id -u)" != 0 ]; then
		echo "deps: no transformers (test_hf.sh will skip); to install it run:"
		echo "deps:   sudo $py -m pip install --break-system-packages '$hf_pin'"
		return 0
	fi
	echo "deps: installing $hf_pin with pip"
	if "$py" -m pip install -q --break-system-packages --no-warn-script-location \
		--root-user-action=ignore --retries 2 --timeout 20 "$hf_pin" >/tmp/spill-pip.log 2>&1 &&
		"$py" -c "import transformers" 2>>/tmp/spill-pip.log; then
		echo "deps: installed $hf_pin"
	else
		tail -n 5 /tmp/spill-pip.log
		echo "deps: pip could not install $hf_pin (log: /tmp/spill-pip.log): test_hf.sh will skip"
	fi
	return 0
}
if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: not a Debian system; install by hand: ${pkgs[*]} $hf_pin (and the CUDA toolkit at /usr/local/cuda)"
	exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	[ "$st" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	hf_install
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
hf_install
