# The executor's bytes against tg_sim_swap's over 400 random plans with a host
# pool above the simulated disk tier (tests/runtime/fuzz_predicted_disk, seed 1,
# a few seconds); `make fuzz-predicted FUZZ_COUNT=20000 FUZZ_SEED=...` runs more.
set -u
f="$O/tests/runtime/fuzz_predicted_disk"
[ -x "$f" ] || { echo "SKIP: $f is not built"; exit 77; }
exec "$f" 400 1
