package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
)

// StageError is an error of one pipeline stage's session. The ranks inside
// Err are the stage communicator's; Members maps them to this session's
// (stage rank r is world rank Members[r]), and the message says so.
type StageError struct {
	Stage   int
	Rank    int   // this rank, in the stage's communicator
	Members []int // the stage's ranks in the parent session, by stage rank
	Err     error
}

func (e *StageError) Error() string {
	return fmt.Sprintf("stage %d (stage ranks 0-%d are world ranks %s): %v", e.Stage, len(e.Members)-1, mesh.FormatRanks(e.Members), e.Err)
}

func (e *StageError) Unwrap() error { return e.Err }

// Wrap returns err, of stage i's session, as a *StageError (nil for nil).
func (st *Pipeline) Wrap(i int, err error) error {
	if err == nil {
		return nil
	}
	if s := st.Sessions[i]; s != nil {
		return s.stageError(err)
	}
	return &StageError{Stage: i, Rank: -1, Members: st.Layout.Members(i), Err: err}
}

// stageError is err of this stage session as a *StageError.
func (s *Session) stageError(err error) error {
	return &StageError{Stage: s.stage, Rank: s.rank, Members: s.members, Err: err}
}

// A Pipeline is the sessions of a pipeline-parallel refit (the paper's
// Example B): stage s has a communicator of its own, made of stage s's
// trainer ranks and every generator rank, with meshes local to it. A
// generator rank is in every stage; a trainer rank in its own. The stages'
// calls run concurrently, each on its own communicator.
type Pipeline struct {
	Layout pipeline.Layout
	// Sessions[s] is this rank's session of stage s, nil where the rank
	// is not in stage s.
	Sessions []*Session
}

// Pipeline splits the session into the stages of l (world ranks of l are
// this session's ranks), each a session with this session's options and
// device (on GPUs one NCCL communicator per stage, bootstrapped stage after
// stage). Every rank of the session must call it with the same layout.
func (s *Session) Pipeline(l pipeline.Layout) (*Pipeline, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	// agree before splitting: a split is a blocking collective.
	if err := s.agreeLayout(l, s.checkLayout(l)); err != nil {
		return nil, err
	}
	s.phasesOf().mark("stage layout agreed")
	return s.pipeline(l)
}

// checkLayout is this rank's verdict on a stage layout.
func (s *Session) checkLayout(l pipeline.Layout) error {
	if err := l.Validate(s.size); err != nil {
		return fmt.Errorf("rank %d: stage layout: %w", s.rank, err)
	}
	return nil
}

