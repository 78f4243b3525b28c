package spmd

import (
	"errors"
	"fmt"
	"testing"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/session"
)

// TestDescribe: each kind of job error renders as the rank that prints it
// says it: a rank's refused input in its own words (with its rank once),
// this rank's own abort as its cause, another's as a stop, a stage's own
// abort in the stage's ranks, an agreement error with what sets the option.
func TestDescribe(t *testing.T) {
	defer func(r int, src map[string]string) { rank, OptionSources = r, src }(rank, OptionSources)
	rank = 2
	OptionSources = map[string]string{"timeout": "--timeout or M2N_TIMEOUT"}
	cause := errors.New("timed out waiting for rank 3")
	for _, c := range []struct {
		err  error
		want string
	}{
		{Refused{&control.ValidationError{Rank: 1, Msg: "--shape: bad"}}, "rank 1: --shape: bad"},
		{Refused{&control.ValidationError{Rank: 1, Msg: "rank 1: --shape: bad"}}, "rank 1: --shape: bad"},
		{&control.ValidationError{Rank: 1, Msg: "bad"}, "invalid input: bad"},
		{&control.AbortError{Rank: 2, Cause: cause}, "timed out waiting for rank 3; stopping the job"},
		{fmt.Errorf("route flat: %w", &control.AbortError{Rank: 0, Cause: cause}),
			"rank 2: stopping: route flat: rank 0 aborted the call: timed out waiting for rank 3"},
		{&session.StageError{Stage: 1, Rank: 0, Members: []int{4, 5}, Err: &control.AbortError{Rank: 0, Cause: cause}},
			"stage 1 (stage ranks 0-1 are world ranks 4,5): timed out waiting for rank 3; stopping the job"},
		{&session.StageError{Stage: 1, Rank: 1, Members: []int{4, 5}, Err: &control.AbortError{Rank: 0, Cause: cause}},
			"rank 2: stopping: stage 1 (stage ranks 0-1 are world ranks 4,5): rank 0 aborted the call: timed out waiting for rank 3"},
		{&control.AgreementError{Field: "timeout", Rank: 1, Value: "1s", Want: "2s", Differing: []int{1}},
			"ranks disagree: rank 1 has timeout 1s, rank 0 has 2s (ranks differing from rank 0: [1]); --timeout or M2N_TIMEOUT sets it"},
		{&control.AgreementError{Field: "flag --iters", Rank: 1, Value: "1", Want: "2", Differing: []int{1}},
			"ranks disagree: rank 1 has flag --iters 1, rank 0 has 2 (ranks differing from rank 0: [1])"},
		{errors.New("plain"), "plain"},
	} {
		if got := describe(c.err); got != c.want {
			t.Errorf("describe(%#v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// mine is a program's own error that every rank returns alike.
type mine struct{ error }

// TestAgreed: errors every rank returns alike (rank 0 prints them) are
// told from a rank's own, wrapped or not, the program's own kinds
// through IsAgreed.
func TestAgreed(t *testing.T) {
	defer func(f func(error) bool) { IsAgreed = f }(IsAgreed)
	IsAgreed = func(err error) bool { var m mine; return errors.As(err, &m) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&control.ValidationError{}, true},
		{fmt.Errorf("x: %w", &control.AgreementError{}), true},
		{&refit.ChecksumError{}, true},
		{Refused{errors.New("bad")}, true},
		{&session.MemoryError{}, true},
		{fmt.Errorf("x: %w", mine{errors.New("check failed")}), true},
		{&control.AbortError{Cause: errors.New("x")}, false},
		{errors.New("plain"), false},
		{Printed{errors.New("plain")}, false},
	} {
		if got := agreed(c.err); got != c.want {
			t.Errorf("agreed(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	IsAgreed = nil
	if agreed(mine{errors.New("x")}) {
		t.Error("without IsAgreed a program's error is agreed")
	}
}
