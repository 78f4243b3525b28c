package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"math"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/session"
)

// gather gathers v from every rank of s in the named phase (timeouts name
// it), rank r's at r*len(v), over the session's bounded collective.
func gather(s *session.Session, phase string, v []int64) ([]int64, error) {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	all := make([]byte, len(b)*s.Size())
	if err := s.Collective().Allgather(control.WithPhase(context.Background(), phase), b, all); err != nil {
		return nil, err
	}
	out := make([]int64, len(all)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(all[8*i:]))
	}
	return out, nil
}

// maxOver returns the largest x of every rank of s, and the lowest rank
// that has it.
func maxOver(s *session.Session, x float64) (float64, int, error) {
	all, err := gather(s, "iteration timing", []int64{int64(math.Float64bits(x))})
	if err != nil {
		return 0, 0, err
	}
	m, at := math.Inf(-1), 0
	for r, v := range all {
		if f := math.Float64frombits(uint64(v)); f > m {
			m, at = f, r
		}
	}
	return m, at, nil
}

// maxOverEach returns, element by element, the largest of every rank's v
// (every rank passes as many).
func maxOverEach(s *session.Session, v []float64) ([]float64, error) {
	bits := make([]int64, len(v))
	for i, x := range v {
		bits[i] = int64(math.Float64bits(x))
	}
	all, err := gather(s, "iteration timing", bits)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(v))
	for i := range out {
		out[i] = math.Inf(-1)
		for r := 0; r < s.Size(); r++ {
			out[i] = max(out[i], math.Float64frombits(uint64(all[r*len(v)+i])))
		}
	}
	return out, nil
}

// firstMessage gathers every rank's message and returns the lowest
// rank's that is not empty ("" when all are).
func firstMessage(s *session.Session, msg string) (string, error) {
	blobs, err := control.Exchange(control.WithPhase(context.Background(), "check results gathering"), s.Collective(), []byte(msg))
	if err != nil {
		return "", err
	}
	for _, b := range blobs {
		if len(b) > 0 {
			return string(b), nil
		}
	}
	return "", nil
}

// stepOver is maxOver of a model step's time (sec) that also agrees, over
// the world session s, whether the step failed anywhere: a pipeline
// stage's failure (a checksum that did not match, say) is known only to
// the stage's ranks, and the ranks of the other stages, whose own stages
// succeeded, would otherwise go on to the next collective and fail there
// with a second message ("rank 0 closed the session"). With a failure on
// any rank every rank returns the lowest failed rank's error as Agreed
// (printed once); a rank whose own stage aborted (a rank lost: nothing
// more can be agreed) returns its error at once, as does every rank
// after a failed exchange of the messages. The success path is one
// allgather, as maxOver's.
func stepOver(s *session.Session, m *session.Model, sec float64, stepErr error) (float64, int, error) {
	if stepErr != nil {
		for si := range m.StageCount() {
			if ss := m.Session(si); ss != nil {
				if aborted, _ := ss.Aborted(); aborted {
					return 0, 0, stepErr
				}
			}
		}
	}
	failed := int64(0)
	if stepErr != nil {
		failed = 1
	}
	all, err := gather(s, "iteration timing", []int64{int64(math.Float64bits(sec)), failed})
	if err != nil {
		if stepErr != nil {
			return 0, 0, stepErr
		}
		return 0, 0, err
	}
	mx, at, anyFailed := math.Inf(-1), 0, false
	for r := 0; r < len(all)/2; r++ {
		if f := math.Float64frombits(uint64(all[2*r])); f > mx {
			mx, at = f, r
		}
		anyFailed = anyFailed || all[2*r+1] != 0
	}
	if !anyFailed {
		return mx, at, nil
	}
	msg := ""
	if stepErr != nil {
		msg = stepErr.Error()
	}
	first, err := firstMessage(s, msg)
	switch {
	case err != nil && stepErr != nil:
		return 0, 0, stepErr
	case err != nil:
		return 0, 0, err
	case stepErr != nil:
		return 0, 0, Agreed{agreedAs{first, stepErr}}
	}
	return 0, 0, Agreed{errors.New(first)}
}

// agreedAs is a rank's own error under the message every rank returns.
type agreedAs struct {
	msg string
	err error
}

func (e agreedAs) Error() string { return e.msg }
func (e agreedAs) Unwrap() error { return e.err }
