# Every command README.md shows, run here or skipped with a reason: each
# command line of its code blocks (a `spill ...`, `make ...`, `$ ...` line) must
# be classified below, so a new README command fails this test until it is.
# The runnable ones run (a long run shortened with --steps where the README
# allows, `make demo` as its first 2 steps) and their output is checked against
# what the README quotes next to them: the demo's banner verbatim, the
# `spill sim` 10b figures within 25%, the prepare token counts and the 10-step
# loss of the report example exactly (they are deterministic).
set -u
spill=$(realpath "$O/bin/spill")
repo=$(cd "$(dirname "$0")/../.." && pwd)
readme="$repo/README.md"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
have_bible=1
command -v bible >/dev/null 2>&1 || have_bible=0

# The README block that starts after the line matching $1 (its text, no fences).
block_after() {
	awk -v pat="$1" '!seen && index($0, pat) { seen = 1; next }
		seen == 1 && /^```/ { seen = 2; next } seen == 2 && /^```/ { exit } seen == 2 { print }' "$readme"
}
near() { # near WHAT GOT WANT TOL: |GOT - WANT| <= TOL x WANT
	awk -v g="$2" -v w="$3" -v t="$4" 'BEGIN { exit !(g != "" && w != "" && (g - w) <= t * w && (w - g) <= t * w) }' ||
		fail "$1: got '$2', the README says '$3' (tolerance $4)"
}

run_demo() { # make demo = `spill train` with no flags: its banner, 2 steps
	if [ $have_bible = 0 ]; then echo "skip: make demo: no bible (Debian's bible-kjv)"; return; fi
	"$spill" train --steps 2 >demo.out 2>&1 || { tail -3 demo.out; fail "spill train --steps 2"; return; }
	block_after 'It prints:' | sed -n '1,5p' >demo.want
	while IFS= read -r line; do
		grep -qxF -- "$line" demo.out || fail "README's demo line not printed: $line"
	done <demo.want
	echo "ok: make demo's banner ($(wc -l <demo.want) lines) as the README quotes it"
	awk 'length($0) > 79 { bad = 1; print "FAIL: wider than 79 columns: " $0 } END { exit bad }' \
		<(grep '^step ' demo.out) || fails=$((fails + 1))
}

run_sim() { # spill sim 10b: the README's figures within 25%
	local got want
	got=$("$spill" sim --model 10b --profile gtx1080ti-x8 2>&1) || { fail "spill sim 10b: $got"; return; }
	want=$(block_after 'prints, in a few seconds of')
	# the plan of the profile (the banner has one too)
	[ "$(grep "^plan:" <<<"$got" | tail -1)" = "$(grep "^plan:" <<<"$want")" ] ||
		fail "spill sim 10b: '$(grep "^plan:" <<<"$got" | tail -1)' vs the README's '$(grep "^plan:" <<<"$want")'"
	near "sim s/step" "$(awk '/ s\/step/ { print $3 }' <<<"$got")" "$(awk '/ s\/step/ { print $3 }' <<<"$want")" 0.25
	near "sim compute" "$(awk '/^time per step/ { print $8 }' <<<"$got")" "$(awk '/^time per step/ { print $8 }' <<<"$want")" 0.25
	near "sim H2D total" "$(awk '/^H2D/ { print $8 }' <<<"$got")" "$(awk '/^H2D/ { print $8 }' <<<"$want")" 0.25
	near "sim D2H total" "$(awk '/^D2H/ { print $8 }' <<<"$got")" "$(awk '/^D2H/ { print $8 }' <<<"$want")" 0.25
	echo "ok: spill sim --model 10b: $(grep ' s/step' <<<"$got")"
}

