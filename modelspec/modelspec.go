// Package modelspec assembles a whole model's layouts from the words
// people give: a model (a built-in name, a HuggingFace config.json or a
// tensor list), a Megatron-style trainer ("tp=2,pp=4,dp=4,ep=16") and a
// vLLM-style generator ("tp=8,dp=8"), cut and scaled to fit (scale,
// layers, MTP), with the generator's weights in FP8 or not; and one
// tensor's reshard from the words of its two layouts (Pair: a shape, a
// dtype, and each side's mesh, placements and ranks). refit's commands
// build models (layouts, sync, sim) and single-tensor layouts (layout,
// plan, bound, run, sim) through it alone (the C ABI's m2n_model_prepare
// still reads its load string and calls package model itself), and every
// error names the part of the spec to blame, so that a program can name
// its own flag or argument.
//
//	l, err := modelspec.Spec{Model: "deepseek-v3", Train: "tp=1,pp=4,ep=16,dp=32", Gen: "tp=8,dp=16"}.Layouts()
//	var e *modelspec.Error
//	if errors.As(err, &e) { fmt.Printf("--%s %q: %v\n", e.Field, e.Value, e.Err) }
package modelspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/model"
)

// Spec is a model and its two parallel configurations as text, and how to
// shape the model.
type Spec struct {
	// Model is a built-in model (model.Builtins), a config.json or a
	// tensor list (model.Load).
	Model string
	// Train and Gen are the trainer's and the generator's sizes
	// (model.ParseTrainer, model.ParseGenerator; sizes not given are 1).
	Train, Gen string
	// Scale divides widths and expert counts (0 or 1: none); Layers keeps
	// the first Layers decoder layers (0: all); MTP adds DeepSeek's
	// multi-token-prediction layer.
	Scale  int64
	Layers int
	MTP    bool
	// FP8 puts the generator's linear and expert weights in FP8 E4M3 with
	// this scaling, as vLLM's Fp8Config quantizes them
	// (model.NewQuantized); 0 keeps the source's dtypes.
	FP8 fp8.Mode
}

// Error is a part of a Spec or a Pair that cannot be used. Field is the
// part to blame: of a Spec "model", "train", "gen", "scale", "layers",
// "mtp", "fp8" (the scaling the model's tensors cannot take) or "dtype"
// (tensors that cannot convert to FP8); of a Pair "shape", "dtype",
// "world", "pp-stages" and each side's "mesh", "placements" and "ranks"
// after its prefix ("src-mesh"). Value is its text ("" for mtp, a Spec's dtype, and
// a missing part: ErrRequired).
type Error struct {
	Field, Value string
	Err          error
}

func (e *Error) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("%s %q: %v", e.Field, e.Value, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Load returns the model the spec names, shaped by Scale, Layers and MTP.
// Each of them is tried alone first, so that the error blames the one
// that does not fit the model. The model is checked with one layer where
// Layers cuts it, so that a config of any layer count (2^53, say) costs
// only the layers kept; one too large to keep whole is blamed on Layers
// only if it loads cut.
func (s Spec) Load() (*model.Model, error) {
	if s.Model == "" {
		return nil, &Error{Field: "model", Err: fmt.Errorf("required: a built-in model (%s), a config.json or a tensor list", strings.Join(model.Builtins(), ", "))}
	}
	probe := model.LoadOptions{}
	if s.Layers > 0 {
		probe.Layers = 1
	}
	if _, err := model.Load(s.Model, probe); err != nil {
		return nil, &Error{Field: "model", Value: s.Model, Err: err}
	}
	scale := strconv.FormatInt(s.Scale, 10)
	switch {
	case s.Scale < 0:
		return nil, &Error{Field: "scale", Value: scale, Err: errors.New("want at least 1 (0 and 1 keep the widths)")}
	case s.Layers < 0:
		return nil, &Error{Field: "layers", Value: strconv.Itoa(s.Layers), Err: errors.New("want at least 1 (0 keeps them all)")}
	}
	if s.MTP {
		if _, err := model.Load(s.Model, model.LoadOptions{MTP: true, Layers: probe.Layers}); err != nil {
			return nil, &Error{Field: "mtp", Err: err}
		}
	}
	if s.Layers > 0 {
		if _, err := model.Load(s.Model, model.LoadOptions{Layers: s.Layers}); err != nil {
			return nil, &Error{Field: "layers", Value: strconv.Itoa(s.Layers), Err: err}
		}
	}
	m, err := model.Load(s.Model, model.LoadOptions{MTP: s.MTP, Scale: s.Scale, Layers: s.Layers})
	if err != nil {
		return nil, &Error{Field: "scale", Value: scale, Err: err}
	}
	return m, nil
}

// Layouts loads the model and lays it out from the trainer to the
// generator (model.NewQuantized). A layout the model does not allow is
// blamed on the side that cannot split it.
func (s Spec) Layouts() (*model.Layouts, error) {
	m, err := s.Load()
	if err != nil {
		return nil, err
	}
	tr, err := model.ParseTrainer(s.Train)
	if err != nil {
		return nil, &Error{Field: "train", Value: s.Train, Err: err}
	}
	gen, err := model.ParseGenerator(s.Gen)
	if err != nil {
		return nil, &Error{Field: "gen", Value: s.Gen, Err: err}
	}
	l, err := model.NewQuantized(m, tr, gen, s.FP8)
	if err != nil {
		var se *model.SplitError
		switch {
		case errors.As(err, &se) && se.Side == model.Dst:
			return nil, &Error{Field: "gen", Value: s.Gen, Err: err}
		case s.FP8 != 0 && strings.Contains(err.Error(), "--fp8-scale"):
			return nil, &Error{Field: "fp8", Value: s.FP8.String(), Err: err}
		case s.FP8 != 0 && strings.Contains(err.Error(), "e4m3"):
			return nil, &Error{Field: "dtype", Err: err}
		}
		return nil, &Error{Field: "train", Value: s.Train, Err: err}
	}
	return l, nil
}
