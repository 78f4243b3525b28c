package refit_test

import (
	"errors"
	"testing"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/refit"
)

// TestErrorsCrossRanks: the runtime's own typed errors, which it
// registers with package control, keep their type, fields and text
// through control.EncodeError and DecodeError, also inside an
// *control.AbortError, as a peer's notice carries it.
func TestErrorsCrossRanks(t *testing.T) {
	mismatch := &refit.CallMismatchError{Rank: 4, Call: `call #2 "b"`, Step: 1, Want: `call #1 "a"`, WantStep: 1, Differing: []int{4, 5}}
	sum := &refit.ChecksumError{Tensor: "w", Src: 1, Dst: 2, Sent: 7, Arrived: 8}
	for _, err := range []error{mismatch, sum} {
		for _, wrapped := range []error{err, &control.AbortError{Rank: 7, Cause: err}} {
			back := control.DecodeError(control.EncodeError(wrapped))
			if back.Error() != wrapped.Error() {
				t.Errorf("text %q came back as %q", wrapped.Error(), back.Error())
			}
			var cm *refit.CallMismatchError
			var cs *refit.ChecksumError
			switch err.(type) {
			case *refit.CallMismatchError:
				if !errors.As(back, &cm) || cm.Rank != 4 || cm.Call != `call #2 "b"` || len(cm.Differing) != 2 {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			case *refit.ChecksumError:
				if !errors.As(back, &cs) || cs.Tensor != "w" || cs.Arrived != 8 {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			}
		}
	}
}
