package main

import (
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/units"
)

// inSteps runs this rank's local work (filling, poisoning or checking its
// buffers: work that takes as long as its bytes, which no wait's bound
// covers) while every rank of s takes part in a small progress
// collective every slice of the timeout, until every rank's work is done:
// no rank waits on another's work longer than a slice, so a rank whose
// check outlasts the timeout is not taken for a stopped one, while a rank
// that stops is still named by the others' timeouts. Every rank of s must
// call it (work may be nil). It returns this rank's work's error once
// every rank is done, or the collective's error once this rank's work is
// done (the work may touch buffers the caller frees after).
func inSteps(s *session.Session, phase string, work func() error) error {
	slice := min(max(s.Options().Timeout/4, 10*time.Millisecond), 10*time.Second)
	done := make(chan error, 1)
	go func() {
		defer endOnPanic()
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
		all, err := gatherIn(s, phase, []int64{flag})
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

// emulatedRound returns the longest time one rank's network bytes of one
// round of s take at rate bytes/s (the emulation caps each rank's sends
// between domains, and separately its receives, at the rate), with that
// rank and round.
func emulatedRound(s *reshard.Schedule, rate float64) (sec float64, bytes int64, rank, round int) {
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

// checkEmulation refuses a call whose rounds the emulated network cannot
// carry within the timeout, which bounds every round: the busiest rank's
// network bytes of one round at the emulated rate (every rank computes
// the same, from the same schedule). A refusal names the rate, the
// timeout and the numbers, where the others' waits would have blamed
// healthy ranks.
// members maps s's ranks to world ranks (nil: they are the world's).
func (j *job) checkEmulation(s *session.Session, sched *reshard.Schedule, members []int) error {
	o := s.Options()
	if o.EmulateNetBW <= 0 {
		return nil
	}
	sec, bytes, rank, round := emulatedRound(sched, o.EmulateNetBW)
	if sec < o.Timeout.Seconds() {
		return nil
	}
	if rank < len(members) {
		rank = members[rank]
	}
	return jobError{usageError{fmt.Errorf("%s %q: rank %d moves %s over the network in round %d of the %s schedule, %v at that rate, "+
		"and %s %q bounds every round: raise the timeout or the rate, or lower --chunk-bytes", j.set.emulateFrom.name, j.set.emulateFrom.value,
		rank, units.FormatBytes(bytes), round, sched.Route, time.Duration(sec*float64(time.Second)).Round(time.Millisecond),
		j.set.timeoutFrom.name, j.set.timeoutFrom.value)}}
}
