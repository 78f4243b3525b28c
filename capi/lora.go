package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"context"
	"fmt"
	"strconv"

	"github.com/m2n-dev/m2n/lora"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/reshard"
)

// LoRA (model.Adapters, session.Model.MergeLoRA): m2n_model_lora prepares
// the adapters of a prepared model as a model of their own on its
// session, m2n_model_merge_lora merges what their last run delivered into
// the model's destination buffers, and m2n_model_merge_lora_scales into
// FP8 ones with their scales.

//export m2n_model_lora
func m2n_model_lora(base C.m2n_model, rank C.int64_t, alpha C.double, targets, route *C.char, out *C.m2n_model) (rc C.int) {
	defer recovered(&rc)
	be, err := modelOf(base)
	if err != nil {
		return result(usedAfterClose(uint64(base), "model", "m2n_model_lora", err))
	}
	if out == nil {
		return result(invalidf("m2n_model_lora: out is NULL"))
	}
	*out = 0
	se := be.se
	se.mu.Lock()
	defer se.mu.Unlock()
	l, localErr := adapterLayouts(be.m.Layouts, int64(rank), float64(alpha), goString(targets))
	r, rerr := routeOf(goString(route))
	if localErr == nil {
		localErr = rerr
	}
	if localErr != nil {
		localErr = fmt.Errorf("rank %d: %w", se.s.Rank(), localErr)
	}
	if err := se.s.Agree(context.Background(), nil, localErr); err != nil {
		return result(err)
	}
	me, err := newModelEntry(se, l, r)
	if err != nil {
		return result(err)
	}
	me.loraOf, me.merger = be, lora.NewMerger()
	mh := register(me)
	se.models[mh] = me
	*out = C.m2n_model(mh)
	return C.M2N_OK
}

// adapterLayouts lays out the LoRA adapters of base's model on base's
// trainer and generator (model.NewAdapters); targets is a comma-separated
// list of projections ("" for model.DefaultLoRATargets).
func adapterLayouts(base *model.Layouts, rank int64, alpha float64, targets string) (*model.Layouts, error) {
	l, err := model.NewAdapters(base, model.LoRA{Rank: rank, Alpha: alpha, Targets: model.ParseLoRATargets(targets)})
	if err != nil {
		return nil, &reshard.FieldError{Field: "lora", Got: strconv.FormatInt(rank, 10), Why: err.Error()}
	}
	return l, nil
}

//export m2n_model_merge_lora
func m2n_model_merge_lora(base, adapters C.m2n_model, dst *C.m2n_named_buffer, ndst C.int64_t, adapterDst *C.m2n_named_buffer, nadapter C.int64_t) (rc C.int) {
	defer recovered(&rc)
	return mergeLoRA("m2n_model_merge_lora", base, adapters, dst, ndst, nil, 0, adapterDst, nadapter)
}

//export m2n_model_merge_lora_scales
func m2n_model_merge_lora_scales(base, adapters C.m2n_model, dst *C.m2n_named_buffer, ndst C.int64_t, scale *C.m2n_named_buffer, nscale C.int64_t,
	adapterDst *C.m2n_named_buffer, nadapter C.int64_t) (rc C.int) {
	defer recovered(&rc)
	return mergeLoRA("m2n_model_merge_lora_scales", base, adapters, dst, ndst, scale, nscale, adapterDst, nadapter)
}

// mergeLoRA is m2n_model_merge_lora (fn) and m2n_model_merge_lora_scales:
// scale names base's scale tensors of this rank (its FP8 weights'),
// checked as m2n_model_run checks them. A bad buffer is this rank's alone
// (M2N_ERR_INVALID): the merge is no collective.
func mergeLoRA(fn string, base, adapters C.m2n_model, dst *C.m2n_named_buffer, ndst C.int64_t, scale *C.m2n_named_buffer, nscale C.int64_t,
	adapterDst *C.m2n_named_buffer, nadapter C.int64_t) C.int {
	be, err := modelOf(base)
	if err != nil {
		return result(usedAfterClose(uint64(base), "model", fn, err))
	}
	ae, err := modelOf(adapters)
	if err != nil {
		return result(usedAfterClose(uint64(adapters), "model", fn, err))
	}
	if ae.loraOf != be {
		return result(invalidf("%s: the adapters model was not made from this model by m2n_model_lora", fn))
	}
	be.se.mu.Lock()
	defer be.se.mu.Unlock()
	var wn, an [2][]C.m2n_named_buffer
	var sn []C.m2n_named_buffer
	if wn[1], err = namedOf(dst, ndst); err != nil {
		return result(invalidf("%s: dst: %v", fn, err))
	}
	if sn, err = namedOf(scale, nscale); err != nil {
		return result(invalidf("%s: scale: %v", fn, err))
	}
	if an[1], err = namedOf(adapterDst, nadapter); err != nil {
		return result(invalidf("%s: adapter_dst: %v", fn, err))
	}
	if len(sn) == 0 && len(be.scales) > 0 {
		return result(invalidf("%s: rank %d holds FP8 weights of this model (%d scale tensors) and no scale buffers were given: "+
			"merge with m2n_model_merge_lora_scales, giving their scales", fn, be.se.s.Rank(), len(be.scales)))
	}
	wb, err := be.modelBuffers(wn, sn)
	if err != nil {
		return result(&argError{msg: fn + ": " + err.Error(), err: err})
	}
	ab, err := ae.modelBuffers(an, nil)
	if err != nil {
		return result(&argError{msg: fn + ": adapter_dst: " + err.Error(), err: err})
	}
	return result(be.m.MergeLoRA(ae.merger, wb, ae.m, ab))
}
