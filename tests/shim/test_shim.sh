# The preload shim on the host-emulated CUDA driver (tests/shim/fakecu.h):
#  - a program whose working set is 3x the budget prints the same checksum with
#    and without the shim (legacy and per-thread default stream builds), and the
#    report's bytes per direction equal what the emulated driver copied minus
#    the program's own copies;
#  - on a repeating launch sequence Belady-from-recording moves fewer bytes than
#    LRU (both printed);
#  - resolvers: unknown entry points pass through unchanged, versions and the
#    per-thread flag pick the wrapper of the same ABI, RTLD_NEXT still works;
#    IPC of managed memory is a CUDA error;
#  - hostile programs: allocation above the budget, double free, unknown free,
#    launch and copy on freed memory: the driver's error codes, no crash;
#  - four threads allocating, copying, launching and freeing at once: the same
#    checksums (and clean under TSAN=1, which builds all of this with it);
#  - two threads on two emulated devices, each at 3x its own budget, then peer
#    copies and a kernel on one device reading the other's buffers: the same
#    checksums, each device's peak within its budget (the emulated devices are
#    sized so memory on the wrong device runs out), per-device report figures;
#  - kernels reaching buffers through a pointer table in device memory: the
#    same checksum with the host fallback, a fault without it;
#  - stream-ordered allocation (cuMemAllocAsync, a pool of the program's own),
#    pitched 2D, 3D and peer copies at 3x the budget: the same checksum; a
#    buffer freed on one stream and reused on another while the first still
#    has work queued on it keeps the new owner's bytes; an exportable pool is
#    passed through with one log line and counted in the budget (the emulated
#    device's peak stays within it);
#  - two devices, each with cuMemCreate chunks in a range the program maps
#    itself and plain buffers at 3x its budget, in spill mode and in every
#    baseline: threads on both devices at once, a context switch before every
#    launch, chunks of device 1 made and mapped with device 0's context
#    current, memory unmapped and freed by another thread and context: the
#    same checksums, each device's chunks counted on it, each device's peak
#    within its budget (plus the shim's balloon in the uvm modes), per-device
#    report figures;
#  - a program that reserves a range and maps cuMemCreate chunks into it
#    (expandable segments) at 3x the budget: the same checksums, the chunks
#    evicted and restored at their addresses, the device's peak within the
#    budget, an exportable chunk pinned with one log line;
#  - the baselines SPILL_SHIM_MODE=uvm|uvm-prefetch|hostmap run the same
#    programs at 3x the budget with the same checksums, and the report names
#    the mode; a bad mode is one line naming SPILL_SHIM_MODE.
set -u
P="$O/lib/libspill-preload.so"
D="$O/tests/shim"
[ -f "$P" ] && [ -x "$D/cuprog_workset" ] || { echo "SKIP: the shim is not built (no CUDA headers)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# an LD_PRELOAD library ahead of the sanitizer runtime is fine here
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0"
export SPILL_HOST_MEM=256M

shim() { LD_PRELOAD="$P" SHIM_EXPECTED=1 "$@"; }

# ---- working set 3x the budget: 12 buffers of 4 MiB, budget 16 MiB ----------------
for prog in cuprog_workset cuprog_ptds; do
	"$D/$prog" 12 4 3 >"$work/plain" 2>&1 || fail "$prog without the shim: $(tail -2 "$work/plain")"
	SPILL_DEVICE_MEM=16M SPILL_SHIM_STATS_JSON="$work/$prog.json" shim "$D/$prog" 12 4 3 \
		>"$work/shim" 2>"$work/shim.err" || fail "$prog with the shim: $(tail -3 "$work/shim.err")"
	a=$(grep checksum= "$work/plain")
	b=$(grep checksum= "$work/shim")
	echo "$prog: without $a, with $b"
	[ -n "$a" ] && [ "$a" = "$b" ] || fail "$prog: checksums differ"
	grep -q '^spill shim: moved h2d' "$work/shim.err" || fail "$prog: no report at exit"
	grep -q '^spill shim: mode spill, budget 16.00 MiB' "$work/shim.err" || fail "$prog: the report does not name the mode"
	python3 - "$work/$prog.json" "$work/shim" <<'EOF' || fail "$prog: report bytes differ from the driver's"
import json, re, sys
j = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
app = dict(zip(("h2d", "d2h"), re.findall(r"app h2d=(\d+) d2h=(\d+)", out)[0]))
drv = dict(zip(("h2d", "d2h"), re.findall(r"driver h2d=(\d+) d2h=(\d+)", out)[0]))
ok = True
for k in ("h2d", "d2h"):
    shim, moved = j["bytes"][k], int(drv[k]) - int(app[k])
    print(f"  {k}: report {shim} bytes, driver copied {moved} for the shim")
    ok &= shim == moved
ok &= j["bytes"]["h2d"] > 0 and j["bytes"]["d2h"] > 0
ok &= sum(a["h2d"] for a in j["per_allocation"]) == j["bytes"]["h2d"]
ok &= any(k["name"] == "step" and k["ops"] == 36 for k in j["per_kernel"])
sys.exit(0 if ok else 1)
EOF
done

# ---- Belady from the recorded iteration vs LRU, same program -------------------------
for pol in lru belady; do
	SPILL_DEVICE_MEM=16M SPILL_SHIM_POLICY=$pol SPILL_SHIM_STATS_JSON="$work/$pol.json" \
		shim "$D/cuprog_workset" 12 4 8 >"$work/$pol.out" 2>"$work/$pol.err" ||
		fail "policy $pol: $(tail -3 "$work/$pol.err")"
done
python3 - "$work/lru.json" "$work/belady.json" <<'EOF' || fail "belady does not move fewer bytes than lru"
import json, sys
l, b = (json.load(open(f)) for f in sys.argv[1:3])
lv = l["bytes"]["h2d"] + l["bytes"]["d2h"]
bv = b["bytes"]["h2d"] + b["bytes"]["d2h"]
print(f"  lru moved {lv} bytes, belady (an iteration of {b['period']} operations, {b['repeats']} repeats) moved {bv}: belady/lru {bv / lv:.3f}")
sys.exit(0 if b["policy"] == "belady" and b["period"] == 16 and l["repeats"] == 0 and bv < lv else 1)
EOF
[ "$(grep checksum= "$work/lru.out")" = "$(grep checksum= "$work/belady.out")" ] ||
	fail "lru and belady give different checksums"

# ---- pointers the shim cannot see: a table in device memory, 3x the budget ---------------
# With the host fallback (the default) an evicted buffer is host memory at its
# address: the same checksum. Without it the kernels touch unmapped memory and
# the program dies, as it would fault a GPU: the test reaches what it means to.
"$D/cuprog_indirect" 12 4 3 >"$work/i0" 2>&1 || fail "indirect without the shim: $(tail -2 "$work/i0")"
SPILL_DEVICE_MEM=16M SPILL_SHIM_STATS_JSON="$work/indirect.json" shim "$D/cuprog_indirect" 12 4 3 \
	>"$work/i1" 2>"$work/i1.err" || fail "indirect with the shim: $(tail -3 "$work/i1.err")"
a=$(grep checksum= "$work/i0")
b=$(grep checksum= "$work/i1")
echo "indirect (pointer table in device memory): without $a, with $b; $(grep -o 'host_fallbacks":[0-9]*' "$work/indirect.json")"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "indirect: checksums differ"
grep -q '"host_fallbacks":[1-9]' "$work/indirect.json" || fail "indirect: no host fallback counted"
if [ -z "${TSAN_OPTIONS:-}${ASAN_OPTIONS%%:verify_asan_link_order=0}" ]; then
	SPILL_SHIM_HOST_FALLBACK=0 SPILL_DEVICE_MEM=16M shim "$D/cuprog_indirect" 12 4 3 >"$work/i2" 2>&1 &&
		fail "indirect without the host fallback did not fault"
fi

# ---- stream-ordered allocation, pools, 2D/3D/peer copies: 3x the budget ---------------------
for prog in cuprog_async cuprog_async_ptds; do
	"$D/$prog" 12 4 3 >"$work/a0" 2>&1 || fail "$prog without the shim: $(tail -2 "$work/a0")"
	SPILL_DEVICE_MEM=16M shim "$D/$prog" 12 4 3 >"$work/a1" 2>"$work/a1.err" ||
		fail "$prog with the shim: $(tail -3 "$work/a1") $(grep -v '^[#a-z ]' "$work/a1.err" | tail -3)"
	a=$(grep checksum= "$work/a0")
	b=$(grep checksum= "$work/a1")
	echo "$prog: without $a, with $b; $(grep -h '^reuse' "$work/a1" | tr '\n' ' ')$(grep 'device peak' "$work/a1")"
	[ -n "$a" ] && [ "$a" = "$b" ] || fail "$prog: checksums differ"
	for f in a0 a1; do
		grep -q '^reuse=1$' "$work/$f" && grep -q '^reuse: ok$' "$work/$f" ||
			fail "$prog ($f): no reuse across streams, or its bytes were overwritten"
	done
	[ "$(grep -c 'memory pool 0x[0-9a-f]* is exportable' "$work/a1.err")" -eq 1 ] ||
		fail "$prog: not one log line for the exportable pool"
	peak=$(sed -n 's/^device peak=//p' "$work/a1")
	[ -n "$peak" ] && [ "$peak" -le $((16 << 20)) ] || fail "$prog: device peak $peak over the 16 MiB budget"
done

# ---- chunks the program maps itself (cuMemCreate/cuMemMap, expandable segments): 3x the budget ----
"$D/cuprog_vmm" 12 4 3 >"$work/v0" 2>&1 || fail "cuprog_vmm without the shim: $(tail -2 "$work/v0")"
SPILL_DEVICE_MEM=16M shim "$D/cuprog_vmm" 12 4 3 >"$work/v1" 2>"$work/v1.err" ||
	fail "cuprog_vmm with the shim: $(tail -3 "$work/v1") $(grep -v '^[#a-z ]' "$work/v1.err" | tail -3)"
for k in checksum remap; do
	a=$(grep "^$k=" "$work/v0")
	b=$(grep "^$k=" "$work/v1")
	[ -n "$a" ] && [ "$a" = "$b" ] || fail "cuprog_vmm: $k differs ($a, $b)"
done
echo "cuprog_vmm: without $(grep -h '^checksum\|^remap' "$work/v0" | tr '\n' ' ')with $(grep -h '^checksum\|^remap' "$work/v1" | tr '\n' ' ')$(grep -o '[0-9]* chunks .*' "$work/v1.err"); $(grep 'device peak' "$work/v1")"
grep -q 'chunks the program mapped itself: [1-9][0-9]* evictions' "$work/v1.err" || fail "cuprog_vmm: no chunk evicted"
[ "$(grep -c 'memory chunk 0x[0-9a-f]* (4194304 bytes) is exportable' "$work/v1.err")" -eq 1 ] ||
	fail "cuprog_vmm: not one log line for the exportable chunk"
peak=$(sed -n 's/^device peak=//p' "$work/v1")
[ -n "$peak" ] && [ "$peak" -le $((16 << 20)) ] || fail "cuprog_vmm: device peak $peak over the 16 MiB budget"

# ---- the baselines: one switch, the same programs, the same checksums -----------------------
# SPILL_SHIM_MODE=uvm (managed memory, the driver oversubscribes: the device
# beyond the budget held by the shim), uvm-prefetch (and cuMemPrefetchAsync
# before each launch) and hostmap (zero-copy pinned host memory beyond the
# budget), at 3x the budget, against the same runs without the shim.
for prog in cuprog_workset cuprog_async cuprog_indirect; do
	"$D/$prog" 12 4 3 >"$work/m0" 2>&1 || fail "$prog without the shim: $(tail -2 "$work/m0")"
	a=$(grep checksum= "$work/m0")
	line="$prog:"
	for mode in uvm uvm-prefetch hostmap; do
		SPILL_SHIM_MODE=$mode SPILL_DEVICE_MEM=16M SPILL_SHIM_STATS_JSON="$work/m.json" \
			shim "$D/$prog" 12 4 3 >"$work/m1" 2>"$work/m1.err" ||
			fail "$prog in mode $mode: $(tail -3 "$work/m1") $(grep -v '^[#a-z ]' "$work/m1.err" | tail -3)"
		b=$(grep checksum= "$work/m1")
		[ -n "$a" ] && [ "$a" = "$b" ] || fail "$prog in mode $mode: checksums differ ($a, $b)"
		grep -q "^spill shim: mode $mode, budget 16.00 MiB" "$work/m1.err" ||
			fail "$prog in mode $mode: the report does not name the mode"
		python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['mode'] != sys.argv[2])" \
			"$work/m.json" "$mode" || fail "$prog in mode $mode: the JSON does not name the mode"
		case $mode in
		uvm) grep -q '^spill shim: held beyond the budget: 1008.00 MiB' "$work/m1.err" ||
			fail "$prog in mode uvm: the device beyond the budget is not held" ;;
		uvm-prefetch) grep -q '^spill shim: [1-9][0-9]* prefetches of' "$work/m1.err" ||
			fail "$prog in mode uvm-prefetch: nothing prefetched" ;;
		hostmap) grep -q 'mapped from pinned host memory [1-9]' "$work/m1.err" ||
			fail "$prog in mode hostmap: nothing mapped from host memory" ;;
		esac
		line="$line $mode $b;"
	done
	echo "$line"
