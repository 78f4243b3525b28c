#!/usr/bin/env bash
# rewrite-dtype.sh moves the element types out of package placement into
# package dtype (issue 26) and rewrites their users:
#
#	placement.DType, placement.BF16 ... placement.FP8E5M2 -> dtype.DType, dtype.BF16 ...
#	placement.ParseDType                                 -> dtype.Parse
#
# Run it from the repository root. Step 1 (the move itself) runs only where
# dtype/dtype.go does not exist yet; step 2 (the users) may be re-run on a
# branch that added new uses after the move: it touches only files that
# still name the old identifiers (and the few files with a variable called
# dtype, listed below, which it renames). It needs goimports (to drop the placement
# import where a file no longer uses it); GOIMPORTS names it, else
# `go run golang.org/x/tools/cmd/goimports@latest` is used.
#
# A file whose local variable or parameter is called dtype shadows the
# package after step 2: `go build ./... && go vet ./...` names it; rename
# the variable before goimports runs (step 2 lists those of the tree when
# the move was made).
set -euo pipefail

GOIMPORTS=${GOIMPORTS:-"go run golang.org/x/tools/cmd/goimports@latest"}
IMPORT='"github.com/m2n-dev/m2n/dtype"'
NAMES='DType|BF16|F16|F32|F64|I8|U8|I32|I64|FP8E4M3|FP8E5M2'

