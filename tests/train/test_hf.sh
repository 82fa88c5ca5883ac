# Hugging Face's GPT-2 against spill, with transformers' own loader (CPU, fp32;
# tools/deps.sh installs transformers with pip; tests/train/hf_check.py):
#  1. a GPT (2 blocks, C 64, 4 heads, vocab 256, 64 positions) trained 20
#     steps by spill, exported with `spill export --format hf`, loaded by
#     GPT2LMHeadModel.from_pretrained: its loss on the 4 validation batches
#     spill eval draws equals spill eval's within 1e-4 relative (measured:
#     1e-8);
#  2. a randomly initialised GPT2LMHeadModel saved with save_pretrained
#     (safetensors): `spill eval` of the directory gives HF's validation loss,
#     and `spill train --init DIR --steps 1` HF's loss on the first training
#     batch as its step-1 loss, each within 1e-4 relative; exporting the
#     imported model back gives HF's tensors bit for bit.
set -u
spill="$O/bin/spill"
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pick_python.sh"
pick_python torch numpy transformers || {
	echo "SKIP: no python3 with torch, numpy and transformers (tools/deps.sh installs"
	echo "      transformers with pip as root; see its log for why it did not)"
	exit 77
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
hf() { "$py" "$here/hf_check.py" "$@"; }
# close A B: |A - B| <= 1e-4 |B|
close() { "$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); \
print('%s: spill %.9g HF %.9g rel %.2e' % (sys.argv[3], a, b, abs(a - b) / abs(b))); \
sys.exit(abs(a - b) > 1e-4 * abs(b))" "$@"; }

"$py" - "$work/text.txt" <<'PY'
import random, sys
random.seed(7)
words = "in the beginning god created heaven and earth was without form void".split()
open(sys.argv[1], "w").write("".join(" ".join(random.choice(words) for _ in range(9)) + ".\n"
                                     for _ in range(1500)))
PY
"$spill" prepare "$work/text.txt" -o "$work/data" --name t >/dev/null || exit 1
run=(--seq 64 --batch 4 --data "$work/data" --no-tune)
precise() { sed -n 's/.*validation loss [0-9.]* (\([0-9.e+-]*\)).*/\1/p' "$1"; }

# 1. spill -> HF
"$spill" train --layers 2 --channels 64 --heads 4 "${run[@]}" --steps 20 --checkpoint "$work/ck" \
	>"$work/train.out" 2>&1 || { cat "$work/train.out"; echo "FAIL: training"; exit 1; }
"$spill" export --format hf "$work/ck/step_00000020.safetensors" "$work/hf1" || fail "export hf"
"$spill" eval "$work/ck/step_00000020.safetensors" --data "$work/data" >"$work/e1.out" 2>&1 ||
	{ cat "$work/e1.out"; fail "spill eval"; }
ref=$(hf loss "$work/hf1" "$work/data" 1 1337 4 64 4) || fail "HF on the export: $ref"
close "$(precise "$work/e1.out")" "$ref" "spill's checkpoint, validation" || fail "export -> HF loss"

# 2. HF -> spill
hf make "$work/hfr" 11 || fail "save_pretrained"
"$spill" eval "$work/hfr" --data "$work/data" --batch 4 >"$work/e2.out" 2>&1 ||
	{ cat "$work/e2.out"; fail "spill eval of HF's directory"; }
ref=$(hf loss "$work/hfr" "$work/data" 1 1337 4 64 4) || fail "HF: $ref"
close "$(precise "$work/e2.out")" "$ref" "HF's model, validation" || fail "HF -> spill eval"
"$spill" train --init "$work/hfr" "${run[@]}" --steps 1 --stats-json "$work/s.json" >"$work/t2.out" 2>&1 ||
	{ cat "$work/t2.out"; fail "train --init HF"; }
l1=$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['losses'][0])" "$work/s.json")
ref=$(hf loss "$work/hfr" "$work/data" 0 1337 4 64 1) || fail "HF: $ref"
close "$l1" "$ref" "HF's model, step 1 of --init" || fail "train --init HF: step-1 loss"
"$spill" export --format hf "$work/hfr" "$work/hfr2" >/dev/null || fail "export of HF's model"
"$py" - "$work/hfr/model.safetensors" "$work/hfr2/model.safetensors" <<'PY' || fail "HF -> spill -> HF changed tensors"
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
a.pop("lm_head.weight", None)
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for k in a:
    assert a[k].shape == b[k].shape and (a[k].view("u4") == b[k].view("u4")).all(), k
print("HF -> spill -> HF: %d tensors bit for bit" % len(a))
PY

[ $fails -eq 0 ] || exit 1
echo "OK"
