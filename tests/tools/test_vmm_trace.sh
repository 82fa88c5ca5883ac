# SPILL_VMM_TRACE_FILE: `spill swap-demo` on the model backend leaves the
# Belady run's transfers as a Chrome trace that json.load reads; one complete
# event per transfer, on named lanes, and its H2D and D2H bytes equal the
# demo's own table.
set -u
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
spill="$O/bin/spill"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
out=$(SPILL_BACKEND=model SPILL_VMM_TRACE_FILE="$dir/trace-%p.json" "$spill" swap-demo 2>&1) || {
	echo "$out"; echo "FAIL: swap-demo"; exit 1; }
echo "$out"
set -- "$dir"/trace-*.json
[ -f "$1" ] || { echo "FAIL: no trace-<pid>.json in $dir"; exit 1; }
line=$(grep '^belady' <<<"$out")
python3 - "$1" "$line" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
fields = sys.argv[2].split()
mib = lambda v, u: float(v) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 1024}[u]
h2d, d2h = mib(fields[3], fields[4]), mib(fields[5], fields[6])
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
lanes = {e["tid"]: e["args"]["name"] for e in t["traceEvents"] if e["name"] == "thread_name"}
assert t["otherData"]["transfers"] == t["otherData"]["kept"] == len(x) > 0, t["otherData"]
assert all(e["dur"] >= 0 and e["ts"] >= 0 and e["tid"] in lanes for e in x)
assert set(lanes.values()) == {"gpu0 h2d", "gpu0 d2h"}, lanes
assert all(e["name"].startswith("layer") for e in x)
got = {c: sum(e["args"]["bytes"] for e in x if e["cat"] == c) / 2**20 for c in ("h2d", "d2h")}
assert abs(got["h2d"] - h2d) < 0.01 and abs(got["d2h"] - d2h) < 0.01, (got, h2d, d2h)
print("trace ok: %d transfers, h2d %.2f MiB, d2h %.2f MiB" % (len(x), got["h2d"], got["d2h"]))
PY
