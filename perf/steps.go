package perf

import (
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// onPanic, when set, handles a panic in a goroutine this package starts
// (refit ends the job with it, so that no rank waits for one whose
// goroutine died); unset, the panic is left to crash the process.
var onPanic func(p any)

// recovered hands a panic of the calling goroutine to onPanic; deferred
// first in every goroutine of the package.
func recovered() {
	if onPanic == nil {
		return
	}
	if p := recover(); p != nil {
		onPanic(p)
	}
}

// inSteps runs this rank's local work (filling, poisoning or checking its
// buffers: work that takes as long as its bytes, which no wait's bound
// covers) while every rank of s takes part in a small progress
// collective every slice of the timeout (a quarter of it, 10 ms to
// 10 s), until every rank's work is done: no rank waits on another's work
// longer than a slice, so a rank whose check outlasts the timeout is not
// taken for a stopped one, while a rank that stops is still named by the
// others' timeouts. Every rank of s must call it (work may be nil). It
// returns this rank's work's error once every rank is done, or the
// collective's error once this rank's work is done (the work may touch
// buffers the caller frees after). phase names the collective in
// timeouts.
func inSteps(s *session.Session, phase string, work func() error) error {
	slice := min(max(s.Options().Timeout/4, 10*time.Millisecond), 10*time.Second)
	done := make(chan error, 1)
	go func() {
		defer recovered()
		var err error
		if work != nil {
			err = work()
		}
		done <- err
	}()
	var workErr error
	finished := false
	timer := time.NewTimer(slice)
	defer timer.Stop()
	for {
		if !finished {
			timer.Reset(slice)
			select {
			case workErr = <-done:
				finished = true
			case <-timer.C:
			}
		}
		flag := int64(0)
		if finished {
			flag = 1
		}
		all, err := gather(s, phase, []int64{flag})
		if err != nil {
			if !finished {
				<-done
			}
			return err
		}
		if finished && allOnes(all) {
			return workErr
		}
	}
}

func allOnes(v []int64) bool {
	for _, x := range v {
		if x != 1 {
			return false
		}
	}
	return true
}

// EmulatedRound returns the longest time one rank's network bytes of one
// round of s take at rate bytes/s (the network emulation caps each rank's
// sends between domains, and separately its receives, at the rate), with
// the bytes, the rank and the round (the lowest of equals). A round that
// takes longer than the timeout bounds every round times out, whatever
// the ranks do.
func EmulatedRound(s *reshard.Schedule, rate float64) (sec float64, bytes int64, rank, round int) {
	type key struct{ round, rank int }
	sent, recv := map[key]int64{}, map[key]int64{}
	for i := range s.Messages {
		m := &s.Messages[i]
		if m.Class != reshard.LinkNetwork {
			continue
		}
		sent[key{m.Round, m.Src}] += m.Bytes
		recv[key{m.Round, m.Dst}] += m.Bytes
	}
	for _, side := range []map[key]int64{sent, recv} {
		for k, n := range side {
			if n > bytes || (n == bytes && (k.round < round || k.round == round && k.rank < rank)) {
				bytes, rank, round = n, k.rank, k.round
			}
		}
	}
	return float64(bytes) / rate, bytes, rank, round
}
