# `spill train --resume` and the knobs that landed with clipping and the lr
# schedule (an adversarial pass):
#  - held: a run resumed from a checkpoint in the middle of the warmup (and
#    with bf16 + a small clip, SGD + momentum + linear decay, --lr-min 0 and 1,
#    a warmup longer than the run, --total-batch) writes a final checkpoint
#    byte-identical to the uninterrupted run's;
#  - a resume with another learning-rate recipe (--lr, --grad-clip,
#    --lr-schedule, --warmup, --lr-min: issue 33 allows changing the lr or
#    the schedule on resume) runs with one warning line naming the setting
#    (it no longer matches an uninterrupted run); one with another
#    --weight-decay is refused, like another optimizer. (The adversarial pass
#    found these accepted silently; the checkpoint now records the recipe.)
set -u
spill="$O/bin/spill"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
export SPILL_THREADS=1

# a corpus: 50 KB of text
awk 'BEGIN { srand(1); split("the of and to in that he shall unto for his lord they be is him not them it with all", w, " ");
	for (l = 0; l < 1400; l++) { s = ""; for (k = 0; k < 8; k++) s = s w[int(rand() * 22) + 1] " "; print s "." } }' \
	>"$work/t.txt"
small=(--layers 2 --channels 32 --heads 2 --seq 16 --batch 4 --data "$work/t.txt" --no-tune)

# 1. resumed mid-warmup: the same bytes as the uninterrupted run
n=0
while IFS= read -r v; do
	n=$((n + 1))
	read -ra extra <<<"$v"
	rm -rf "$work/a" "$work/b"
	"$spill" train "${small[@]}" "${extra[@]}" --steps 8 --checkpoint "$work/a" \
		--checkpoint-every 2 >"$work/a.out" 2>&1 || { fail "run [$v]: $(tail -1 "$work/a.out")"; continue; }
	mkdir "$work/b"
	cp "$work/a/step_00000002.safetensors" "$work/b/"
	"$spill" train "${small[@]}" "${extra[@]}" --steps 8 --checkpoint "$work/b" --resume \
		>"$work/b.out" 2>&1 || { fail "resume [$v]: $(tail -1 "$work/b.out")"; continue; }
	grep -q "resumed from .*step_00000002" "$work/b.out" || fail "[$v] did not resume from step 2"
	cmp -s "$work/a/step_00000008.safetensors" "$work/b/step_00000008.safetensors" ||
		fail "[$v]: the resumed run's step-8 checkpoint differs from the uninterrupted one"
done <<'EOF'
--warmup 5
--precision bf16 --grad-clip 0.05 --warmup 4
--optim sgd --momentum 0.9 --lr 0.05 --grad-clip 0.1 --lr-schedule linear --warmup 3
--lr-min 0 --warmup 20 --grad-clip 0.01 --weight-decay 0.1
--lr-min 1 --warmup 3
--total-batch 64 --warmup 4 --lr-schedule constant
EOF
echo "resumed mid-warmup: $n variants byte-identical"

# 2. another recipe warns (naming the setting) and runs; another weight decay
#    is refused
rm -rf "$work/c"
"$spill" train "${small[@]}" --steps 4 --checkpoint "$work/c" --checkpoint-every 2 \
	>/dev/null 2>&1 || fail "checkpointed run"
for v in "--lr 1e-2:lr" "--grad-clip 0.01:grad_clip" "--grad-clip 0:grad_clip" \
	"--weight-decay 0.5:" "--lr-schedule linear:lr_schedule" "--warmup 3:warmup" \
	"--lr-min 0.5:lr_min"; do
	key=${v##*:}
	read -ra extra <<<"${v%:*}"
	rm -rf "$work/d"
	mkdir "$work/d"
	cp "$work/c/step_00000002.safetensors" "$work/d/"
	if "$spill" train "${small[@]}" "${extra[@]}" --steps 4 --checkpoint "$work/d" --resume \
		>"$work/out" 2>"$work/err"; then
		if [ -z "$key" ]; then
			fail "resume with ${v%:*} was accepted"
		elif ! grep -q "warning: .* was trained with $key .*; this run goes on with $key" "$work/out"; then
			fail "resume with ${v%:*}: no warning naming $key: $(grep -i warn "$work/out")"
		else
			echo "resume with ${v%:*}: $(grep -m1 "warning" "$work/out")"
		fi
	elif [ -n "$key" ]; then
		fail "resume with ${v%:*} refused: $(tail -1 "$work/err")"
	else
		echo "resume with ${v%:*} refused: $(tail -1 "$work/err")"
	fi
done

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo ok
