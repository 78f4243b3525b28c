package refit

import (
	"fmt"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
)

// The runtime's typed errors cross ranks with their fields (see
// control.EncodeError): a rank's bad buffers, a planner's or a view's
// refusal, a checksum or a non-finite source element, a crossed step.
func init() {
	control.RegisterError[ChecksumError]("checksum")
	control.RegisterError[BufferError]("buffer")
	control.RegisterError[program.ViewError]("view")
	control.RegisterError[reshard.FieldError]("field")
	control.RegisterError[NonFiniteError]("nonfinite")
	control.RegisterError[CallMismatchError]("mismatch")
}

// CallMismatchError reports ranks that began different steps at once: a
// rank that runs one call while another runs a second call of the same
// group, or another step of the same call (a rank that skipped a step).
// Every rank of the group returns it, before a byte moves, and the group
// stays usable. Calls are numbered as the group prepared them (every rank
// prepares the same calls in the same order); Call and Want name them as
// "call #N" with the name Options.Name gave (if any). Callers match it
// with errors.As (it crosses ranks with its fields).
type CallMismatchError struct {
	Rank      int    `json:"rank"`      // the first rank that differs from rank 0
	Call      string `json:"call"`      // the call it began
	Step      uint64 `json:"step"`      // and its step of that call
	Want      string `json:"want"`      // the call rank 0 began
	WantStep  uint64 `json:"want_step"` // and its step
	Differing []int  `json:"differing"` // every rank that differs from rank 0
}

func (e *CallMismatchError) Error() string {
	return fmt.Sprintf("ranks run different steps: rank %d began %s, step %d, where rank 0 began %s, step %d (ranks differing from rank 0: %v); every rank must run the calls of a session in the same order, one step each",
		e.Rank, e.Call, e.Step, e.Want, e.WantStep, e.Differing)
}
