# The default run, as `make demo` starts it (`spill train` with no flags: the
# tiny GPT on bible-kjv, 200 steps, two emulated GPUs at a quarter of the
# state, the tuner on): with the default recipe (warmup, cosine decay,
# clipping at norm 1) no step's loss rises above the step-1 loss (the old
# constant lr spiked from 3.86 to 5.45 at step 10) and the last loss is no
# worse than the old recipe's 2.2517.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pick_python.sh"
pick_python json || { echo "SKIP: no python3"; exit 77; }
command -v bible >/dev/null 2>&1 || { echo "SKIP: no bible (Debian's bible-kjv)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$spill" train --stats-json "$work/run.json" >"$work/run.out" 2>&1 ||
	{ tail -20 "$work/run.out"; echo "FAIL: spill train"; exit 1; }
"$py" - "$work/run.json" <<'PY' || { tail -5 "$work/run.out"; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))
losses = r["losses"]
assert len(losses) == 200, len(losses)
first, worst = losses[0], max(losses[1:])
at = losses.index(worst) + 1
print("default run: step 1 loss %.4f, largest after it %.4f (step %d), last %.4f"
      % (first, worst, at, losses[-1]))
assert worst < first, "a spike above the step-1 loss: %.4f at step %d" % (worst, at)
assert losses[-1] <= 2.2517, "the last loss %.4f is worse than the old recipe's 2.2517" % losses[-1]
PY
