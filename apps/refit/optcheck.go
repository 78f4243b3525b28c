package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/envopts"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// checkOptions resolves the session options as Join will (the device's
// defaults filled in) and refuses one that is not valid naming the flag or
// the variable it came from, with its value: M2N_CHUNK_BYTES=1152921504606846976
// (8 x chunk overflows), or a chunk larger than the default staging holds.
func (f *runFlags) checkOptions(o session.Options) error {
	_, err := o.Resolved()
	var fe *reshard.FieldError
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	chunk := f.lookup("chunk-bytes")
	staging := f.lookup("staging-bytes")
	switch {
	case strings.HasPrefix(fe.Field, "M2N_"): // a variable Join reads itself
		why := fe.Why
		if fe.Want != "" {
			why = "want " + fe.Want
		}
		return bad(envopts.Source{Value: fe.Got, Name: fe.Field}, errors.New(why))
	case fe.Field == "chunk bytes" && chunk.Value != "":
		return bad(chunk, fe)
	case fe.Field == "staging bytes" && staging.Value != "":
		return bad(staging, fe)
	case fe.Field == "staging bytes" && chunk.Value != "":
		// the chunk given does not fit the default staging.
		return bad(chunk, fmt.Errorf("%w (the default staging bytes; set --staging-bytes or M2N_STAGING_BYTES to at least 8 x chunk)", fe))
	}
	return usageError{err}
}
