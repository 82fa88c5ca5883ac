#!/bin/bash
# bench/bf16_compare.sh — `spill train --precision bf16` against fp32 on the
# default corpus over 200 steps (tests/train/test_bf16_train.sh with
# BF16_STEPS=200; about 4 minutes on 2 cores): prints both final losses, the
# validation losses and the weight bytes over the host link, and fails if the
# bf16 final loss is not within 2% of fp32's or the weights are not halved.
# Usage: make all && bench/bf16_compare.sh [STEPS [SEED]]   (O: the build
# directory; SEED the trainer's default, 1337)
set -u
cd "$(dirname "$0")/.."
export O=${O:-build/release}
BF16_STEPS=${1:-200} BF16_SEED=${2:-1337} exec bash tests/train/test_bf16_train.sh
