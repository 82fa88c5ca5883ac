#!/usr/bin/env bash
# `make demo`: what spill does on this machine's default backend.
set -eu
spill="$O/bin/spill"
echo "== devices (default backend: cuda if a GPU is present, else host) =="
"$spill" devices
echo
echo "== the same machine as a what-if: 4x GTX 1080 Ti (model backend, virtual time) =="
SPILL_BACKEND=model SPILL_PROFILE=gtx1080ti-x4 "$spill" devices
