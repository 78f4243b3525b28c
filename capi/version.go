package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import "github.com/m2n-dev/m2n/refit"

// Versions of a call's or a model's steps (refit.Call.SetVersion and
// Held): m2n_call_set_version, m2n_call_held, m2n_model_set_version,
// m2n_model_held.

func putHeld(h refit.Held, version *C.uint64_t, verified, intact *C.int32_t) {
	*version = C.uint64_t(h.Version)
	*verified, *intact = 0, 0
	if h.Verified {
		*verified = 1
	}
	if h.Intact {
		*intact = 1
	}
}

//export m2n_call_set_version
func m2n_call_set_version(h C.m2n_call, v C.uint64_t) (rc C.int) {
	defer recovered(&rc)
	ce, err := callOf(h)
	if err != nil {
		return result(err)
	}
	return result(ce.c.SetVersion(uint64(v)))
}

//export m2n_call_held
func m2n_call_held(h C.m2n_call, version *C.uint64_t, verified, intact *C.int32_t) (rc C.int) {
	defer recovered(&rc)
	ce, err := callOf(h)
	if err != nil {
		return result(err)
	}
	if version == nil || verified == nil || intact == nil {
		return result(invalidf("m2n_call_held: version, verified and intact must not be NULL"))
	}
	putHeld(ce.c.Held(), version, verified, intact)
	return C.M2N_OK
}

//export m2n_model_set_version
func m2n_model_set_version(h C.m2n_model, v C.uint64_t) (rc C.int) {
	defer recovered(&rc)
	me, err := modelOf(h)
	if err != nil {
		return result(err)
	}
	return result(me.m.SetVersion(uint64(v)))
}

//export m2n_model_held
func m2n_model_held(h C.m2n_model, version *C.uint64_t, verified, intact *C.int32_t) (rc C.int) {
	defer recovered(&rc)
	me, err := modelOf(h)
	if err != nil {
		return result(err)
	}
	if version == nil || verified == nil || intact == nil {
		return result(invalidf("m2n_model_held: version, verified and intact must not be NULL"))
	}
	putHeld(me.m.Held(), version, verified, intact)
	return C.M2N_OK
}
