#!/usr/bin/env bash
# tools/gpu/big.sh — issue 31's GPU check (check.sh step big): the largest GPT
# that `spill plan --largest` gives for this machine's own GPU memory, 3/4 of
# its host memory and 3/4 of the free disk under BIG_DISK (default /tmp),
# trained 5 steps on cuda with the disk tier; then a 7B-class GPT (C 4096, 32
# layers) in bf16 with a large batch (64 x 1024 tokens, input-batch grouping)
# and the update on the CPU. For each: parameters, tokens/s, model TFLOP/s
# (6 N + 12 L T C per token) and the model backend's prediction for the same
# plan (spill sim). O: the build (build/release).
set -u
O=${O:-build/release}
spill="$O/bin/spill"
work=$(mktemp -d)
disk=${BIG_DISK:-/tmp}/spill-big
mkdir -p "$disk"
gpu_g=${BIG_GPU_MIB:-$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)} # MiB
gpu_g=$((gpu_g / 1024))
host_g=$(awk '/MemTotal/ { print int($2 / 1048576 * 3 / 4) }' /proc/meminfo)
disk_g=$(df -BG --output=avail "${BIG_DISK:-/tmp}" | tail -1 | tr -dc 0-9)
disk_g=$((disk_g * 3 / 4))
sed -e "s/^name = .*/name = this-gpu/" -e "s/^memory = .*/memory = ${gpu_g}G/" \
	device/profiles/h100-sxm.prof >"$work/gpu.prof"
echo "big: GPU ${gpu_g}G, host ${host_g}G, disk ${disk_g}G at $disk"
"$spill" plan --largest --profile "$work/gpu.prof" --host-mem "${host_g}G" \
	--disk-mem "${disk_g}G" --disk "$disk" | tee "$work/plan.out"
C=$(awk '/^largest GPT/ { gsub(",", "", $8); print $8 }' "$work/plan.out")
L=$(awk '/^largest GPT/ { print $9 }' "$work/plan.out")
[ -n "$C" ] && [ -n "$L" ] || { echo "big: no plan"; exit 1; }
report() { # name json
	python3 - "$2" "$1" "$L" "$C" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("%s: %s; %.0f tokens/s" % (sys.argv[2], r["plan"], r["tokens_per_s"]))
PY
}
flags=(--model 10b --layers "$L" --channels "$C" --heads "$L" --steps 5 --no-tune
	--host-mem "${host_g}G" --disk "$disk")
SPILL_DISK_MEM=${disk_g}G "$spill" sim "${flags[@]}" --profile "$work/gpu.prof" \
	--stats-json "$work/sim.json" >"$work/sim.out" 2>&1 && report "largest, predicted" "$work/sim.json"
SPILL_DISK_MEM=${disk_g}G timeout 300 "$spill" train --backend cuda "${flags[@]}" \
	--stats-json "$work/big.json" >"$work/big.out" 2>&1 && report "largest, measured" "$work/big.json" ||
	tail -5 "$work/big.out"
seven=(--model 10b --layers 32 --channels 4096 --heads 32 --batch 64 --precision bf16
	--update-on-cpu --steps 5 --no-tune --host-mem "${host_g}G")
"$spill" sim "${seven[@]}" --profile "$work/gpu.prof" --stats-json "$work/s7.json" \
	>"$work/s7.out" 2>&1 && report "7B bf16, predicted" "$work/s7.json"
timeout 240 "$spill" train --backend cuda "${seven[@]}" --stats-json "$work/t7.json" \
	>"$work/t7.out" 2>&1 && report "7B bf16, measured" "$work/t7.json" || tail -5 "$work/t7.out"
grep -h "H2D" "$work/big.out" "$work/t7.out" 2>/dev/null | head -4
