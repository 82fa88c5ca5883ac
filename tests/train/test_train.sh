# `spill train`, `report`, `sim` and `prepare` end to end (host and model
# backends):
#  - a small GPT trained on text prepared by `spill prepare` under the default
#    budget (a quarter of the training state): dirty copies are written back
#    (it swaps), the loss falls, progress, evaluation and the report are
#    printed, and `spill report` reads the --stats-json back;
#  - checkpoints: 8 steps in one run against its step-4 checkpoint resumed to
#    8 (the same lr schedule: it follows the run's length): the same
#    losses and byte-identical step-8 checkpoints, which tests/train/ckpt_read.py
#    (json + numpy only) reads; the same with SGD with momentum (its buffer is
#    in the checkpoint), and resuming with another optimizer is refused;
#  - the tuner: the host backend throttled to links 10000x slower than the
#    profile the planner assumed; the tuner switches plans and the steps after
#    the switch are faster than those before;
#  - `spill sim --model 10b --profile gtx1080ti-x8` reports in under 30 s;
#  - bad input: one line on stderr, a non-zero exit, nothing overwritten.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$here/pick_python.sh"
pick_python numpy || { echo "SKIP: no python3 with numpy"; exit 77; }
export SPILL_THREADS=1 # two processes never share the 2 cores badly

# a corpus of its own: 60 KB of text in two files
"$py" - "$work" <<'PY'
import sys, random
random.seed(1)
words = "the of and to in that he shall unto for his i a lord they be is him not them it with all".split()
for k in range(2):
    with open(f"{sys.argv[1]}/text{k}.txt", "w") as f:
        for line in range(700):
            f.write(" ".join(random.choice(words) for _ in range(8)) + ".\n")
PY
"$spill" prepare "$work/text0.txt" "$work/text1.txt" -o "$work/data" --name tiny || fail "prepare"
"$spill" prepare "$work/text0.txt" -o "$work/data" --name tiny 2>"$work/err" && fail "prepare over existing shards"
grep -q "exist" "$work/err" || fail "prepare over existing shards: $(cat "$work/err")"

small=(--layers 2 --channels 64 --heads 4 --seq 32 --batch 8 --data "$work/data")
big=(--layers 4 --channels 128 --heads 4 --seq 64 --batch 16 --data "$work/data")

# 1. training under the default budget
"$spill" train "${small[@]}" --steps 30 --eval-every 15 --stats-json "$work/run.json" \
	>"$work/train.out" 2>"$work/train.err" || { cat "$work/train.err"; fail "spill train"; }
cat "$work/train.out"
grep -q "a quarter of the training state" "$work/train.out" || fail "no default budget line"
grep -q "^step .*loss .*tok/s .*swap .*ETA" "$work/train.out" || fail "no progress lines"
grep -q "^eval at step 15: validation loss" "$work/train.out" || fail "no evaluation"
grep -q "swap volume per step" "$work/train.out" || fail "no swap table"
"$py" - "$work/run.json" <<'PY' || fail "run.json"
import json, sys
r = json.load(open(sys.argv[1]))
l = r["losses"]
assert len(l) == 30 and r["steps"] == 30, (len(l), r["steps"])
assert l[-1] < l[0] - 0.5, ("the loss did not fall", l[0], l[-1])
d2h = sum(r["measured"]["d2h"].values())
assert d2h > 0, "nothing was written back: no eviction"
print("loss %.3f -> %.3f, %.0f KB written back per step" % (l[0], l[-1], d2h / 1e3))
PY
"$spill" report "$work/run.json" >"$work/report.out" || fail "spill report"
grep -q "swap volume per step" "$work/report.out" || fail "report lacks the table"
diff <(grep -A 9 "swap volume per step" "$work/train.out") \
	<(grep -A 9 "swap volume per step" "$work/report.out") >/dev/null || fail "report differs from the run's"

# 2. checkpoints and resume
"$spill" train "${small[@]}" --steps 8 --checkpoint "$work/a" --checkpoint-every 4 --no-tune \
	--stats-json "$work/a.json" >/dev/null 2>&1 || fail "checkpointed run"
# the interrupted run: a's step-4 checkpoint alone (a run of --steps 4 would
# have another lr schedule: warmup and decay follow the run's length)
mkdir -p "$work/b" && cp "$work/a/step_00000004.safetensors" "$work/b/" || fail "first half"
"$spill" train "${small[@]}" --steps 8 --checkpoint "$work/b" --resume --no-tune \
	--stats-json "$work/b.json" >"$work/resume.out" 2>&1 || { cat "$work/resume.out"; fail "resume"; }
