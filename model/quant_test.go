package model

import (
	"testing"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
)

// TestNewQuantized: with an FP8 mode every 2-D and 3-D bf16 tensor's
// destination is fp8e4m3 with that mode, 1-D tensors and other dtypes stay,
// and the generator's fused buffers hold FP8 (their bytes halve).
func TestNewQuantized(t *testing.T) {
	m, err := Load("deepseek-v3", LoadOptions{Scale: 64, Layers: 4})
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := ParseTrainer("tp=1,pp=2,ep=2,dp=2")
	g, _ := ParseGenerator("tp=2,dp=2")
	l, err := NewQuantized(m, tr, g, fp8.Block)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(m, tr, g)
	if err != nil {
		t.Fatal(err)
	}
	conv := 0
	for si, st := range l.Stages {
		for i, tl := range st.Tensors {
			want := tl.DType == placement.BF16 && (len(tl.Shape) == 2 || len(tl.Shape) == 3)
			if got := tl.Dst.DType() == placement.FP8E4M3; got != want || (tl.Scale == fp8.Block) != want {
				t.Errorf("%s %v: destination %v, scale %v", tl.Name, tl.Shape, tl.Dst.DType(), tl.Scale)
			}
			if tl.Src.DType() != tl.DType {
				t.Errorf("%s: source dtype %v, the tensor's %v", tl.Name, tl.Src.DType(), tl.DType)
			}
			if want {
				conv++
				if got, was := st.Bytes(Dst, 2), plain.Stages[si].Bytes(Dst, 2); got >= was {
					t.Errorf("stage %d: generator rank holds %d bytes in FP8, %d in bf16", si, got, was)
				}
			}
			_ = i
		}
		for _, b := range st.Buffers(Dst, 2) {
			if b.Name == "model.layers.0.mlp.gate_up_proj.weight" && b.DType != placement.FP8E4M3 {
				t.Errorf("fused %s is %v", b.Name, b.DType)
			}
		}
	}
	if conv == 0 {
		t.Error("no tensor converts")
	}
	if _, err := NewQuantized(m, tr, g, fp8.Mode(9)); err == nil {
		t.Error("mode 9 accepted")
	}
}