// pipeline is Pipeline once every rank agreed on l (layoutField).
func (s *Session) pipeline(l pipeline.Layout) (*Pipeline, error) {
	ph := s.phasesOf()
	st := &Pipeline{Layout: l, Sessions: make([]*Session, l.Stages())}
	if l.Stages() == 1 && slices.Equal(l.Members(0), identity(s.size)) {
		st.Sessions[0] = s.sharedStage(l.Members(0))
		ph.mark("stage communicators (none: the session's)")
		return st, nil
	}
	s.pipelines++ // every rank makes its pipelines in one order: stageID
	err := s.guard("pipeline stage set-up", func() error {
		comms, err := s.comm.SplitStages(l)
		if err != nil {
			return err
		}
		for i, comm := range comms {
			if comm == nil {
				continue
			}
			child := &Session{opts: s.opts, rank: comm.Rank(), size: comm.Size(), comm: comm, owns: []*mpi.Comm{comm}, nic: s.nic,
				parent: s, stage: i, members: l.Members(i), replayEnv: s.replayEnv, derived: s.derived}
			st.Sessions[i] = child
			// the stage's control plane shares the stage's communicator
			// with the data, as a two-job session's does (control tags
			// lie above the data's, see tagAbort). A Dup of its own once
			// hid a stale leave notice of an earlier model's stage
			// (MPI_ERR_TRUNCATE in the Python model test's third model),
			// which Leave's drain now prevents.
			if child.ctl, err = newControl(comm, s.opts.Timeout); err != nil {
				return err
			}
			child.ctl.setID(stageID(s.ctl.id, s.pipelines, i))
			child.rt = refit.New(group{child.ctl, child})
			members := l.Members(i)
			child.hosts = make([]int, len(members))
			child.machines = make([]int, len(members))
			for k, w := range members {
				child.hosts[k] = s.hosts[w]
				if w < len(s.machines) {
					child.machines[k] = s.machines[w]
				}
			}
			if child.dev, err = s.dev.stage(comm, s.guard); err != nil {
				return err
			}
			child.owned = true
			if child.base, err = child.dev.transport(comm); err != nil {
				return fmt.Errorf("stage %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	ph.mark(fmt.Sprintf("stage communicators (%d splits)", l.Stages()))
	return st, nil
}

// sharedStage is the session of a stage that holds every rank of s in
// s's order (one stage): it is s under another name, sharing its
// communicator, control plane and runtime (so its calls are numbered
// with s's, their tags distinct), its device and its transport, all of
// which stay s's to close. Making it creates no communicator.
func (s *Session) sharedStage(members []int) *Session {
	return &Session{opts: s.opts, rank: s.rank, size: s.size, comm: s.comm, ctl: s.ctl, rt: s.rt, nic: s.nic,
		hosts: s.hosts, machines: s.machines, dev: s.dev, base: s.base,
		parent: s, stage: 0, members: members, replayEnv: s.replayEnv, shares: true, derived: s.derived}
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// agreeLayout makes every rank check that all were given the same stage
// layout (and none failed to validate it) before the blocking split.
func (s *Session) agreeLayout(l pipeline.Layout, localErr error) error {
	err := control.Agree(control.WithPhase(context.Background(), "agreement on the stage layout"), s.ctl,
		[]control.Field{layoutField(l)}, localErr)
	return s.fail(err)
}

// layoutField is a stage layout as an agreed field.
func layoutField(l pipeline.Layout) control.Field {
	return control.Field{Name: "stage layout", Value: fmt.Sprint(l.Trainers, l.Generators)}
}

// Prepare prepares every stage this rank is in: specs(s) returns stage
// s's specs, with meshes local to stage s's communicator. Stages are
// prepared one after another in stage order; a reshard.StageRoute
// prepares stage s with route.ForStage(s).
func (st *Pipeline) Prepare(ctx context.Context, specs func(stage int) []refit.Spec, route reshard.Route) (*PipelineCall, error) {
	sc := &PipelineCall{Calls: make([]*refit.Call, len(st.Sessions)), st: st}
	for i, s := range st.Sessions {
		if s == nil {
			continue
		}
		r := route
		if sr, ok := route.(reshard.StageRoute); ok {
			r = sr.ForStage(i)
		}
		c, err := s.Prepare(ctx, specs(i), r)
		if err != nil {
			sc.Close()
			return nil, st.Wrap(i, err)
		}
		sc.Calls[i] = c
	}
	return sc, nil
}

// markPrepared ends the phase of a call's preparation, of a session over
// a link.
func (s *Session) markPrepared(reused bool) {
	what := "call prepared"
	if s.parent != nil {
		what = fmt.Sprintf("stage %d prepared", s.stage)
	}
	if reused {
		what += " (plans, schedule and program re-used)"
	}
	s.phasesOf().mark(what)
}

// derivedReused counts the calls that re-used what an earlier one derived.
func (s *Session) derivedReused() int {
	if s.derived == nil {
		return 0
	}
	return s.derived.Reused()
}

// Close closes every stage's session.
func (st *Pipeline) Close() error {
	var errs []error
	for _, s := range st.Sessions {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// PipelineCall is a call prepared on every stage this rank is in.
type PipelineCall struct {
	// Calls[s] is stage s's call, nil where the rank is not in stage s.
	Calls []*refit.Call
	st    *Pipeline // what Prepare made it from, for StageError
}

// stageError wraps err of stage i as a *StageError where the call knows
// its stages.
func (sc *PipelineCall) stageError(i int, err error) error {
	if sc.st == nil {
		if err == nil {
			return nil
		}
		return fmt.Errorf("stage %d: %w", i, err)
	}
	return sc.st.Wrap(i, err)
}

// Run runs every stage's call concurrently, each in a goroutine of its
// own: bufs(s) returns this rank's buffers of stage s. It returns the
// reports by stage and the first stage's error (every error, joined).
func (sc *PipelineCall) Run(ctx context.Context, bufs func(stage int) []refit.TensorBuffers) ([]*refit.Report, error) {
	reps := make([]*refit.Report, len(sc.Calls))
	errs := make([]error, len(sc.Calls))
	var wg sync.WaitGroup
	for i, c := range sc.Calls {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { // a panic in one stage ends that stage's session with an error, not the program
				if p := recover(); p != nil {
					errs[i] = sc.stageError(i, sc.st.Sessions[i].fail(fmt.Errorf("internal error: %v", p)))
				}
			}()
			rep, err := c.Run(ctx, bufs(i))
			reps[i] = rep
			errs[i] = sc.stageError(i, err)
		}()
	}
	wg.Wait()
	return reps, errors.Join(errs...)
}

// Close frees every stage's call.
func (sc *PipelineCall) Close() {
	for _, c := range sc.Calls {
		if c != nil {
			c.Close()
		}
	}
}
