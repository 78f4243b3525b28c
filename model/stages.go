package model

import "fmt"

// stageLayers splits layers decoder layers over the trainer's pipeline
// stages and returns each stage's half-open range [lo, hi).
//
// With FirstStageLayers or LastStageLayers given, those stages get that
// many and the stages between share the rest evenly, as Megatron-Core's
// num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage
// do. Without them the split is even where PP divides the layers; where it
// does not, the middle stages get ceil(layers/PP) each (or fewer, when that
// would starve the ends) and the first and last stages share the rest, the
// last taking the smaller half (it also holds the LM head and the loss):
// DeepSeek-V3's 61 layers over 4 stages are 15, 16, 16, 14, and over 16
// stages 3, 4 x 14, 2. A stage left with no layers, or middle stages that
// cannot share the rest evenly, is an error naming the numbers. With one
// stage a model may have no layers at all (a plain list of tensors).
func stageLayers(layers int, t Trainer) ([][2]int, error) {
	t = t.normal()
	pp := t.PP
	f, l := t.FirstStageLayers, t.LastStageLayers
	if pp > 1 && pp > layers {
		return nil, fmt.Errorf("pp=%d is more than the model's %d layers: every pipeline stage needs at least one layer", pp, layers)
	}
	if pp == 1 {
		if (f > 0 && f != layers) || (l > 0 && l != layers) {
			return nil, fmt.Errorf("pp=1: first=%d last=%d, but the one stage holds all %d layers", f, l, layers)
		}
		return [][2]int{{0, layers}}, nil
	}
	counts := make([]int, pp)
	switch {
	case f > 0 || l > 0:
		middle := pp
		rest := layers
		if f > 0 {
			middle--
			rest -= f
		}
		if l > 0 {
			middle--
			rest -= l
		}
		if rest < 0 || (middle == 0 && rest != 0) || (middle > 0 && rest%middle != 0) {
			return nil, fmt.Errorf("pp=%d with first=%d last=%d: the other %d stages cannot share the remaining %d of %d layers evenly",
				pp, f, l, middle, rest, layers)
		}
		for s := range counts {
			if middle > 0 {
				counts[s] = rest / middle
			}
		}
		if f > 0 {
			counts[0] = f
		}
		if l > 0 {
			counts[pp-1] = l
		}
	case layers%pp == 0:
		for s := range counts {
			counts[s] = layers / pp
		}
	default:
		m := (layers + pp - 1) / pp
		rest := layers - (pp-2)*m
		for m > 1 && rest < 2 {
			m--
			rest = layers - (pp-2)*m
		}
		for s := 1; s < pp-1; s++ {
			counts[s] = m
		}
		counts[pp-1] = rest / 2
		counts[0] = rest - rest/2
	}
	out := make([][2]int, pp)
	lo := 0
	for s, n := range counts {
		if n < 1 {
			return nil, fmt.Errorf("pp=%d over %d layers leaves pipeline stage %d with %d layers", pp, layers, s, n)
		}
		out[s] = [2]int{lo, lo + n}
		lo += n
	}
	if lo != layers {
		return nil, fmt.Errorf("pp=%d: the stages hold %d layers, the model has %d", pp, lo, layers)
	}
	return out, nil
}
