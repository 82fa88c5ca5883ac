#!/usr/bin/env bash
# `make bench-train`: spill train under a device budget of a quarter of the
# training state (4x oversubscription) against the same run with the whole
# device, on the cuda backend (one GPU), side by side in one run, with the
# model backend's prediction of both (spill sim on the GPU's profile).
# Last line: oversubscribed_vs_unlimited=R predicted=P (tokens/s ratios of the
# steady steps; target R >= 0.8). Writes bench/results/train.json.
#
# Without a CUDA device it says so and runs the same comparison on the host
# backend (emulated GPUs; a small model; times are this machine's CPU).
# Knobs: BENCH_MODEL (gpt2), BENCH_STEPS (20), BENCH_PROFILE (the model
# backend's profile for the prediction: h100-sxm on cuda).
set -eu
spill="$O/bin/spill"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=${BENCH_STEPS:-20}

if SPILL_BACKEND=cuda "$spill" devices >"$work/devices" 2>&1; then
	backend=cuda
	model=${BENCH_MODEL:-gpt2}
	profile=${BENCH_PROFILE:-h100-sxm}
	common=(--backend cuda --devices 1 --model "$model" --steps "$steps")
	unlimited=()
else
	echo "bench-train: $(tail -1 "$work/devices")"
	echo "bench-train: no CUDA device: the same comparison on the host backend instead"
	backend=host
	model=${BENCH_MODEL:-tiny}
	profile=${BENCH_PROFILE:-gtx1080ti-x4}
	common=(--backend host --devices 1 --model "$model" --steps "$steps" --device-mem 2G)
	unlimited=(--budget 1G)
fi

# the training state, from a one-step run's banner
"$spill" train "${common[@]}" "${unlimited[@]}" --steps 1 --no-tune >"$work/probe" 2>&1 ||
	{ cat "$work/probe"; exit 1; }
state=$(sed -n 's/.*training state \([0-9.]* [KMGT]\?i\?B\).*/\1/p' "$work/probe" | head -1)
bytes=$("$py" -c "
import sys
v, u = sys.argv[1].split()
print(int(float(v) * {'B': 1, 'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30, 'TiB': 1 << 40}[u]))" "$state")
quarter=$((bytes / 4))
echo "bench-train: $backend backend, GPT-2 $model, training state $state, budget $quarter B (a quarter)"

run() { # name, flags...
	local name=$1
	shift
	"$spill" train "${common[@]}" "$@" --stats-json "$work/$name.json" >"$work/$name.out" 2>&1 ||
		{ cat "$work/$name.out"; exit 1; }
	grep "^plan:\|^tuner:" "$work/$name.out" | awk '!seen[$0]++' | sed "s/^/  $name: /"
	"$spill" sim --model "$model" --devices 1 --profile "$profile" --steps 3 "$@" \
		--stats-json "$work/$name.sim.json" >"$work/$name.sim.out" 2>&1 ||
		{ cat "$work/$name.sim.out"; exit 1; }
}
run unlimited "${unlimited[@]}"
run quarter --budget "$quarter"

mkdir -p bench/results
"$py" - "$work" "$backend" "$model" "$profile" bench/results/train.json <<'PY'
import json, sys
work, backend, model, profile, out = sys.argv[1:]
def steady(name):
    r = json.load(open(f"{work}/{name}.json"))
    t = r["step_times"][3:] or r["step_times"]
    tok = r["tokens_per_s"] * r["step_s"]  # tokens per step
    return r, tok / (sum(t) / len(t))
def sim(name):
    return json.load(open(f"{work}/{name}.sim.json"))["tokens_per_s"]
res = {"backend": backend, "model": model, "profile": profile}
for name in ("unlimited", "quarter"):
    r, tps = steady(name)
    res[name] = {"plan": r["plan"], "tokens_per_s": tps, "predicted_tokens_per_s": sim(name),
                 "h2d_gb_per_step": sum(r["measured"]["h2d"].values()) / 1e9,
                 "d2h_gb_per_step": sum(r["measured"]["d2h"].values()) / 1e9}
    print("%-10s %-70s %10.0f tok/s measured %10.0f predicted  H2D %.3f GB/step"
          % (name, r["plan"], tps, res[name]["predicted_tokens_per_s"],
             res[name]["h2d_gb_per_step"]))
R = res["quarter"]["tokens_per_s"] / res["unlimited"]["tokens_per_s"]
P = res["quarter"]["predicted_tokens_per_s"] / res["unlimited"]["predicted_tokens_per_s"]
res["oversubscribed_vs_unlimited"], res["predicted"] = R, P
json.dump(res, open(out, "w"), indent=1)
print("oversubscribed_vs_unlimited=%.3f predicted=%.3f" % (R, P))
PY