grep -q "resumed from .*step_00000004" "$work/resume.out" || fail "did not resume from step 4"
cmp "$work/a/step_00000008.safetensors" "$work/b/step_00000008.safetensors" ||
	fail "resumed step-8 checkpoint differs from the uninterrupted one"
"$py" - "$work/a.json" "$work/b.json" <<'PY' || fail "resumed losses"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert b["first_step"] == 5 and a["losses"][4:] == b["losses"], (a["losses"], b["losses"])
print("resumed losses equal:", b["losses"])
PY
"$py" "$here/ckpt_read.py" "$work/a/step_00000008.safetensors" >"$work/ck.txt" || fail "ckpt_read.py"
grep -qP "^tensor\twte\tF32\t256,64\t" "$work/ck.txt" || fail "checkpoint lacks wte (256, 64)"
grep -qP "^tensor\tadam_v.h.1.fcprojw\tF32\t64,256\t" "$work/ck.txt" || fail "checkpoint lacks adam_v"
sgd=(--optim sgd --momentum 0.9 --lr 0.05 --no-tune)
"$spill" train "${small[@]}" "${sgd[@]}" --steps 6 --checkpoint "$work/s1" --checkpoint-every 3 \
	--stats-json "$work/s1.json" >/dev/null 2>&1 || fail "sgd checkpointed run"
mkdir -p "$work/s2" && cp "$work/s1/step_00000003.safetensors" "$work/s2/" ||
	fail "sgd first half"
"$spill" train "${small[@]}" "${sgd[@]}" --steps 6 --checkpoint "$work/s2" --resume \
	--stats-json "$work/s2.json" >"$work/sresume.out" 2>&1 || { cat "$work/sresume.out"; fail "sgd resume"; }
cmp "$work/s1/step_00000006.safetensors" "$work/s2/step_00000006.safetensors" ||
	fail "sgd: resumed step-6 checkpoint differs from the uninterrupted one"
"$py" "$here/ckpt_read.py" "$work/s1/step_00000006.safetensors" >"$work/sck.txt" || fail "ckpt_read.py sgd"
grep -qP "^tensor\tsgd_momentum.h.1.fcprojw\tF32\t64,256\t" "$work/sck.txt" || fail "sgd checkpoint lacks its momentum"
grep -q "adam_m" "$work/sck.txt" && fail "sgd checkpoint has AdamW moments"
"$py" - "$work/s1.json" "$work/s2.json" "$work/a.json" <<'PY' || fail "sgd resumed losses"
import json, sys
a, b, adam = (json.load(open(p)) for p in sys.argv[1:])
assert b["first_step"] == 4 and a["losses"][3:] == b["losses"], (a["losses"], b["losses"])
assert a["losses"][1] != adam["losses"][1], "sgd and adamw gave the same second step"
print("sgd resumed losses equal:", b["losses"])
PY
# bf16 mixed precision: the checkpoint holds the fp32 masters and says bf16;
# a resumed bf16 run continues bit for bit; fp32 refuses to resume it
bf=(--precision bf16 --no-tune)
"$spill" train "${small[@]}" "${bf[@]}" --steps 6 --checkpoint "$work/f1" --checkpoint-every 3 \
	--stats-json "$work/f1.json" >/dev/null 2>&1 || fail "bf16 checkpointed run"
mkdir -p "$work/f2" && cp "$work/f1/step_00000003.safetensors" "$work/f2/" ||
	fail "bf16 first half"
"$spill" train "${small[@]}" "${bf[@]}" --steps 6 --checkpoint "$work/f2" --resume \
	--stats-json "$work/f2.json" >"$work/fresume.out" 2>&1 || { cat "$work/fresume.out"; fail "bf16 resume"; }
cmp "$work/f1/step_00000006.safetensors" "$work/f2/step_00000006.safetensors" ||
	fail "bf16: resumed step-6 checkpoint differs from the uninterrupted one"
"$py" "$here/ckpt_read.py" "$work/f1/step_00000006.safetensors" >"$work/fck.txt" || fail "ckpt_read.py bf16"
grep -qP "^tensor\th.1.fcprojw\tF32\t64,256\t" "$work/fck.txt" || fail "bf16 checkpoint lacks fp32 masters"
hex() { printf %s "$1" | od -An -tx1 | tr -d ' \n'; }
grep -qP "^meta\t$(hex precision)\t$(hex bf16)$" "$work/fck.txt" ||
	fail "bf16 checkpoint does not record its precision"
