package spmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
)

// What a program says of its own errors, set before its first job.
var (
	// OptionSources names what sets each session option that ranks agree
	// on at Join (a flag, a variable), by the option's name in its
	// *control.AgreementError: "...; --timeout or M2N_TIMEOUT sets it".
	OptionSources map[string]string
	// IsAgreed reports an error of the program's own that every rank of
	// the job returns alike (a failed check the ranks agreed on), which
	// rank 0 alone prints; nil: none beyond refit's and session's.
	IsAgreed func(error) bool
)

// agreed reports whether every rank of the job returns err alike (rank 0
// prints it once): agreement and validation failures, checksum failures,
// memory checks, a rank's bad input spread to all (Refused), and the
// program's own (IsAgreed).
func agreed(err error) bool {
	var ve *control.ValidationError
	var ae *control.AgreementError
	var ce *refit.ChecksumError
	var rf Refused
	var me *session.MemoryError
	return (IsAgreed != nil && IsAgreed(err)) || errors.As(err, &ve) || errors.As(err, &ae) || errors.As(err, &ce) || errors.As(err, &rf) || errors.As(err, &me)
}

// describe renders a job's error for this rank's stderr.
func describe(err error) string {
	var rf Refused
	var ve *control.ValidationError
	var ab *control.AbortError
	var se *session.StageError
	var ae *control.AgreementError
	switch {
	case errors.As(err, &ae) && OptionSources[ae.Field] != "":
		return fmt.Sprintf("%v; %s sets it", err, OptionSources[ae.Field])
	case errors.As(err, &rf) && errors.As(err, &ve) && strings.HasPrefix(ve.Msg, fmt.Sprintf("rank %d: ", ve.Rank)):
		return ve.Msg
	case errors.As(err, &rf) && errors.As(err, &ve):
		return fmt.Sprintf("rank %d: %s", ve.Rank, ve.Msg)
	case errors.As(err, &se) && errors.As(se.Err, &ab) && ab.Rank == se.Rank:
		// this rank ended the stage's session: its cause, in the
		// stage's ranks, with the stage's map to world ranks.
		return fmt.Sprintf("%v; stopping the job", &session.StageError{Stage: se.Stage, Rank: se.Rank, Members: se.Members, Err: ab.Cause})
	case se == nil && errors.As(err, &ab) && ab.Rank == rank:
		return fmt.Sprintf("%v; stopping the job", ab.Cause)
	case errors.As(err, &ab):
		return fmt.Sprintf("rank %d: stopping: %v", rank, err)
	}
	return err.Error()
}
