#!/usr/bin/env bash
# `make demo`: what spill does on this machine's default backend.
set -eu
spill="$O/bin/spill"
echo "== devices (default backend: cuda if a GPU is present, else host) =="
"$spill" devices
echo
echo "== a model 3x larger than its device budget, through the vmm: eviction that knows the future (Belady) vs LRU =="
"$spill" swap-demo
echo
echo "== the same as a what-if on 4x GTX 1080 Ti (model backend, virtual time) =="
SPILL_BACKEND=model SPILL_PROFILE=gtx1080ti-x4 "$spill" devices
SPILL_BACKEND=model SPILL_PROFILE=gtx1080ti-x4 "$spill" swap-demo