"$py" - "$work/f1.json" "$work/f2.json" "$work/a.json" <<'PY' || fail "bf16 resumed losses"
import json, sys
a, b, f32 = (json.load(open(p)) for p in sys.argv[1:])
assert b["first_step"] == 4 and a["losses"][3:] == b["losses"], (a["losses"], b["losses"])
assert a["losses"][0] != f32["losses"][0], "bf16 and fp32 gave the same first loss"
assert abs(a["losses"][0] - f32["losses"][0]) < 0.02 * f32["losses"][0]
print("bf16 resumed losses equal:", b["losses"])
PY

# 3. bad input: one line, non-zero, nothing overwritten
before=$(md5sum "$work"/b/*.safetensors)
bad() {
	local want=$1
	shift
	if "$spill" "$@" >"$work/out" 2>"$work/err"; then
		fail "accepted: spill $*"
	elif [ "$(wc -l <"$work/err")" -ne 1 ] || ! grep -q "$want" "$work/err"; then
		fail "spill $*: expected one line with '$want', got: $(cat "$work/err")"
	fi
}
bad "smallest" train "${small[@]}" --steps 2 --budget 64K
bad "unknown schedule" train "${small[@]}" --schedule fastest
bad "unknown model" train --model gpt5
bad "No such file" train --data "$work/nothing"
: >"$work/empty.txt"
bad "empty" train --data "$work/empty.txt"
bad "needs --checkpoint" train "${small[@]}" --checkpoint-every 2
bad "unknown flag" train --stepz 3
bad "give at least 1 to --layers" train "${small[@]}" --layers 0
: >"$work/afile"
bad "checkpoint $work/afile: not a directory" train "${small[@]}" --checkpoint "$work/afile"
bad "no directory $work/none to put it in" train "${small[@]}" --trace "$work/none/t.json"
bad "is a directory" train "${small[@]}" --stats-json "$work"
bad "no state to save" sim --layers 2 --checkpoint "$work/simck"
[ ! -e "$work/simck" ] || fail "spill sim --checkpoint left $work/simck behind"
head -c 1000 "$work/b/step_00000008.safetensors" >"$work/trunc.safetensors"
mkdir -p "$work/c" && cp "$work/trunc.safetensors" "$work/c/step_00000009.safetensors"
bad "checkpoint" train "${small[@]}" --steps 12 --checkpoint "$work/c" --resume
bad "layers 2" train "${small[@]}" --layers 3 --steps 12 --checkpoint "$work/b" --resume
bad "optimizer adamw" train "${small[@]}" --optim sgd --steps 12 --checkpoint "$work/b" --resume
bad "unknown optimizer" train "${small[@]}" --optim adam
bad "SGD setting" train "${small[@]}" --momentum 0.9
bad "precision bf16; this run has fp32" train "${small[@]}" --steps 12 --checkpoint "$work/f2" --resume
bad "precision fp32; this run has bf16" train "${small[@]}" --precision bf16 --steps 12 \
	--checkpoint "$work/b" --resume
bad "spill train: --precision fp16: wants fp32 or bf16" train --precision fp16
"$spill" train --precision fp16 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--precision fp16: exit status is not 2"
bad "spill sim: --precision half: wants fp32 or bf16" sim --precision half
# a throttle on real links would throttle nothing (it did not, on an H100)
SPILL_BACKEND=model SPILL_LINK_THROTTLE=1 bad "SPILL_LINK_THROTTLE: throttled links need the host backend (this is model)" \
	train "${small[@]}" --steps 1
[ "$before" = "$(md5sum "$work"/b/*.safetensors)" ] || fail "a failed run changed the checkpoints"
# the default budget grows until a plan fits each device's share: pipeline
# schedules on 2 devices stopped at half the state per device before
for sch in gpipe 1f1b harmony-pp; do
	"$spill" train --layers 2 --channels 32 --heads 2 --seq 16 --batch 4 --steps 2 \
		--data "$work/data" --schedule $sch >"$work/sch" 2>&1 || fail "--schedule $sch: $(tail -1 "$work/sch")"
done
"$spill" train "${small[@]}" --steps 3 --lr 1e30 >"$work/nan" 2>&1 || fail "a diverged run: $(tail -1 "$work/nan")"
grep -q 'nan: training diverged' "$work/nan" || fail "a diverged run: $(grep 'steps,' "$work/nan")"

# 4. the tuner: the planner assumes links of 1000 GB/s, the host backend
#    throttles them to 0.1 GB/s
prof="$here/../../device/profiles/gtx1080ti-x4.prof"
links() { sed -e "s|^name = .*|name = $1|" -e "s|^h2d = .*|h2d = $2|" -e "s|^d2h = .*|d2h = $2|" \
	-e "s|^host_link = .*|host_link = $2|" "$prof"; }
links fastlinks "1000 GB/s" >"$work/fast.prof"
links slowlinks "0.1 GB/s" >"$work/slow.prof"
SPILL_BACKEND=host SPILL_LINK_THROTTLE=1 "$spill" train "${big[@]}" --steps 8 --profile "$work/slow.prof" \
	--plan-profile "$work/fast.prof" --stats-json "$work/tune.json" >"$work/tune.out" 2>&1 ||
	{ cat "$work/tune.out"; fail "tuner run"; }
grep "^tuner:\|^plan:" "$work/tune.out"
"$py" - "$work/tune.json" <<'PY' || fail "tuner"
import json, sys
r = json.load(open(sys.argv[1]))
s, t = r["switch_step"], r["step_times"]
assert s > 0, "the tuner did not switch: " + r["tuner"]
before = sum(t[1:s]) / len(t[1:s])  # the first step is cold
after = sum(t[s + 1:]) / len(t[s + 1:])
print("switched after step %d: %.4f s/step before, %.4f after" % (s, before, after))
assert after < before, "not faster after the switch"
PY

# 4b. a plan with fewer tasks than one task has dependencies (one pack, a
#     group of 8): rt_run_open once wrote past its dependency list here (the
#     sanitizer builds catch it; the release build crashed in the tuner)
"$spill" train "${small[@]}" --batch 16 --steps 1 --no-tune --schedule harmony-dp --packs 1 \
	--group 8 --microbatch 1 --recompute --update-on-cpu --budget 4M >"$work/g8.out" 2>&1 ||
	{ cat "$work/g8.out"; fail "harmony-dp, 1 pack, group 8"; }

# 5. a what-if of GPT-2 10B on 8 GTX 1080 Ti
start=$(date +%s.%N)
"$spill" sim --model 10b --profile gtx1080ti-x8 >"$work/sim.out" 2>&1 || { cat "$work/sim.out"; fail "spill sim"; }
took=$(echo "$(date +%s.%N) - $start" | bc)
tail -12 "$work/sim.out"
echo "spill sim --model 10b --profile gtx1080ti-x8: ${took} s"
limit=30
case "$O" in *san*) limit=300 ;; esac # sanitizers: 10-20x slower
awk -v t="$took" -v l="$limit" 'BEGIN { exit !(t < l) }' || fail "spill sim took ${took} s (limit $limit)"
grep -q "swap volume per step" "$work/sim.out" || fail "sim printed no profile"

# 6. the disk in a what-if: GPT-2 10B on one H100 with 64G of host memory and
# three simulated drives (model backend: nothing is written to the directory)
sed -e 's/^name = .*/name = h100-3nvme/' -e '$a disks = 3' "$here/../../device/profiles/h100-sxm.prof" \
	>"$work/h100-3nvme.prof"
mkdir -p "$work/nvme"
"$spill" sim --model 10b --profile "$work/h100-3nvme.prof" --host-mem 64G --disk "$work/nvme" \
	>"$work/simdisk.out" 2>&1 || { cat "$work/simdisk.out"; fail "spill sim --disk"; }
grep -E "^host->disk|^disk->host|^disk drives" "$work/simdisk.out"
awk '/^host->disk/ { if ($NF == "-" ? $(NF-1) > 0 : $NF > 0) ok = 1 } END { exit !ok }' \
	"$work/simdisk.out" || fail "spill sim --disk moved nothing to disk"
grep -q "^disk drives (written + read per step, GB): 0: .* 1: .* 2: " "$work/simdisk.out" ||
	fail "spill sim --disk: no per-drive bytes"
[ -z "$(ls -A "$work/nvme")" ] || fail "spill sim --disk wrote into $work/nvme"
bad "make the directory first" sim --model 10b --profile h100-sxm --host-mem 100G --disk "$work/no-such-dir"
[ ! -e "$work/no-such-dir" ] || fail "spill sim --disk created $work/no-such-dir"
bad "disk tier '$work/no-such-dir': No such file or directory" train "${small[@]}" --steps 1 \
	--disk "$work/no-such-dir"
[ ! -e "$work/no-such-dir" ] || fail "spill train --disk created $work/no-such-dir"
exit $((fails > 0))
