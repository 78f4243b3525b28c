package dtype

import (
	"fmt"
	"strings"
)

// DType names a tensor element type and its size in bytes. The planner moves
// bytes; the dtype fixes how many bytes an element is.
type DType uint8

// The element types m2n knows. The zero DType is invalid.
const (
	invalid DType = iota
	BF16
	F16
	F32
	F64
	I8
	U8
	I32
	I64
	FP8E4M3
	FP8E5M2
)

var dtypeInfo = [...]struct {
	name  string
	size  int
	alias []string
}{
	invalid: {"invalid", 0, nil},
	BF16:    {"bf16", 2, []string{"bfloat16"}},
	F16:     {"f16", 2, []string{"float16", "fp16", "half"}},
	F32:     {"f32", 4, []string{"float32", "fp32", "float"}},
	F64:     {"f64", 8, []string{"float64", "fp64", "double"}},
	I8:      {"i8", 1, []string{"int8"}},
	U8:      {"u8", 1, []string{"uint8"}},
	I32:     {"i32", 4, []string{"int32", "int"}},
	I64:     {"i64", 8, []string{"int64", "long"}},
	FP8E4M3: {"fp8e4m3", 1, []string{"float8_e4m3fn", "e4m3"}},
	FP8E5M2: {"fp8e5m2", 1, []string{"float8_e5m2", "e5m2"}},
}

// Size returns the element size in bytes, 0 for an invalid one.
func (t DType) Size() int {
	if int(t) >= len(dtypeInfo) {
		return 0
	}
	return dtypeInfo[t].size
}

// Valid reports whether t is a known element type.
func (t DType) Valid() bool { return t != invalid && int(t) < len(dtypeInfo) }

// String returns the short name, such as "bf16".
func (t DType) String() string {
	if int(t) >= len(dtypeInfo) {
		return fmt.Sprintf("dtype(%d)", uint8(t))
	}
	return dtypeInfo[t].name
}

// dtypes lists every valid element type in a fixed order.
func dtypes() []DType {
	out := make([]DType, 0, len(dtypeInfo)-1)
	for t := BF16; int(t) < len(dtypeInfo); t++ {
		out = append(out, t)
	}
	return out
}

// Parse parses a dtype name: bf16, f16, f32, f64, i8, u8, i32, i64,
// fp8e4m3, fp8e5m2, or PyTorch's names (bfloat16, float32, float8_e4m3fn, ...).
func Parse(s string) (DType, error) {
	low := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "torch."))
	for t := BF16; int(t) < len(dtypeInfo); t++ {
		if low == dtypeInfo[t].name {
			return t, nil
		}
		for _, a := range dtypeInfo[t].alias {
			if low == a {
				return t, nil
			}
		}
	}
	names := make([]string, 0, len(dtypeInfo))
	for _, t := range dtypes() {
		names = append(names, t.String())
	}
	return invalid, fmt.Errorf("unknown dtype %q: want one of %s", s, strings.Join(names, ", "))
}
