# `spill sim --nodes N`: several nodes of a profile's devices on the model
# backend, data parallel across them (issue: mpirun's runs predicted):
#  - gpt2-xl on 4 nodes of a100-nvlink-x8 at 200 Gb/s: the banner names the
#    link, the report has per-node utilization and an inter-node row of
#    exactly 2 x the gradient bytes a node in the middle of the chain sends,
#    and the scaling against one node (weak and strong) is printed;
#  - a slower link (10 Gb/s) costs: weak-scaling efficiency falls;
#  - --zero1: node 0 holds about a quarter of the optimizer state;
#  - bad input: --nodes that does not divide the batch, --net that is no
#    rate, --nodes under spill train: one line each, a non-zero exit.
set -u
spill="$O/bin/spill"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
args=(--model gpt2-xl --profile a100-nvlink-x8 --batch 128 --steps 2)

"$spill" sim "${args[@]}" --nodes 4 --net 200Gb/s --stats-json "$work/fast.json" >"$work/fast.out" 2>&1 ||
	fail "sim --nodes 4: $(tail -3 "$work/fast.out")"
grep -v "^step" "$work/fast.out" | grep -E "^nodes:|^utilization per node|^inter-node|^scaling|^  one node"
grep -q "^nodes: 4 simulated, each on batch 32 of 128; inter-node link 25.0 GB/s (200 Gb/s)" \
	"$work/fast.out" || fail "no nodes line"
grep -q "^utilization per node .*: 0: [0-9]*% 1: [0-9]*% 2: [0-9]*% 3: [0-9]*%" "$work/fast.out" ||
	fail "no per-node utilization"
# gpt2-xl's gradient in fp32, 4 bytes a parameter plus the head's tied copy
# of the embedding's (vocab x channels), sent forward and back
params=$(grep -o "[0-9.]*M parameters" "$work/fast.out" | head -1 | tr -dc 0-9.)
inter=$(awk '/^inter-node/ {print $3}' "$work/fast.out")
awk -v p="$params" -v g="$inter" 'BEGIN { want = 2 * 4 * (p * 1e6 + 50257 * 1600) / 1e9;
	d = g - want; if (d < 0) d = -d; exit !(d < 0.001 * want) }' ||
	fail "inter-node $inter GB per step, want 2 x 4 x (${params}M parameters + the tied head)"
weak() { sed -n 's/.*efficiency \([0-9]*\)% (weak scaling).*/\1/p' "$1"; }
strong() { sed -n 's/.*efficiency \([0-9]*\)%, strong scaling.*/\1/p' "$1"; }
fw=$(weak "$work/fast.out")
[ -n "$fw" ] && [ "$fw" -le 100 ] && [ "$fw" -ge 50 ] || fail "weak scaling at 200 Gb/s: '$fw'%"
[ -n "$(strong "$work/fast.out")" ] || fail "no strong scaling line"
"$spill" sim "${args[@]}" --nodes 4 --net 10Gb/s >"$work/slow.out" 2>&1 || fail "sim at 10 Gb/s"
sw=$(weak "$work/slow.out")
[ -n "$sw" ] && [ "$sw" -lt "$fw" ] || fail "10 Gb/s: weak scaling $sw% not below 200 Gb/s's $fw%"
echo "weak scaling: $fw% at 200 Gb/s, $sw% at 10 Gb/s"
grep -q '"nodes": 4' "$work/fast.json" || fail "stats: no nodes"
# ZeRO-1: node 0 holds about a quarter of the optimizer state (it shards by
# pack: 16 of them; a plan of 2 packs over 4 nodes cannot be even)
"$spill" sim "${args[@]}" --nodes 4 --zero1 --schedule dp-swap --packs 16 >"$work/zero.out" 2>&1 ||
	fail "sim --zero1"
pct=$(sed -n 's/^ZeRO-1: node 0 holds .* (\([0-9]*\)%)$/\1/p' "$work/zero.out")
[ -n "$pct" ] && [ "$pct" -ge 10 ] && [ "$pct" -le 35 ] ||
	fail "ZeRO-1 on 4 nodes: node 0 holds '$pct'% of the optimizer state"
grep "^ZeRO-1" "$work/zero.out"

"$spill" sim "${args[@]}" --nodes 3 >"$work/bad1" 2>&1 && fail "--nodes 3 with batch 128 ran"
grep -q "^spill sim: --batch 128 does not split over 3 nodes (--nodes 3)" "$work/bad1" ||
	fail "--nodes 3: $(cat "$work/bad1")"
"$spill" sim "${args[@]}" --nodes 2 --net fast >"$work/bad2" 2>&1 && fail "--net fast ran"
grep -q "^spill sim: --net fast: wants a rate" "$work/bad2" || fail "--net fast: $(cat "$work/bad2")"
"$spill" train --nodes 2 --steps 1 >"$work/bad3" 2>&1 && fail "train --nodes ran"
grep -q "spill sim takes --nodes" "$work/bad3" || fail "train --nodes: $(cat "$work/bad3")"
[ "$fails" = 0 ] || exit 1
echo ok
