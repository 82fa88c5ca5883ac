# The README's SPILL_* table matches common/params.def (regenerate: make readme).
set -eu
tools/update-readme.sh "$O/bin/spill" --check