run_prepare_report() { # the $ lines of the prepare/report example
	if [ $have_bible = 0 ]; then echo "skip: prepare/report example: no bible"; return; fi
	local want
	want=$(block_after 'by default), and `spill report` prints')
	bible -l 79 Gen1:1-Rev22:21 >kjv.txt && "$spill" prepare kjv.txt -o kjv --name kjv >prep.out 2>&1 ||
		{ cat prep.out; fail "spill prepare kjv.txt"; return; }
	grep ' tokens$' <<<"$want" | diff - prep.out >/dev/null || fail "prepare: $(cat prep.out) vs the README"
	"$spill" train --data kjv --steps 10 --no-tune --stats-json run.json >/dev/null 2>&1 &&
		"$spill" report run.json | head -5 >report.out || { fail "train --data kjv --steps 10, report"; return; }
	local l1 l2
	l1=$(grep -o 'loss [0-9.]* -> [0-9.]*' report.out)
	l2=$(grep -o 'loss [0-9.]* -> [0-9.]*' <<<"$want")
	[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "report: '$l1', the README says '$l2'"
	grep -qF "$(grep '^== ' <<<"$want")" report.out || fail "report: no '$(grep '^== ' <<<"$want")'"
	echo "ok: prepare token counts and the 10-step report ($l1)"
}

# Each README command line -> what this test does with it.
classify() {
	case "$1" in
	'make demo') run_demo ;;
	'make test') echo "skip: make test: this test runs under it" ;;
	'spill train --model gpt2 --steps 1000 --data DIR --checkpoint ck --checkpoint-every 100' | \
		'spill train --model gpt2 --steps 2000 --data DIR --checkpoint ck --resume')
		echo "skip: $1: GPT-2 124M on the CPU takes minutes a step; DIR is the reader's (tests/train/test_train.sh resumes the tiny model)" ;;
	'spill train --schedule harmony-pp --microbatch 2 --group 4 --budget 16M --trace t.json')
		"$spill" train --schedule harmony-pp --microbatch 2 --group 4 --budget 16M --trace t.json \
			--steps 2 --checkpoint . --stats-json run.json >hp.out 2>&1 && grep -q '^plan: harmony-pp, .*microbatch 2, group 4' hp.out &&
			[ -s t.json ] && echo "ok: $1 (2 steps)" || { tail -3 hp.out; fail "$1 --steps 2"; } ;;
	'spill sim --model 10b --profile gtx1080ti-x8') run_sim ;;
	'spill report run.json') # of the harmony-pp run above
		"$spill" report run.json | grep -q '^2 steps' && echo "ok: $1" || fail "$1" ;;
	'spill plan --largest --profile h100-sxm --host-mem 128G --disk-mem 64G')
		"$spill" plan --largest --profile h100-sxm --host-mem 128G --disk-mem 64G 2>/dev/null |
			grep -q '^largest GPT that trains: [0-9.]*B' && echo "ok: $1" || fail "$1" ;;
	'spill prepare book.txt notes.txt -o DIR')
		printf 'In the beginning.\n' >book.txt && printf 'Notes.\n' >notes.txt &&
			"$spill" prepare book.txt notes.txt -o DIR | grep -q '^DIR/corpus_train_000000.bin: [0-9]* tokens$' &&
			echo "ok: $1" || fail "$1" ;;
	'spill export --format hf ck/step_00001000.safetensors hf')
		# the checkpoint of the harmony-pp run above (step 2, in .)
		"$spill" export --format hf step_00000002.safetensors hf >/dev/null && [ -s hf/config.json ] &&
			echo "ok: $1 (of a 2-step checkpoint)" || fail "$1" ;;
	"bible -l 79 Gen1:1-Rev22:21 > kjv.txt && spill prepare kjv.txt -o kjv --name kjv") run_prepare_report ;;
	'spill train --data kjv --steps 10 --no-tune --stats-json run.json > /dev/null && spill report run.json | head -5')
		echo "ok: $1 (with the line above)" ;;
	'spill tune --grid lr=1e-3,3e-4 batch=8,16 --steps 60' | 'spill tune --optim sgd --momentum 0.9 --grid lr=0.1,0.03')
		# shellcheck disable=SC2086 # the README's words
		"$spill" ${1#spill } --steps 2 >tune.out 2>&1 && grep -q '^ *1\. tiny' tune.out &&
			echo "ok: $1 (2 steps)" || { tail -3 tune.out; fail "$1 --steps 2"; } ;;
	'spill tune --model gpt2,gpt2-medium --grid lr=3e-4,1e-4 --halving 20')
		echo "skip: $1: GPT-2 and GPT-2 medium on the CPU: hours" ;;
	'spill tune --sim --model gpt2 --grid batch=8,16 --devices 8 --profile gtx1080ti-x8')
		# shellcheck disable=SC2086
		"$spill" ${1#spill } >tsim.out 2>&1 && grep -q 'gpt2 batch=16 .*20/20' tsim.out &&
			echo "ok: $1" || { tail -3 tsim.out; fail "$1"; } ;;
	'SPILL_HOST_FAIL=1:200 spill tune --recover --steps 6')
		SPILL_HOST_FAIL=1:200 "$spill" tune --recover --steps 6 >rec.out 2>&1 && grep -q '^ *4\. tiny' rec.out &&
			echo "ok: $1" || { tail -3 rec.out; fail "$1"; } ;;
	'spill run --budget 8G --stats-json run.json -- ./train_gpt2cu' | 'spill report run.json  # (of spill run)')
		echo "skip: $1: needs a GPU and llm.c's train_gpt2cu (tests/shim/ run the shim on an emulated libcuda)" ;;
	'make install PREFIX=$HOME/spill' | 'export PKG_CONFIG_PATH='* | 'make -C examples' | examples/mlp | examples/graph)
		echo "skip: $1: tests/tools/test_examples.sh installs into a temporary prefix and runs them" ;;
	*) fail "README command not classified in tests/tools/test_readme.sh: '$1'" ;;
	esac
}

# The command lines of the README's code blocks, comments dropped; a
# `spill report` after `spill run` is told apart from the training one.
mapfile -t cmds < <(awk '
	/^```/ { inb = !inb; next }
	inb {
		line = $0
		if (line ~ /^\$ /) line = substr(line, 3)
		else if (line !~ /^(spill |make |export |examples\/|SPILL_[A-Z_]*=)/) next
		if (line ~ /^spill [a-z-]+:/) next # output: "spill train: GPT-2 ..."
		sub(/[ \t]+#.*$/, "", line)
		if (line == "spill report run.json" && prev ~ /^spill run /) line = line "  # (of spill run)"
		prev = line
		print line
	}' "$readme")
[ ${#cmds[@]} -ge 20 ] || fail "only ${#cmds[@]} command lines found in README.md"
for c in "${cmds[@]}"; do
	t0=$SECONDS
	classify "$c"
	[ $((SECONDS - t0)) -lt 5 ] || echo "   ($((SECONDS - t0)) s)"
done
exit $((fails > 0))
