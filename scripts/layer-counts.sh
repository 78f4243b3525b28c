#!/bin/sh
# layer-counts.sh: the tree against issue 26's targets, for anyone to re-run.
#
#   scripts/layer-counts.sh [SECONDS]    (from the repository root)
#
# Prints, per package, the exported identifiers and non-test lines, the
# non-test Go files over 600 lines and the non-test functions over 120 lines
# (go run ./internal/layercounts; its header states the counting rules),
# then the repeated-block pairs: `duplicates --most 200 --seconds SECONDS`
# (default 150), the pairs it marks boilerplate and those it does not, and
# scripts/classify-duplicates.py's sorting of the latter (logic is what
# repeats statements). Targets: about 60 exported a package (session
# exempt), no file over 600 lines, no function over 120, at most 32 pairs
# not boilerplate (a third of the 97 that issue 26 found), apps/refit under
# 3,000 non-test lines. Needs `duplicates` on PATH for the last part.
set -e
cd "$(dirname "$0")/.."
go run ./internal/layercounts .
if ! command -v duplicates >/dev/null; then
	echo "duplicates not on PATH: no repeated-block pairs"
	exit 0
fi
d=$(mktemp)
trap 'rm -f "$d"' EXIT
duplicates --most 200 --seconds "${1:-150}" >"$d"
all=$(head -1 "$d")
rows=$(grep -c '^D[0-9]' "$d" || true)
boiler=$(grep '^D[0-9]' "$d" | grep -c boilerplate || true)
more=$(sed -n 's/^(+\([0-9]*\) more pairs)$/\1/p' "$d")
echo "repeated-block pairs: $all"
echo "  listed $rows, +${more:-0} past --most (boilerplate: it comes last)"
echo "  marked boilerplate $boiler, not boilerplate $((rows - boiler)) (target: at most 32)"
grep -E '^(left out|incomplete):' "$d" | sed 's/^/  /' || true
python3 scripts/classify-duplicates.py . "$d" | sed 's/^/  /'
