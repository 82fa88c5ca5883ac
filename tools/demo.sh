#!/usr/bin/env bash
# `make demo`: spill's main job on this machine's default backend — a GPT whose
# training state is four times the device budget, trained through the executor
# (emulated GPUs in host memory when there is no GPU), with the swap-volume
# profile at the end.
set -eu
spill="$O/bin/spill"
echo "== devices (default backend: cuda if a GPU is present, else host) =="
"$spill" devices
echo
echo "== spill train: a small GPT on the King James Bible, budget = 1/4 of the training state =="
"$spill" train
