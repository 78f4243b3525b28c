package refit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/refit"
)

// TestErrorsCrossRanks: every typed error of the runtime keeps its type,
// fields and text through EncodeError and DecodeError, also inside an
// *AbortError, as a peer's notice carries it.
func TestErrorsCrossRanks(t *testing.T) {
	left := &refit.LeftError{Rank: 2, After: 6, Phase: "buffer check before a step", Cause: errors.New("diverged")}
	mismatch := &refit.CallMismatchError{Rank: 4, Call: `call #2 "b"`, Step: 1, Want: `call #1 "a"`, WantStep: 1, Differing: []int{4, 5}}
	timeout := &refit.TimeoutError{Rank: 1, Phase: "agreement", Peers: []int{3}}
	for _, err := range []error{left, mismatch, timeout} {
		for _, wrapped := range []error{err, &refit.AbortError{Rank: 7, Cause: err}} {
			back := refit.DecodeError(refit.EncodeError(wrapped))
			if back.Error() != wrapped.Error() {
				t.Errorf("text %q came back as %q", wrapped.Error(), back.Error())
			}
			var le *refit.LeftError
			var cm *refit.CallMismatchError
			var te *refit.TimeoutError
			switch err.(type) {
			case *refit.LeftError:
				if !errors.As(back, &le) || le.Rank != 2 || le.After != 6 || le.CauseText != "diverged" {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			case *refit.CallMismatchError:
				if !errors.As(back, &cm) || cm.Rank != 4 || cm.Call != `call #2 "b"` || len(cm.Differing) != 2 || !errors.Is(back, refit.ErrCallMismatch) {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			case *refit.TimeoutError:
				if !errors.As(back, &te) || te.Rank != 1 || !errors.Is(back, refit.ErrTimeout) {
					t.Errorf("%v came back as %#v", wrapped, back)
				}
			}
		}
	}
}

// TestTimeoutWithoutPeers: a collective that every rank reached and that
// still did not complete says so, instead of "waiting for ranks []" (the
// message of issue 23.4's 10,000-layer run, which named no rank).
func TestTimeoutWithoutPeers(t *testing.T) {
	msg := (&refit.TimeoutError{Rank: 2, Phase: "check results gathering", After: time.Minute}).Error()
	if strings.Contains(msg, "[]") || !strings.Contains(msg, "every rank reached it") {
		t.Errorf("got %q", msg)
	}
	msg = (&refit.TimeoutError{Rank: 2, Phase: "agreement", After: time.Minute, Peers: []int{3}}).Error()
	if !strings.Contains(msg, "waiting for ranks [3] in the agreement") {
		t.Errorf("got %q", msg)
	}
}