# Step 1: the package itself.
if [ ! -f dtype/dtype.go ]; then
	mkdir -p dtype
	git mv placement/dtype.go dtype/dtype.go
	sed -i -E \
		-e 's/^package placement$/package dtype/' \
		-e 's/\binvalidDType\b/invalid/g' \
		-e 's/\bParseDType\b/Parse/g' \
		-e 's/0 for invalid\./0 for an invalid one./' \
		dtype/dtype.go
	# TestDTypes moves with them.
	{
		printf 'package dtype\n\nimport (\n\t"strings"\n\t"testing"\n)\n\n'
		awk '/^func TestDTypes\(/,/^}/' placement/placement_test.go | sed -E 's/\bParseDType\b/Parse/g'
	} >dtype/dtype_test.go
	awk '/^func TestDTypes\(/{skip=1} !skip{print} skip&&/^}/{skip=0; getline}' placement/placement_test.go >placement/placement_test.go.new
	mv placement/placement_test.go.new placement/placement_test.go
	# Inside placement: NewLayout's parameter was called dtype.
	sed -i -E \
		-e 's/^func NewLayout\(shape \[\]int64, dtype DType,/func NewLayout(shape []int64, dt DType,/' \
		-e 's/!dtype\.Valid\(\)/!dt.Valid()/' \
		-e 's/"invalid dtype %v", dtype\)/"invalid dtype %v", dt)/' \
		-e 's/int64\(dtype\.Size\(\)\)/int64(dt.Size())/g' \
		-e 's/FormatShape\(shape\), dtype, /FormatShape(shape), dt, /' \
		-e 's/dtype\.Size\(\), int64\(math\.MaxInt64\)/dt.Size(), int64(math.MaxInt64)/' \
		-e 's/^(\t+dtype: +)dtype,$/\1dt,/' \
		placement/layout.go
	# Bare names inside package placement (not methods such as Layout.DType
	# or WithDType, nor fields).
	for f in placement/*.go; do
		sed -i -E \
			-e "/^\s*\/\//!s/(^|[^.A-Za-z0-9_\"])($NAMES)\b([^(\"]|$)/\1dtype.\2\3/g" \
			-e 's/(^|[^.A-Za-z0-9_])ParseDType\(/\1dtype.Parse(/g' \
			-e 's/(^|[^.A-Za-z0-9_])invalidDType\b/\1dtype.DType(0)/g' \
			"$f"
	done
	cat >dtype/doc.go <<'DOC'
// Package dtype names the element types of m2n's tensors and their sizes
// in bytes: bf16, f16, f32, f64, i8, u8, i32, i64 and the two FP8 formats.
// The planner moves bytes; a layout's dtype fixes how many bytes an element
// is. Parse reads m2n's short names and PyTorch's.
//
//	dt, err := dtype.Parse("torch.bfloat16") // dtype.BF16, 2 bytes
//	l, err := placement.NewLayout([]int64{7168, 2048}, dt, m, ps)
package dtype
DOC
	gofmt -w dtype
	sed -i -e '1,3c\
// Package placement is the layout algebra of m2n: placements and layouts\
// (of package dtype'"'"'s element types), with each rank'"'"'s local region\
// computed exactly as PyTorch DTensor computes it.' placement/doc.go
fi

# Step 2: every user of the old names, Go files and README.md.
files=$(grep -rlE --include='*.go' "placement\.($NAMES|ParseDType)\b" . || true)
for f in $files; do
	sed -i -E \
		-e 's/\bplacement\.ParseDType\b/dtype.Parse/g' \
		-e "s/\bplacement\.($NAMES)\b/dtype.\1/g" \
		"$f"
done
# Local variables called dtype in the tree at the move would shadow the
# package (and goimports would then drop its import): renamed first. A
# re-run finds none of these lines.
sed -i -E \
	-e 's/shape, dtype, srcMesh, srcPl/shape, dtypeName, srcMesh, srcPl/' \
	-e 's/fuzzLayout\(shape, dtype, /fuzzLayout(shape, dtypeName, /' \
	-e 's/^func fuzzLayout\(shape, dtype, meshShape/func fuzzLayout(shape, dtypeName, meshShape/' \
	-e 's/dtype\.Parse\(dtype\)/dtype.Parse(dtypeName)/' \
	reshard/fuzz_test.go 2>/dev/null || true
for f in apps/refit/layout.go apps/refit/quantize.go; do
	[ -f "$f" ] || continue
	sed -i -E \
		-e 's/^(\tvar (in, )?shape, )dtype, /\1dtypeName, /' \
		-e 's/dtype\.Parse\(dtype\)/dtype.Parse(dtypeName)/' \
		-e 's/flagError\("dtype", dtype, /flagError("dtype", dtypeName, /' \
		-e 's/fs\.StringVar\(&dtype, /fs.StringVar(\&dtypeName, /' \
		"$f"
done
sed -i -E \
	-e 's/^func (lay|mustLay)\((t testing\.TB, )?shape, dtype, /func \1(\2shape, dtypeName, /' \
	-e 's/dtype\.Parse\(dtype\)/dtype.Parse(dtypeName)/' \
	-e 's/lay\(shape, dtype, meshShape/lay(shape, dtypeName, meshShape/' \
	refit/call_test.go 2>/dev/null || true

files="$files $(grep -lE --include='*.go' '(^|[^.A-Za-z0-9_])dtype\.' placement/*.go || true)"
# The import goes into the block's group of m2n packages (before its first
# one, goimports sorts it), or opens the block where the file imports none.
imp=$(printf '%s' "$IMPORT" | sed 's/[\/&]/\\&/g')
for f in $files; do
	grep -qF "$IMPORT" "$f" && continue
	if grep -q '^\s*"github.com/m2n-dev/m2n/' "$f"; then
		sed -i -E "0,/^(\s*)\"github.com\/m2n-dev\/m2n\//s//\1$imp\n&/" "$f"
	elif grep -q '^import ($' "$f"; then
		sed -i "0,/^import (\$/s//import (\n\t$imp/" "$f"
	else
		sed -i "0,/^import /s//import $imp\nimport /" "$f"
	fi
done
# shellcheck disable=SC2086
[ -z "${files// /}" ] || $GOIMPORTS -w $files
if grep -qE "placement\.($NAMES|ParseDType)\b" README.md; then
	sed -i -E -e 's/\bplacement\.ParseDType\b/dtype.Parse/g' -e "s/\bplacement\.($NAMES)\b/dtype.\1/g" README.md
fi

