# Sourced by the train tests. pick_python MODULE...: sets py to the first of
# Debian's python3 and the python3 on PATH that imports every MODULE, or to ""
# when neither does. A GPU machine's Debian python3 may lack numpy, and its
# torch may live in a venv that is first on PATH.
pick_python() {
	local c mods
	mods=$(IFS=,; echo "$*")
	py=
	for c in /usr/bin/python3 python3; do
		if command -v "$c" >/dev/null 2>&1 && "$c" -c "import $mods" 2>/dev/null; then
			py=$(command -v "$c")
			return 0
		fi
	done
	return 1
}