done
# what the emulated driver saw of the prefetches
SPILL_SHIM_MODE=uvm-prefetch SPILL_DEVICE_MEM=16M shim "$D/cuprog_workset" 12 4 3 >"$work/m2" 2>&1
grep -q 'prefetched=[1-9]' "$work/m2" || fail "uvm-prefetch: the driver saw no prefetch"
echo "uvm-prefetch: the emulated driver saw $(grep -o 'prefetched=[0-9]*' "$work/m2") bytes; $(grep -o '[0-9]* prefetches of .*' "$work/m2")"
SPILL_SHIM_MODE=bogus SPILL_DEVICE_MEM=16M shim "$D/cuprog_workset" 12 4 3 >/dev/null 2>"$work/bad_mode"
[ "$(grep -c . "$work/bad_mode")" -eq 1 ] &&
	grep -q "SPILL_SHIM_MODE='bogus' is not one of spill|uvm|uvm-prefetch|hostmap" "$work/bad_mode" ||
	fail "a bad SPILL_SHIM_MODE: not one line naming it: $(cat "$work/bad_mode")"

# ---- resolvers ------------------------------------------------------------------------
SHIM_EXPECTED=0 "$D/cuprog_resolve" >"$work/r0" 2>&1 || fail "resolve without the shim: $(grep FAIL "$work/r0")"
shim "$D/cuprog_resolve" >"$work/r1" 2>&1 || fail "resolve with the shim: $(grep FAIL "$work/r1")"
grep -q 'IPC of memory the shim manages is not supported' "$work/r1" || fail "no log line for the IPC refusal"
sed 's/^/    /' "$work/r1" | grep -v '^    \[' | head -20

