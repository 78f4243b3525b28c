package spmd

import (
	"errors"
	"fmt"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/session"
)

// JoinLink joins a session of two separately launched jobs instead of
// the world's: with listen set, this job is the trainer and waits
// (bounded) for one generator job to connect through the port file at
// listen (session.Listen; the file is removed once the generator has
// joined: one generator per run); with connect set, this job is the
// generator and joins the trainer that listens on the port file at
// connect (session.Connect). Afterwards Rank and World are the joined
// session's (the trainer's ranks first), so that the meshes of the
// program's calls are given in those ranks; failures are still printed
// once per job, by the job's own rank 0. A rank whose input is bad
// (refuse) fails its own job as Join does, without connecting.
func (j *Job) JoinLink(opts session.Options, refuse error, listen, connect string) error {
	if listen != "" && connect != "" {
		refuse = errors.Join(refuse, fmt.Errorf("--listen and --connect: a job either listens (the trainer) or connects (the generator)"))
	}
	if refuse != nil {
		return j.Join(opts, refuse)
	}
	stopAt("join")
	var err error
	if listen != "" {
		var l *session.Listener
		if l, err = session.Listen(j.comm, listen, opts); err == nil {
			j.Session, err = l.Accept()
			err = errors.Join(err, l.Close())
		}
	} else {
		j.Session, err = session.Connect(j.comm, connect, opts)
	}
	if err != nil {
		if j.Session != nil {
			j.Session.Close()
			j.Session = nil
		}
		var ve *control.ValidationError
		if errors.As(err, &ve) {
			return Refused{err}
		}
		return err
	}
	j.Rank, j.World = j.Session.Rank(), j.Session.Size()
	return nil
}
