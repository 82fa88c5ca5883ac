# The executor's bytes against tg_sim_swap's over 400 random plans with a host
# pool above the simulated disk tier, then 200 whose packs have objects of
# several sizes, so that the device pools fragment, with a host pool that
# holds everything (tests/runtime/fuzz_predicted_disk, seed 1, a few seconds
# each); `make fuzz-predicted FUZZ_COUNT=20000 FUZZ_SEED=...` runs more, and
# with small host pools too (those still disagree now and then).
set -u
f="$O/tests/runtime/fuzz_predicted_disk"
[ -x "$f" ] || { echo "SKIP: $f is not built"; exit 77; }
"$f" 400 1 || exit 1
FUZZ_SIZES=1 FUZZ_HOSTALL=1 "$f" 200 1