# ---- hostile programs -----------------------------------------------------------------
SHIM_EXPECTED=0 "$D/cuprog_hostile" 8 >"$work/h0" 2>&1 || fail "hostile without the shim: $(grep FAIL "$work/h0")"
SPILL_DEVICE_MEM=8M shim "$D/cuprog_hostile" 8 >"$work/h1" 2>&1 || fail "hostile with the shim: $(grep FAIL "$work/h1") $(tail -2 "$work/h1")"
grep -q 'hostile: ok' "$work/h1" || fail "hostile: did not finish"
for msg in 'double free' 'refused, it reaches device memory that was freed (parameter 0, pointer 0x' 'cannot be made resident\|larger than the stable budget' \
	'1 launches had a freed address inside a struct parameter'; do
	grep -q "$msg" "$work/h1" || fail "hostile: no log line matching '$msg'"
done

# ---- threads ----------------------------------------------------------------------------
"$D/cuprog_threads" 4 6 512 5 >"$work/t0" 2>&1 || fail "threads without the shim: $(tail -2 "$work/t0")"
SPILL_DEVICE_MEM=4M shim "$D/cuprog_threads" 4 6 512 5 >"$work/t1" 2>"$work/t1.err" ||
	fail "threads with the shim: $(tail -3 "$work/t1.err")"
