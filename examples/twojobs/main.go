// Command twojobs is a trainer and its generators launched as separate
// MPI jobs (README: Two jobs, one session). The trainer job listens on a
// port file and serves generators one after another; each generator job
// joins, takes the whole model (DeepSeek-V3 scaled down) every step,
// checks every element, and leaves; one killed in a step leaves the
// trainer's job usable, and the next generator joins as if it were the
// first (its own size, its calls prepared afresh: a full sync). Both
// mpiruns need an ompi-server (OpenMPI 4.1):
//
//	ompi-server --no-daemonize --report-uri /tmp/uri &
//	F="--ompi-server file:/tmp/uri --mca btl self,vader,tcp"
//	mpirun $F -np 2 twojobs trainer /tmp/trainer.port 2 &   # serves 2 generators
//	mpirun $F -np 1 twojobs generator /tmp/trainer.port 3 kill   # killed in its 4th step
//	mpirun $F -np 2 twojobs generator /tmp/trainer.port 3        # 3 steps, leaves
//
// The trainer's ranks form tp=N, a generator's tp=M (its job's size).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/session"
)

var opts = session.Options{Timeout: 5 * time.Second}

func main() {
	if len(os.Args) < 4 || (os.Args[1] != "trainer" && os.Args[1] != "generator") {
		fmt.Fprintln(os.Stderr, "usage: twojobs trainer PORTFILE GENERATORS | twojobs generator PORTFILE STEPS [kill]")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[3])
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "twojobs: %q: want a whole number of at least 1\n", os.Args[3])
		os.Exit(2)
	}
	if _, err = mpi.Init(mpi.ThreadMultiple); err == nil {
		if os.Args[1] == "trainer" {
			err = trainer(os.Args[2], n)
		} else {
			err = generator(os.Args[2], n, len(os.Args) > 4 && os.Args[4] == "kill")
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "twojobs %s: rank %d: %v\n", os.Args[1], mpi.World().Rank(), err)
	}
	mpi.Finalize()
	if err != nil {
		os.Exit(1)
	}
}

// trainer serves generators one after another.
func trainer(path string, generators int) error {
	l, err := session.Listen(mpi.World(), path, opts)
	if err != nil {
		return err
	}
	defer l.Close()
	for g := 1; g <= generators; g++ {
		s, err := l.AcceptWithin(2 * time.Minute)
		if err != nil {
			return err
		}
		steps, t, err := serve(s)
		_, took, phases := s.Linked()
		cerr := s.Close()
		if s.Rank() == 0 {
			status := "left"
			if err != nil {
				status = fmt.Sprintf("failed: %v", err)
			}
			fmt.Printf("trainer: generator %d (%d ranks) joined in %v; %d steps; it %s\n", g, s.Size()-mpi.World().Size(),
				took.Round(time.Millisecond), steps, status)
			fmt.Printf("trainer: generator %d: joined in %v, model prepared in %v, step %v (median of %d): join+prepare %.1f steps\n  phases: %s\n",
				g, took.Round(time.Millisecond), t.prepared.Round(time.Millisecond), t.median().Round(time.Millisecond), len(t.steps),
				(took+t.prepared).Seconds()/max(t.median().Seconds(), 1e-9), phases)
		}
		if mpi.Failed() != nil {
			return errors.Join(err, cerr) // the trainer's own job cannot go on
		}
	}
	if mpi.World().Rank() == 0 {
		fmt.Printf("trainer: served %d generators\n", generators)
	}
	return nil
}

// generator joins, syncs steps steps (checked) and leaves, or is killed.
func generator(path string, steps int, kill bool) error {
	s, err := session.Connect(mpi.World(), path, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	m, bufs, err := prepare(s)
	if err != nil {
		return err
	}
	defer m.Close()
	defer m.Free(bufs)
	for step := 0; step < steps; step++ {
		if err := more(s, true); err != nil {
			return err
		}
		if _, err := m.Run(context.Background(), bufs); err != nil {
			return err
		}
		if err := m.ReadParts(bufs, model.Dst, pattern.Check); err != nil {
			return err
		}
	}
	if mpi.World().Rank() == 0 {
		fmt.Printf("generator: %d steps of the whole model checked on every generator rank\n", steps)
	}
	if kill { // the trainer is in its next step's rounds
		if err := more(s, true); err != nil {
			return err
		}
		fmt.Printf("generator: rank %d: killing this job in a step\n", mpi.World().Rank())
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if err := more(s, false); !errors.Is(err, errEnough) {
		return err
	}
	return nil
}

// times are how long the trainer took to prepare a generator's model and
// each of its steps that succeeded.
type times struct {
	prepared time.Duration
	steps    []time.Duration
}

func (t times) median() time.Duration {
	if len(t.steps) == 0 {
		return 0
	}
	s := slices.Clone(t.steps)
	slices.Sort(s)
	return s[len(s)/2]
}

// serve runs the trainer's side of a generator's steps until it says it
// has had enough, or a step fails (the generator is gone).
func serve(s *session.Session) (int, times, error) {
	var t times
	start := time.Now()
	m, bufs, err := prepare(s)
	if err != nil {
		return 0, t, err
	}
	t.prepared = time.Since(start)
	defer m.Close()
	defer m.Free(bufs)
	if err := m.FillParts(bufs, model.Src, pattern.Fill); err != nil {
		return 0, t, err
	}
	for steps := 0; ; steps++ {
		if err := more(s, true); err != nil {
			if errors.Is(err, errEnough) {
				return steps, t, nil
			}
			return steps, t, err
		}
		start := time.Now()
		if _, err := m.Run(context.Background(), bufs); err != nil {
			return steps, t, err
		}
		t.steps = append(t.steps, time.Since(start))
	}
}

var errEnough = errors.New("the generator has had enough steps")

// more agrees, before each step, whether the generator wants another:
// its ranks say so, the trainer's go along.
func more(s *session.Session, want bool) error {
	mine := []byte{0}
	if want {
		mine[0] = 1
	}
	all, err := control.Exchange(context.Background(), s.Collective(), mine)
	if err != nil {
		return err
	}
	if all[len(all)-1][0] == 0 { // the generator's last rank
		return errEnough
	}
	return nil
}

// prepare lays the model out over the session's ranks: the trainer's
// tp=N first, the generator's tp=M after.
func prepare(s *session.Session) (*session.Model, *session.ModelBuffers, error) {
	md, err := model.Load("deepseek-v3", model.LoadOptions{Scale: 64, Layers: 2})
	if err != nil {
		return nil, nil, err
	}
	tr, gen, err := linkSizes(s)
	if err != nil {
		return nil, nil, err
	}
	trainer, err1 := model.ParseTrainer(fmt.Sprintf("tp=%d", tr))
	generator, err2 := model.ParseGenerator(fmt.Sprintf("tp=%d", gen))
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, err
	}
	layouts, err := model.New(md, trainer, generator)
	if err != nil {
		return nil, nil, err
	}
	m, err := s.PrepareModel(context.Background(), layouts, hier.Hier{})
	if err != nil {
		return nil, nil, err
	}
	bufs, err := m.Alloc()
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, bufs, nil
}

// linkSizes returns the trainer's and the generator's ranks: every rank
// tells, over the session, whether its job is the trainer.
func linkSizes(s *session.Session) (int, int, error) {
	mine := []byte{0}
	if os.Args[1] == "trainer" {
		mine[0] = 1
	}
	all, err := control.Exchange(context.Background(), s.Collective(), mine)
	tr := 0
	for _, b := range all {
		if len(b) == 1 && b[0] == 1 {
			tr++
		}
	}
	return tr, s.Size() - tr, err
}
