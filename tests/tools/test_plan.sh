# `spill plan --largest`: capacity planning on the model backend (issue: the
# largest model one GPU box trains). For one H100 box (80 GB GPU, 128 GB host,
# 64 GB of disk at one drive's speed) with AdamW it must name a GPT of at least
# 10B parameters whose 2 steps the model backend really ran; without a disk the
# answer shrinks; resources too small for any candidate say so and name the
# smallest; bad flags exit 2 with one line naming the flag.
set -u
spill="$O/bin/spill"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

out=$("$spill" plan --largest --profile h100-sxm --host-mem 128G --disk-mem 64G 2>/dev/null)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "spill plan --largest (h100-sxm, 128G host, 64G disk): exit $rc"
big=$(awk '/^largest GPT/ { sub("B", "", $5); print $5 }' <<<"$out")
awk -v b="${big:-0}" 'BEGIN { exit !(b >= 10) }' || fail "only ${big:-?}B parameters (want >= 10B)"
grep -q "^predicted: [0-9]* tokens/s, [0-9.]* TFLOP/s" <<<"$out" || fail "no prediction"

out2=$("$spill" plan --largest --profile h100-sxm --host-mem 128G 2>/dev/null)
echo "$out2" | head -1
small=$(awk '/^largest GPT/ { sub("B", "", $5); print $5 }' <<<"$out2")
awk -v a="${small:-0}" -v b="${big:-0}" 'BEGIN { exit !(a > 0 && a < b) }' ||
	fail "without the disk: ${small:-?}B, not less than ${big:-?}B"

err=$("$spill" plan --largest --profile h100-sxm --devices 1 --host-mem 1M 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] && grep -q "not even the smallest candidate" <<<"$err" ||
	fail "1M of host memory: exit $rc, $(tail -1 <<<"$err")"

bad() {
	local want=$1
	shift
	local e
	e=$("$spill" plan "$@" 2>&1 >/dev/null)
	local r=$?
	[ $r -eq 2 ] && grep -q -- "$want" <<<"$e" || fail "spill plan $*: exit $r, '$e' (want '$want')"
}
bad "say what to plan" --profile h100-sxm
bad "--host-mem 1K" --largest --host-mem 1K
bad "--batch x" --largest --batch x
bad "unknown flag --bogus" --largest --bogus 1
bad "--disk needs --disk-mem" --largest --disk /tmp
exit $((fails > 0))
