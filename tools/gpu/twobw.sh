#!/usr/bin/env bash
# tools/gpu/twobw.sh — issue 34's 2bw checks on a GPU (check.sh step twobw):
# spill train --schedule 2bw on cuda, one device, 3 packs, 12 steps, fp32 and
# bf16: (1) flushing every step and once in 4 steps (--flush-every 1, 4) give
# the same bits (per-step losses equal: the same kernels in another order of
# steps' tasks); (2) cuda against the host backend's run of the same plan,
# losses within 1e-4 relative (fp32) or 5e-3 (bf16: another summation order and
# rounding); (3) GPT-2 (124M) tokens/s of 2bw flushing every 8 steps against
# 1f1b on the same packs. Prints a summary; exit 1 when (1) or (2) fails.
# O: the build (build/release).
set -u
O=${O:-build/release}
spill="$O/bin/spill"
work=$(mktemp -d)
rc=0
for p in fp32 bf16; do
	small=(--precision $p --layers 4 --channels 64 --heads 4 --seq 32 --batch 8 --steps 12
		--no-tune --schedule 2bw --packs 3 --microbatch 2 --devices 1 --seed 3 --budget 16M)
	for run in "cuda 1" "cuda 4" "host 4"; do
		set -- $run
		"$spill" train "${small[@]}" --backend $1 --flush-every $2 \
			--stats-json "$work/$p-$1-$2.json" >"$work/$p-$1-$2.out" 2>&1 ||
			{ tail -5 "$work/$p-$1-$2.out"; echo "twobw: $p $1 flush $2 failed"; rc=1; }
	done
	python3 - "$p" "$work/$p-cuda-1.json" "$work/$p-cuda-4.json" "$work/$p-host-4.json" <<'PY' || rc=1
import json, sys
p = sys.argv[1]
one, four, host = (json.load(open(f))["losses"] for f in sys.argv[2:5])
tol = 1e-4 if p == "fp32" else 5e-3
worst = max(abs(a - b) / abs(a) for a, b in zip(host, four))
print("2bw %s on cuda, flush every step: %s" % (p, " ".join("%.6f" % x for x in one)))
print("2bw %s on cuda, flush every 4:    %s" % (p, " ".join("%.6f" % x for x in four)))
print("  flush 1 and 4 the same bits: %s; against the host backend: worst %.3g (tolerance %g)"
      % (one == four, worst, tol))
sys.exit(0 if one == four and len(one) == 12 and worst <= tol else 1)
PY
done
for s in "1f1b" "2bw --flush-every 8"; do
	f="$work/gpt2-${s%% *}.json"
	"$spill" train --backend cuda --model gpt2 --steps 16 --no-tune --schedule $s --packs 4 \
		--microbatch 1 --devices 1 --stats-json "$f" >"$f.out" 2>&1 || tail -3 "$f.out"
done
python3 - "$work/gpt2-1f1b.json" "$work/gpt2-2bw.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print("GPT-2 124M on cuda, 4 packs on one device: 1f1b %.0f tokens/s, 2bw flushing every 8 "
      "steps %.0f tokens/s (%.2fx)" % (a["tokens_per_s"], b["tokens_per_s"],
                                        b["tokens_per_s"] / a["tokens_per_s"]))
PY
exit $rc
