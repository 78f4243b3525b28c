package session

import (
	"fmt"

	"github.com/m2n-dev/m2n/lora"
	"github.com/m2n-dev/m2n/model"
)

// MergeLoRA merges the LoRA adapters that this rank's destination buffers
// ab of adapters hold (a model prepared from model.Adapters of m's model,
// on the same trainer and generator, after its step) into this rank's
// destination parts of m's weights in wb, in place: what a generator rank
// does after every adapter step, so that no weight crosses the network.
// mg keeps what it merged before (lora.Merger: the weights hold the base
// plus the latest adapters); give every step of the pair the same one.
// Ranks that hold no generator part do nothing. A generator's FP8 weight
// is re-quantized with its scales, block by block, from the base mg kept
// (lora.Merger). On GPU sessions the merge runs on host copies of the
// buffers (EachPart).
func (m *Model) MergeLoRA(mg *lora.Merger, wb *ModelBuffers, adapters *Model, ab *ModelBuffers) error {
	if len(m.Layouts.Stages) != len(adapters.Layouts.Stages) {
		return fmt.Errorf("session: LoRA merge of a model of %d pipeline stages with adapters of %d: lay both out on the same trainer and generator",
			len(m.Layouts.Stages), len(adapters.Layouts.Stages))
	}
	type pair struct {
		a, b  *lora.Matrix
		scale float64
	}
	got := make([]map[string]*pair, len(adapters.Layouts.Stages)) // by weight name, per stage
	err := adapters.EachPart(ab, model.Dst, false, func(p ModelPart) error {
		ad := p.Tensor.Adapter
		if ad == nil {
			return fmt.Errorf("tensor %s is not a LoRA adapter (model.Adapters)", p.Tensor.Name)
		}
		if got[p.Stage] == nil {
			got[p.Stage] = map[string]*pair{}
		}
		pr := got[p.Stage][ad.Base]
		if pr == nil {
			pr = &pair{scale: ad.Scale}
			got[p.Stage][ad.Base] = pr
		}
		x := matrixOf(p)
		if ad.B {
			pr.b = &x
		} else {
			pr.a = &x
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.EachPart(wb, model.Dst, true, func(p ModelPart) error {
		pr := got[p.Stage][p.Tensor.Whole().Name]
		if pr == nil {
			return nil // not adapted
		}
		if pr.a == nil || pr.b == nil {
			return fmt.Errorf("weight %s: this rank holds only one of its adapter's A and B", p.Tensor.Name)
		}
		w := matrixOf(p)
		if p.Tensor.Scale != 0 {
			w.Scales, w.Mode = p.Scale, p.Tensor.Scale // an FP8 weight: re-quantized (lora.Merger)
		}
		return mg.Merge(p.Tensor.Name, w, *pr.a, *pr.b, pr.scale)
	})
}

// matrixOf is a destination part as a merge operand.
func matrixOf(p ModelPart) lora.Matrix {
	x := lora.Matrix{Layout: p.Tensor.Dst, Rank: p.Rank, Buf: p.Bytes, View: p.Part.View}
	if p.Tensor.Origin != nil {
		x.Origin, x.Whole = p.Tensor.Origin, p.Tensor.Whole().LayoutShape
	}
	return x
}