grep -q WARNING "$work/t1.err" && fail "threads: sanitizer report: $(grep -m3 -A3 WARNING "$work/t1.err")"
[ "$(grep -c checksum= "$work/t1")" -eq 4 ] && cmp -s <(grep checksum= "$work/t0") <(grep checksum= "$work/t1") ||
	fail "threads: checksums differ"
echo "threads: $(grep -c checksum= "$work/t1") threads, same checksums with and without the shim"

# ---- two devices ---------------------------------------------------------------------
# Two threads, each on its own device with 12 buffers of 4 MiB (3x a 16 MiB
# budget per device), then peer copies and a kernel on device 0 reading device
# 1's buffers. Each emulated device holds 20 MiB with the shim: memory put on
# the wrong device, or a budget not per device, is an out-of-memory error.
FAKECU_DEVICES=2 FAKECU_DEVICE_MEM=64M "$D/cuprog_multi" 12 4 3 >"$work/m0" 2>&1 ||
	fail "two devices without the shim: $(tail -2 "$work/m0")"
FAKECU_DEVICES=2 FAKECU_DEVICE_MEM=20M SPILL_DEVICE_MEM=16M SPILL_SHIM_STATS_JSON="$work/m.json" \
	shim "$D/cuprog_multi" 12 4 3 >"$work/m1" 2>"$work/m1.err" ||
	fail "two devices with the shim: $(tail -3 "$work/m1.err")"
