package main

/*
#define M2N_NO_PROTOTYPES
#include "m2n.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"syscall"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
)

// argError is a bad argument found on this rank alone (M2N_ERR_INVALID),
// wrapping the typed cause if there is one.
type argError struct {
	msg string
	err error
}

func (e *argError) Error() string { return e.msg }
func (e *argError) Unwrap() error { return e.err }

func invalidf(format string, args ...any) error {
	return &argError{msg: fmt.Sprintf(format, args...)}
}

// internalError is a panic caught at the boundary (M2N_ERR_INTERNAL).
type internalError struct{ what, stack string }

func (e *internalError) Error() string {
	return "m2n: internal error (please report it): " + e.what + "\n" + e.stack
}

// lastError is what m2n_last_error and its siblings return.
type lastError struct {
	code   int
	msg    string
	detail []byte
}

// lastErrors holds each OS thread's last error, by thread id. An exported
// function runs on the C caller's thread (cgo locks the goroutine to it for
// the call), so the id is the caller's, as errno is.
var lastErrors sync.Map // int -> *lastError

// fail records err as the calling thread's last error and returns its code.
func fail(err error) int {
	code := codeOf(err)
	d := detailOf(code, err)
	js, jerr := json.Marshal(d)
	if jerr != nil {
		js, _ = json.Marshal(map[string]any{"code": code, "kind": d["kind"], "message": err.Error()})
	}
	lastErrors.Store(syscall.Gettid(), &lastError{code: code, msg: err.Error(), detail: js})
	return code
}

func threadError() *lastError {
	if v, ok := lastErrors.Load(syscall.Gettid()); ok {
		return v.(*lastError)
	}
	return nil
}

//export m2n_last_error
func m2n_last_error(buf *C.char, n C.size_t) (l C.size_t) {
	defer func() { _ = recover() }()
	e := threadError()
	if e == nil {
		return copyOut("", buf, n)
	}
	return copyOut(e.msg, buf, n)
}

//export m2n_last_error_detail
func m2n_last_error_detail(buf *C.char, n C.size_t) (l C.size_t) {
	defer func() { _ = recover() }()
	e := threadError()
	if e == nil {
		return copyOut("", buf, n)
	}
	return copyOut(string(e.detail), buf, n)
}

//export m2n_last_error_code
func m2n_last_error_code() (code C.int32_t) {
	defer func() {
		if recover() != nil {
			code = C.M2N_ERR_INTERNAL
		}
	}()
	if e := threadError(); e != nil {
		return C.int32_t(e.code)
	}
	return C.M2N_OK
}

// codeOf classifies err: the agreed kinds first (they may wrap anything),
// then the abort's cause (a timeout), the abort, and the rest.
func codeOf(err error) int {
	var (
		ag *control.AgreementError
		ve *control.ValidationError
		cs *refit.ChecksumError
		to *control.TimeoutError
		ab *control.AbortError
		cm *refit.CallMismatchError
		le *control.LeftError
		ae *argError
		ie *internalError
	)
	switch {
	case errors.As(err, &ie):
		return C.M2N_ERR_INTERNAL
	case errors.As(err, &cm):
		return C.M2N_ERR_CALL_MISMATCH
	case errors.As(err, &ag):
		return C.M2N_ERR_AGREEMENT
	case errors.As(err, &ve):
		return C.M2N_ERR_VALIDATION
	case errors.As(err, &cs):
		return C.M2N_ERR_CHECKSUM
	case errors.As(err, &to):
		return C.M2N_ERR_TIMEOUT
	case errors.As(err, &le):
		return C.M2N_ERR_LEFT
	case errors.As(err, &ab):
		return C.M2N_ERR_ABORT
	case errors.As(err, &ae):
		return C.M2N_ERR_INVALID
	case errors.Is(err, cuda.ErrNotAvailable), errors.Is(err, nccl.ErrNotAvailable):
		return C.M2N_ERR_UNAVAILABLE
	}
	return C.M2N_ERR_OTHER
}

// kindNames are the Go error types the detail's "kind" and "chain" name.
var kindNames = map[int]string{
	C.M2N_ERR_INVALID:       "InvalidArgument",
	C.M2N_ERR_VALIDATION:    "ValidationError",
	C.M2N_ERR_AGREEMENT:     "AgreementError",
	C.M2N_ERR_CHECKSUM:      "ChecksumError",
	C.M2N_ERR_TIMEOUT:       "TimeoutError",
	C.M2N_ERR_ABORT:         "AbortError",
	C.M2N_ERR_UNAVAILABLE:   "Unavailable",
	C.M2N_ERR_OTHER:         "Error",
	C.M2N_ERR_INTERNAL:      "InternalError",
	C.M2N_ERR_CALL_MISMATCH: "CallMismatchError",
	C.M2N_ERR_LEFT:          "LeftError",
}

// detailOf describes err for m2n_last_error_detail: its kind, the m2n
// error types it wraps, and the fields of those that say where it is: the
// outermost error's, except for the rank, which the innermost error that
// names one gives (a pipeline stage's ValidationError counts ranks of the
// stage's communicator; the BufferError it carries, the session's).
func detailOf(code int, err error) map[string]any {
	d := map[string]any{"code": code, "kind": kindNames[code], "message": err.Error()}
	var chain []string
	walk(err, func(e error) {
		switch e := e.(type) {
		case *control.ValidationError:
			setOnce(d, "rank", e.Rank)
		case *control.AgreementError:
			setOnce(d, "rank", e.Rank)
			setOnce(d, "field", e.Field)
			if e.Tensor != "" {
				setOnce(d, "tensor", e.Tensor)
			}
			setOnce(d, "value", e.Value)
			setOnce(d, "want", e.Want)
			setOnce(d, "differing", e.Differing)
		case *refit.ChecksumError:
			setOnce(d, "tensor", e.Tensor)
			setOnce(d, "rank", e.Dst)
			setOnce(d, "src", e.Src)
		case *control.TimeoutError:
			setOnce(d, "rank", e.Rank)
			setOnce(d, "peers", e.Peers)
			setOnce(d, "phase", e.Phase)
		case *control.AbortError:
			setOnce(d, "rank", e.Rank)
		case *refit.CallMismatchError:
			setOnce(d, "rank", e.Rank)
			setOnce(d, "call", e.Call)
			setOnce(d, "step", e.Step)
			setOnce(d, "want", e.Want)
			setOnce(d, "want_step", e.WantStep)
			setOnce(d, "differing", e.Differing)
		case *control.LeftError:
			// the rank that left, not the one that aborted on hearing it
			d["rank"] = e.Rank
			setOnce(d, "phase", e.Phase)
			cause := e.CauseText
			if e.Cause != nil {
				cause = e.Cause.Error()
			}
			setOnce(d, "cause", cause)
		case *refit.BufferError:
			d["rank"] = e.Rank
			setOnce(d, "tensor", e.Tensor)
			setOnce(d, "side", e.Side)
			setOnce(d, "field", e.Side+" buffer")
		case *program.ViewError:
			d["rank"] = e.Rank
			setOnce(d, "tensor", e.Tensor)
			setOnce(d, "side", e.Side)
			setOnce(d, "field", e.Side+" view")
		case *refit.NonFiniteError:
			d["rank"] = e.Rank
			setOnce(d, "tensor", e.Tensor)
			setOnce(d, "side", "source")
			setOnce(d, "index", e.Index)
			setOnce(d, "value", e.ValueText)
		case *reshard.FieldError:
			setOnce(d, "field", e.Field)
			setOnce(d, "value", e.Got)
			if e.Want != "" {
				setOnce(d, "want", e.Want)
			}
		default:
			return
		}
		chain = append(chain, reflect.TypeOf(e).Elem().Name())
	})
	if chain == nil {
		chain = []string{}
	}
	d["chain"] = chain
	return d
}

func setOnce(d map[string]any, k string, v any) {
	if _, ok := d[k]; !ok {
		d[k] = v
	}
}

// walk calls fn on err and everything it wraps, depth first, outermost
// first.
func walk(err error, fn func(error)) {
	if err == nil {
		return
	}
	fn(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walk(u.Unwrap(), fn)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walk(e, fn)
		}
	}
}
