package pattern_test

import (
	"math"
	"os"
	"testing"

	"github.com/m2n-dev/m2n/pattern"
)

// TestChangeModel reads the change model measured on the H200
// (bench/results/h200-change-model.txt) and maps tensor names onto it:
// the per-kind medians it prints for lr 1e-6 (q_proj 0.96%, down_proj
// 0.98%, norms 0, lm_head 1.02%), a fused expert gate_up projection
// between gate and up, MLA's projections near the attention kinds.
func TestChangeModel(t *testing.T) {
	data, err := os.ReadFile("../testdata/change-model.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := pattern.ReadChangeModel(data, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, want float64) {
		t.Helper()
		if got := m.Fraction(name); math.Abs(got-want) > 0.0006 {
			t.Errorf("%s: %.4f, want %.4f", name, got, want)
		}
	}
	near("model.layers.5.self_attn.q_proj.weight", 0.0096)
	near("model.layers.0.mlp.down_proj.weight", 0.0098)
	near("model.layers.0.input_layernorm.weight", 0)
	near("model.layers.9.mlp.experts.gate_up_proj", 0.00975)
	near("model.layers.9.self_attn.kv_a_proj_with_mqa.weight", 0.0097)
	near("lm_head.weight", 0.0102)
	if m2, err := pattern.ReadChangeModel(data, 1e-5); err != nil || m2.Fraction("model.layers.1.self_attn.q_proj.weight") < 0.05 {
		t.Errorf("lr 1e-5: %v, %v", m2, err)
	}
	if _, err := pattern.ReadChangeModel(data, 3e-4); err == nil {
		t.Error("a learning rate the file does not hold was accepted")
	}
	if _, err := pattern.ReadChangeModel([]byte(`{"runs":[{"lr":1,"tensors":[{"name":"w","changed":[2]}]}]}`), 0); err == nil {
		t.Error("a fraction of 2 was accepted")
	}
}
