# Pretrained weights in and out, eval and sample, without Hugging Face (json
# and numpy only; tests/train/test_hf.sh does transformers' side):
#  - a GPT (2 blocks, C 64, vocab 256, 64 positions) trained 20 steps with
#    --eval-every 20: `spill eval` of its checkpoint prints the same validation
#    loss;
#  - `spill export --format llmc`: numpy reads model.bin in llm.c's layout
#    (every layer's ln1w together, ...) and finds each checkpoint tensor bit
#    for bit (vocab 256: a multiple of 128, no padding rows); exporting that
#    model.bin again is byte-identical; `spill train --init` from model.bin
#    and from the checkpoint write byte-identical step-1 checkpoints;
#  - llm.c's version 5 (bf16) files, written here by numpy: read as the
#    widened bf16 values exactly (via an llmc export), and one of GPT-2's
#    vocabulary (50257, padded to 50304 with NaN rows that must not be read),
#    whose samples are token ids and which evaluates on byte data;
#  - `spill sample`: N tokens, the same for a seed, another for another seed;
#  - bad files and flags: one line naming the file or the flag, exit 1 or 2,
#    never a crash.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pick_python.sh"
pick_python numpy || { echo "SKIP: no python3 with numpy"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1

"$py" - "$work/text.txt" <<'PY'
import random, sys
random.seed(7)
words = "in the beginning god created heaven and earth was without form void".split()
open(sys.argv[1], "w").write("".join(" ".join(random.choice(words) for _ in range(9)) + ".\n"
                                     for _ in range(1500)))
PY
"$spill" prepare "$work/text.txt" -o "$work/data" --name t >/dev/null || exit 1
run=(--layers 2 --channels 64 --heads 4 --seq 64 --batch 4 --data "$work/data" --no-tune)
"$spill" train "${run[@]}" --steps 20 --eval-every 20 --checkpoint "$work/ck" >"$work/train.out" 2>&1 ||
	{ cat "$work/train.out"; echo "FAIL: training"; exit 1; }
ck="$work/ck/step_00000020.safetensors"

# 1. eval equals the run's evaluation
want=$(sed -n 's/^eval at step 20: validation loss \([0-9.]*\)$/\1/p' "$work/train.out")
"$spill" eval "$ck" --data "$work/data" >"$work/eval.out" 2>&1 || { cat "$work/eval.out"; fail "spill eval"; }
cat "$work/eval.out"
got=$(sed -n 's/.*validation loss \([0-9.]*\) .*/\1/p' "$work/eval.out")
[ -n "$want" ] && [ "$want" = "$got" ] || fail "spill eval printed '$got', the run '$want'"

# 2. llm.c: layout, round trip, --init
"$spill" export --format llmc "$ck" "$work/l1" >/dev/null || fail "export llmc"
"$py" - "$ck" "$work/l1/model.bin" <<'PY' || fail "model.bin is not llm.c's layout of the checkpoint"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
data = raw[8 + n:]
def t(name):
    e = hdr[name]
    b, k = e["data_offsets"]
    return np.frombuffer(data[b:k], dtype="<f4").reshape(e["shape"])
h = np.fromfile(sys.argv[2], dtype="<i4", count=256)
assert list(h[:8]) == [20240326, 3, 64, 256, 2, 4, 64, 256], h[:8]
p = np.fromfile(sys.argv[2], dtype="<f4", offset=1024)
L, C, Vp, V = 2, 64, 256, 256
order = [("wte", None)] + [("wpe", None)] + [(b, l) for b in
         "ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb".split()
         for l in range(L)] + [("lnfw", None), ("lnfb", None)]
o = 0
for name, l in order:
    x = t(name if l is None else "h.%d.%s" % (l, name))
    k = x.size if name != "wte" else Vp * C
    got = p[o:o + k]
    assert np.array_equal(got[:x.size].view("<u4"), x.ravel().view("<u4")), name
    assert not got[x.size:].any(), "padding rows of " + name
    o += k
assert o == p.size, (o, p.size)
print("model.bin: %d tensors of the checkpoint in llm.c's order, bit for bit" % len(order))
PY
"$spill" export --format llmc "$work/l1/model.bin" "$work/l2" >/dev/null || fail "export of model.bin"
cmp "$work/l1/model.bin" "$work/l2/model.bin" || fail "model.bin -> llmc is not the same file"
for src in "$ck" "$work/l1/model.bin"; do
	d="$work/init$([ "$src" = "$ck" ] && echo a || echo b)"
	"$spill" train "${run[@]}" --init "$src" --steps 1 --checkpoint "$d" >"$d.out" 2>&1 ||
		{ cat "$d.out"; fail "train --init $src"; }
done
cmp "$work/inita/step_00000001.safetensors" "$work/initb/step_00000001.safetensors" ||
	fail "--init from model.bin and from the checkpoint differ after a step"
grep -q "GPT-2 $ck (2 layers, 64 channels" "$work/inita.out" || fail "the banner does not name --init"

# 3. version 5 (bf16): the checkpoint's weights rounded, and GPT-2's vocabulary
"$py" - "$work/l1/model.bin" "$work/v5.bin" "$work/v5.f32" "$work/g5.bin" <<'PY' || fail "writing bf16 files"
import sys
import numpy as np
def bf16(x):  # round to nearest even, as llm.c writes
    u = x.astype("<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
h = np.fromfile(sys.argv[1], dtype="<i4", count=256).copy()
p = np.fromfile(sys.argv[1], dtype="<f4", offset=1024)
h[1] = 5
b = bf16(p)
with open(sys.argv[2], "wb") as f:
    f.write(h.tobytes()); f.write(b.tobytes())
(b.astype("<u4") << 16).view("<f4").tofile(sys.argv[3])  # what spill must read
# GPT-2's vocabulary, padded as llm.c pads it: 1 layer, C 32, 2 heads, 16 positions
rng = np.random.default_rng(5)
V, Vp, C, T, L = 50257, 50304, 32, 16, 1
n = Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
g = bf16(rng.standard_normal(n).astype("<f4") * np.float32(0.1))
g[V * C:Vp * C] = 0x7FC0  # padding: NaN, which must never be read
gh = np.zeros(256, dtype="<i4")
gh[:8] = [20240326, 5, T, V, L, 2, C, Vp]
with open(sys.argv[4], "wb") as f:
    f.write(gh.tobytes()); f.write(g.tobytes())
PY
"$spill" export --format llmc "$work/v5.bin" "$work/v5" >/dev/null || fail "export of a version-5 file"
cmp <(tail -c +1025 "$work/v5/model.bin") "$work/v5.f32" || fail "version 5 was not read as its bf16 values"
a=$("$spill" sample "$work/g5.bin" --prompt "464 2068" --tokens 5 --seed 9) || fail "sample GPT-2 ids"
echo "GPT-2 vocabulary, ids: $a"
[[ "$a" =~ ^464\ 2068(\ [0-9]+){5}$ ]] || fail "sample of GPT-2's vocabulary printed '$a', not 2 + 5 ids"
"$spill" eval "$work/g5.bin" --data "$work/data" --batch 2 --batches 1 >"$work/g5.out" 2>&1 ||
	{ cat "$work/g5.out"; fail "eval of a GPT-2-vocabulary llm.c file on byte data"; }
grep -q "validation loss" "$work/g5.out" || fail "no loss for the bf16 GPT-2 file"

# 4. sample: N bytes, deterministic per seed
"$spill" sample "$ck" --prompt "in the" --tokens 50 --seed 3 >"$work/s1" || fail "sample"
"$spill" sample "$ck" --prompt "in the" --tokens 50 --seed 3 >"$work/s2" || fail "sample again"
"$spill" sample "$ck" --prompt "in the" --tokens 50 --seed 4 >"$work/s3" || fail "sample, seed 4"
cmp -s "$work/s1" "$work/s2" || fail "the same seed sampled different text"
cmp -s "$work/s1" "$work/s3" && fail "seeds 3 and 4 sampled the same text"
[ "$(wc -c <"$work/s1")" -eq $((6 + 50 + 1)) ] || fail "sample printed $(wc -c <"$work/s1") bytes, not 6 + 50 + 1"
head -c 6 "$work/s1" | grep -qx "in the" || fail "sample does not start with the prompt"
"$spill" sample "$ck" --prompt "in the" --tokens 20 --temperature 0 >"$work/g1" || fail "greedy"
"$spill" sample "$ck" --prompt "in the" --tokens 20 --temperature 0 --seed 8 >"$work/g2" || fail "greedy 2"
cmp -s "$work/g1" "$work/g2" || fail "greedy sampling depends on the seed"
echo "sample: $(head -c 57 "$work/s1" | tr '\n' '|')"

# 5. bad input: one line naming the file or flag, no crash
head -c 5000 "$work/l1/model.bin" >"$work/trunc.bin"
cp "$work/l1/model.bin" "$work/long.bin" && printf 'xxxx' >>"$work/long.bin"
"$py" -c "
import numpy as np, sys
h = np.fromfile(sys.argv[1], dtype='<i4').copy(); h[1] = 4; h.tofile(sys.argv[2])" \
	"$work/l1/model.bin" "$work/v4.bin"
head -c 3000 "$ck" >"$work/trunc.safetensors"
mkdir -p "$work/empty"
check() { # expected-exit pattern command...
	local want=$1 pat=$2
	shift 2
	"$@" >"$work/bad.out" 2>"$work/bad.err"
	local rc=$?
	[ "$rc" = "$want" ] || fail "$* exited $rc, not $want: $(cat "$work/bad.err")"
	[ "$(wc -l <"$work/bad.err")" = 1 ] || fail "$*: not one line: $(cat "$work/bad.err")"
	grep -q -- "$pat" "$work/bad.err" || fail "$*: '$pat' not in: $(cat "$work/bad.err")"
}
check 1 "trunc.bin: truncated" "$spill" eval "$work/trunc.bin" --data "$work/data"
check 1 "long.bin: bytes after the model" "$spill" export --format hf "$work/long.bin" "$work/x"
check 1 "v4.bin: llm.c model version 4" "$spill" sample "$work/v4.bin"
check 1 "trunc.safetensors" "$spill" sample "$work/trunc.safetensors"
check 1 "text.txt: neither llm.c" "$spill" export --format llmc "$work/text.txt" "$work/x"
check 1 "empty: a directory without" "$spill" eval "$work/empty"
check 1 "nothere: No such file" "$spill" train --init "$work/nothere"
check 1 "^spill train: --layers 3 contradicts --init" "$spill" train "${run[@]}" --layers 3 --init "$ck"
check 1 "^spill train: --seq 65: --init" "$spill" train --data "$work/data" --seq 65 --init "$ck"
check 2 "--format gguf: wants hf or llmc" "$spill" export --format gguf "$ck" "$work/x"
check 1 "--prompt: 'abc' is not a token id" "$spill" sample "$work/g5.bin" --prompt abc
check 2 "unknown flag --bogus" "$spill" sample "$ck" --bogus 1
[ -e "$work/x" ] && fail "a failed export left $work/x"

[ $fails -eq 0 ] || exit 1
echo "OK"
