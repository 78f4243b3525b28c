package dtype

import (
	"strings"
	"testing"
)

func TestDTypes(t *testing.T) {
	sizes := map[string]int{"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i8": 1, "u8": 1, "i32": 4, "i64": 8, "fp8e4m3": 1, "fp8e5m2": 1}
	if len(dtypes()) != len(sizes) {
		t.Fatalf("%d dtypes, want %d", len(dtypes()), len(sizes))
	}
	for name, size := range sizes {
		dt, err := Parse(name)
		if err != nil || dt.Size() != size || dt.String() != name {
			t.Errorf("%s: %v size %d, %v", name, dt, dt.Size(), err)
		}
	}
	for alias, want := range map[string]DType{"torch.bfloat16": BF16, "float8_e4m3fn": FP8E4M3, "FLOAT32": F32} {
		if dt, err := Parse(alias); err != nil || dt != want {
			t.Errorf("Parse(%q) = %v, %v", alias, dt, err)
		}
	}
	if _, err := Parse("f128"); err == nil || !strings.Contains(err.Error(), "want one of bf16") {
		t.Errorf("Parse(f128) = %v", err)
	}
}
