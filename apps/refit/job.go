package main

import (
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/faults"
	"github.com/m2n-dev/m2n/spmd"
)

// job is one rank's part of an SPMD command (spmd.Job: MPI, the session
// over the world, the logger) with its flags and the settings every rank
// agreed on.
type job struct {
	*spmd.Job
	flags *runFlags
	set   settings
}

// startJob starts MPI (spmd.Init, bounded by the timeout) and joins the
// world session with the settings of the flags. A rank whose flags do not
// parse still takes part, so that every rank fails at once with its
// message instead of waiting for it (spmd.Job.Join). It returns a job even
// with an error: defer its End right away.
func startJob(f *runFlags) (*job, error) {
	set, flagErr := f.settings()
	j := &job{flags: f, set: set}
	var err error
	if j.Job, err = spmd.Init(set.opts.Timeout); err != nil {
		return j, err // j.End ends nothing
	}
	if j.StartUp > j.Timeout && flagErr == nil {
		// every wait of the job is bounded by the timeout: a job whose
		// start-up alone outlasts it cannot run.
		flagErr = bad(set.Timeout, fmt.Errorf("MPI start-up alone took %v here, longer than the timeout, which bounds every wait of the job: give a longer one", j.StartUp.Round(time.Millisecond)))
	}
	log, err := newLogger(f.logLevel, j.Rank)
	if err != nil && flagErr == nil {
		flagErr = err
	}
	j.Log = log
	set.opts.Agree = agreedFields(f.cmd)
	if flagErr == nil {
		if at, ok, ferr := faults.Transport(j.Rank); ferr != nil {
			flagErr = usageError{ferr}
		} else if ok {
			set.opts.WrapTransport = at
		}
	}
	j.set = set
	if f.listen != "" || f.connect != "" {
		return j, j.JoinLink(set.opts, flagErr, f.listen, f.connect)
	}
	return j, j.Join(set.opts, flagErr)
}
