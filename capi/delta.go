package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
)

// Delta mode (m2n_options.delta, session.Options.Delta): m2n_call_resync,
// m2n_model_resync (refit.Call.Resync), and m2n_call_delta_report,
// m2n_model_delta_report, which read the reports of the last run that
// callEntry.last and modelEntry.last keep.

// putDelta fills out from the reports of one step (one per pipeline
// stage; nil entries are stages this rank is not in, or none began): the
// bytes sent, and what they move dense (Stats.DenseSent in a delta step,
// Stats.Sent itself in a full sync).
func putDelta(out *C.m2n_delta_report, reps []*refit.Report) {
	size := out.struct_size
	*out = C.m2n_delta_report{struct_size: size}
	var sent, dense [reshard.LinkClasses]int64
	steps, deltas := 0, 0
	for _, r := range reps {
		if r == nil {
			continue
		}
		steps++
		d := r.Stats.Sent
		if r.Delta {
			deltas++
			d = r.Stats.DenseSent
		}
		for c := range sent {
			sent[c] += r.Stats.Sent[c]
			dense[c] += d[c]
		}
	}
	if steps > 0 && deltas == steps {
		out.delta = 1
	}
	out.sent_network = C.int64_t(sent[reshard.LinkNetwork])
	out.sent_local = C.int64_t(sent[reshard.LinkLocal])
	out.copied = C.int64_t(sent[reshard.LinkSelf])
	out.dense_network = C.int64_t(dense[reshard.LinkNetwork])
	out.dense_local = C.int64_t(dense[reshard.LinkLocal])
	out.dense_copied = C.int64_t(dense[reshard.LinkSelf])
}

// deltaOut checks a caller's m2n_delta_report pointer.
func deltaOut(fn string, out *C.m2n_delta_report) error {
	if out == nil {
		return invalidf("%s: out is NULL", fn)
	}
	if out.struct_size != C.uint32_t(C.sizeof_m2n_delta_report) {
		return invalidf("%s: struct_size %d, want %d (this library's m2n_delta_report: set struct_size = sizeof(m2n_delta_report))",
			fn, out.struct_size, C.sizeof_m2n_delta_report)
	}
	return nil
}

//export m2n_call_resync
func m2n_call_resync(h C.m2n_call) (rc C.int) {
	defer recovered(&rc)
	return locked(uint64(h), "call", func(ce *callEntry) error {
		ce.c.Resync()
		return nil
	})
}

//export m2n_call_delta_report
func m2n_call_delta_report(h C.m2n_call, out *C.m2n_delta_report) (rc C.int) {
	defer recovered(&rc)
	ce, err := callOf(h)
	if err != nil {
		return result(err)
	}
	if err := deltaOut("m2n_call_delta_report", out); err != nil {
		return result(err)
	}
	ce.se.mu.Lock()
	defer ce.se.mu.Unlock()
	putDelta(out, []*refit.Report{ce.last})
	return C.M2N_OK
}

//export m2n_model_resync
func m2n_model_resync(h C.m2n_model) (rc C.int) {
	defer recovered(&rc)
	return locked(uint64(h), "model", func(me *modelEntry) error {
		me.m.Resync()
		return nil
	})
}

//export m2n_model_delta_report
func m2n_model_delta_report(h C.m2n_model, out *C.m2n_delta_report) (rc C.int) {
	defer recovered(&rc)
	me, err := modelOf(h)
	if err != nil {
		return result(err)
	}
	if err := deltaOut("m2n_model_delta_report", out); err != nil {
		return result(err)
	}
	me.se.mu.Lock()
	defer me.se.mu.Unlock()
	putDelta(out, me.last)
	return C.M2N_OK
}