grep -q WARNING "$work/m1.err" && fail "two devices: sanitizer report: $(grep -m3 -A3 WARNING "$work/m1.err")"
[ -n "$(grep checksum= "$work/m0")" ] && [ "$(grep checksum= "$work/m0")" = "$(grep checksum= "$work/m1")" ] ||
	fail "two devices: checksums differ: $(grep checksum= "$work/m0" "$work/m1" | tr '\n' ' ')"
python3 - "$work/m.json" "$work/m1" <<'EOF' || fail "two devices: report or peaks wrong"
import json, re, sys
j = json.load(open(sys.argv[1]))
devs = {d["device"]: d for d in j["devices"]}
assert set(devs) == {0, 1}, devs.keys()
for d in devs.values():
    assert d["budget"] == 16 << 20, d
    assert d["bytes"]["h2d"] > 0 and d["batch_releases"] > 0, d  # pressure on each device
assert devs[1]["peer_operations"] > 0, devs[1]  # device 0's kernel read device 1's buffers
peaks = re.search(r"peak0=(\d+) peak1=(\d+)", open(sys.argv[2]).read())
assert all(int(p) <= 16 << 20 for p in peaks.groups()), peaks.groups()
EOF
grep -q 'device 1: budget 16.00 MiB' "$work/m1.err" || fail "two devices: no per-device line in the report"
echo "two devices: $(grep checksum= "$work/m1" | tr '\n' ' ')same as without the shim; $(grep peak0 "$work/m1")"

# ---- two devices, chunks the program maps itself, every mode ----------------------------
# cuprog_multi_vmm: 12 units of 2 MiB per device (3x an 8 MiB budget), 3 of
# them chunks in a range the program maps itself, and one more chunk made for
# device 1 with device 0's context current before device 1 was used; threads
# on both devices at once, a context switch before every launch, each
# device's memory let go by the other device's thread, chunks X and Y of
# device 1 made and mapped with device 0's context current. Each emulated
# device holds 12 MiB: memory put on the wrong device, or device memory its
# budget does not count (chunks, another device's baseline), runs out there
# or shows in its peak. (2 MiB units: under TSAN=1 the four runs take about
# a minute.)
FAKECU_DEVICES=2 FAKECU_DEVICE_MEM=32M "$D/cuprog_multi_vmm" 12 2 3 >"$work/mv0" 2>&1 ||
	fail "cuprog_multi_vmm without the shim: $(tail -2 "$work/mv0")"
