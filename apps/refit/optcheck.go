package main

import (
	"errors"
	"fmt"
	"strings"

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
	chunk := flagOrEnv("chunk-bytes", f.chunk, "M2N_CHUNK_BYTES")
	staging := flagOrEnv("staging-bytes", f.staging, "M2N_STAGING_BYTES")
	switch {
	case strings.HasPrefix(fe.Field, "M2N_"): // a variable Join reads itself
		why := fe.Why
		if fe.Want != "" {
			why = "want " + fe.Want
		}
		return source{fe.Got, fe.Field}.bad(errors.New(why))
	case fe.Field == "chunk bytes" && chunk.value != "":
		return chunk.bad(fe)
	case fe.Field == "staging bytes" && staging.value != "":
		return staging.bad(fe)
	case fe.Field == "staging bytes" && chunk.value != "":
		// the chunk given does not fit the default staging.
		return chunk.bad(fmt.Errorf("%w (the default staging bytes; set --staging-bytes or M2N_STAGING_BYTES to at least 8 x chunk)", fe))
	}
	return usageError{err}
}
