package control_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
)

// stepError stands for a typed error of a package above control, which
// registers it.
type stepError struct {
	Step  uint64 `json:"step"`
	Where string `json:"where"`
}

func (e *stepError) Error() string { return fmt.Sprintf("step %d failed in %s", e.Step, e.Where) }

func init() { control.RegisterError[stepError]("test step") }

// TestErrorsCrossRanks: every typed error of the control plane, and one
// registered from above, keeps its type, fields and text through
// EncodeError and DecodeError, also inside an *AbortError, as a peer's
// notice carries it.
func TestErrorsCrossRanks(t *testing.T) {
	left := &control.LeftError{Rank: 2, After: 6, Phase: "buffer check before a step", Cause: errors.New("diverged")}
	timeout := &control.TimeoutError{Rank: 1, Phase: "agreement", Peers: []int{3}}
	agreement := &control.AgreementError{Field: "route", Rank: 3, Value: "a", Want: "b", Differing: []int{3}}
	step := &stepError{Step: 4, Where: "the end"}
	for _, err := range []error{left, timeout, agreement, step} {
		for _, wrapped := range []error{err, fmt.Errorf("rank 5: %w", err), &control.AbortError{Rank: 7, Cause: err}} {
			back := control.DecodeError(control.EncodeError(wrapped))
			if back.Error() != wrapped.Error() {
				t.Errorf("text %q came back as %q", wrapped.Error(), back.Error())
			}
			if _, ok := wrapped.(*control.AbortError); ok && (!errors.Is(back, control.ErrAborted) || errors.Is(back, control.ErrTimeout) != (err == timeout)) {
				t.Errorf("%v came back as %#v", wrapped, back)
			}
			var le *control.LeftError
			var te *control.TimeoutError
			var ae *control.AgreementError
			var se *stepError
			switch err.(type) {
			case *control.LeftError:
				if !errors.As(back, &le) || le.Rank != 2 || le.After != 6 || le.CauseText != "diverged" {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			case *control.TimeoutError:
				if !errors.As(back, &te) || te.Rank != 1 || !errors.Is(back, control.ErrTimeout) {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			case *control.AgreementError:
				if !errors.As(back, &ae) || ae.Field != "route" || len(ae.Differing) != 1 {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			case *stepError:
				if !errors.As(back, &se) || se.Step != 4 || se.Where != "the end" {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			}
		}
	}
	if back := control.DecodeError(control.EncodeError(&control.ValidationError{Rank: 1, Msg: step.Error(), Err: step})); !errors.As(back, new(*stepError)) || !errors.As(back, new(*control.ValidationError)) {
		t.Errorf("a validation error came back as %#v", back)
	}
	if control.EncodeError(nil) != nil || control.DecodeError(nil) != nil {
		t.Error("nil does not round-trip as nil")
	}
}

// TestTimeoutWithoutPeers: a collective that every rank reached and that
// still did not complete says so, instead of "waiting for ranks []" (the
// message of issue 23.4's 10,000-layer run, which named no rank).
func TestTimeoutWithoutPeers(t *testing.T) {
	msg := (&control.TimeoutError{Rank: 2, Phase: "check results gathering", After: time.Minute}).Error()
	if strings.Contains(msg, "[]") || !strings.Contains(msg, "every rank reached it") {
		t.Errorf("got %q", msg)
	}
	msg = (&control.TimeoutError{Rank: 2, Phase: "agreement", After: time.Minute, Peers: []int{3}}).Error()
	if !strings.Contains(msg, "waiting for ranks [3] in the agreement") {
		t.Errorf("got %q", msg)
	}
}