line="cuprog_multi_vmm:"
for mode in spill uvm uvm-prefetch hostmap; do
	FAKECU_DEVICES=2 FAKECU_DEVICE_MEM=12M SPILL_DEVICE_MEM=8M SPILL_SHIM_MODE=$mode \
		SPILL_SHIM_STATS_JSON="$work/mv.json" shim "$D/cuprog_multi_vmm" 12 2 3 >"$work/mv1" 2>"$work/mv1.err" ||
		fail "cuprog_multi_vmm in mode $mode: $(tail -3 "$work/mv1") $(grep -v '^[#a-z ]' "$work/mv1.err" | tail -3)"
	grep -q WARNING "$work/mv1.err" && fail "cuprog_multi_vmm in mode $mode: sanitizer report: $(grep -m3 -A3 WARNING "$work/mv1.err")"
	[ "$(grep -c checksum= "$work/mv0")" -eq 4 ] && cmp -s <(grep checksum= "$work/mv0") <(grep checksum= "$work/mv1") ||
		fail "cuprog_multi_vmm in mode $mode: checksums differ: $(grep checksum= "$work/mv0" "$work/mv1" | tr '\n' ' ')"
	grep -q 'device 1: budget 8.00 MiB' "$work/mv1.err" || fail "cuprog_multi_vmm in mode $mode: no per-device line in the report"
	res=$(python3 - "$work/mv.json" "$work/mv1" "$mode" 2>&1 <<'EOF'
import json, re, sys
j, out, mode = json.load(open(sys.argv[1])), open(sys.argv[2]).read(), sys.argv[3]
devs = {d["device"]: d for d in j["devices"]}
assert set(devs) == {0, 1} and j["mode"] == mode, devs.keys()
drv = {k: [int(x) for x in re.search(k + r"0=(\d+) " + k + r"1=(\d+)", out).groups()] for k in ("peak", "prefetched")}
budget = 8 << 20
for i, d in devs.items():
    assert d["budget"] == budget, d
    # device 1's chunks: 3 of its own thread's, one made early and Y with device 0 current, X
    assert d["chunks"] == (3 if i == 0 else 6), d
    held = d.get("balloon", 0)  # the uvm modes' hold beyond the budget, the shim's own
    assert drv["peak"][i] <= budget + held, (i, drv["peak"][i], held)
    if mode == "spill":
        assert d["chunk_evictions"] > 0 and d["batch_releases"] > 0 and d["bytes"]["h2d"] > 0, d
    elif mode == "hostmap":
        assert d["hostmap_allocations"] > 0, d
    else:
        assert held > 0 and d["managed_peak"] > 0, d
    if mode == "uvm-prefetch":  # to the device of the launch, as the driver saw them
        assert d["prefetches"] > 0 and d["prefetch_bytes"] == drv["prefetched"][i], (d, drv)
if mode == "spill":
    assert devs[1]["peer_operations"] > 0, devs[1]  # device 0's kernels read device 1's chunks
print(f"{mode} peaks {drv['peak'][0] >> 20} and {drv['peak'][1] >> 20} MiB")
EOF
	) || fail "cuprog_multi_vmm in mode $mode: report or peaks wrong: $res"
	line="$line $res;"
done
echo "$line same checksums as without the shim: $(grep checksum= "$work/mv0" | tr '\n' ' ')"

# ---- spill run and spill report --------------------------------------------------------
spill="$O/bin/spill"
"$spill" run --budget 16M --stats-json "$work/run.json" --trace "$work/run.trace" -- \
	"$D/cuprog_workset" 12 4 3 >"$work/run.out" 2>&1 || fail "spill run: $(tail -3 "$work/run.out")"
[ "$(grep checksum= "$work/run.out")" = "$(grep checksum= "$work/plain")" ] || fail "spill run: checksum differs"
"$spill" report "$work/run.json" >"$work/report" 2>&1 || fail "spill report: $(tail -2 "$work/report")"
grep -q '^moved: h2d' "$work/report" && grep -q '^step ' "$work/report" || fail "spill report: no totals or kernels"
python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['traceEvents']; sys.exit(not any(e.get('tid')=='launches' for e in t) or not any(e.get('tid')=='h2d' for e in t))" "$work/run.trace" ||
	fail "spill run --trace: no launches or transfers in the trace"
"$spill" run --budget 12Q -- true >"$work/bad" 2>&1 && fail "spill run with a bad budget succeeded"
[ "$(wc -l <"$work/bad")" -eq 1 ] || fail "spill run with a bad budget: not one line: $(cat "$work/bad")"
"$spill" run --mode uvmx -- true >"$work/bad" 2>&1 && fail "spill run with a bad mode succeeded"
[ "$(wc -l <"$work/bad")" -eq 1 ] && grep -q -- '--mode uvmx is not one of spill|uvm|uvm-prefetch|hostmap' "$work/bad" ||
	fail "spill run with a bad mode: not one line naming it: $(cat "$work/bad")"
"$spill" run --budget 16M --mode hostmap --stats-json "$work/run_hm.json" -- "$D/cuprog_workset" 12 4 3 >"$work/run_hm.out" 2>&1 ||
	fail "spill run --mode hostmap: $(tail -3 "$work/run_hm.out")"
[ "$(grep checksum= "$work/run_hm.out")" = "$(grep checksum= "$work/plain")" ] || fail "spill run --mode hostmap: checksum differs"
"$spill" report "$work/run_hm.json" >"$work/report_hm" 2>&1 || fail "spill report of a hostmap run: $(tail -2 "$work/report_hm")"

[ $fails -eq 0 ] || exit 1
echo "shim: all checks passed"
