package session_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/testutil/layouttest"
	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/pipeline"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

func layout(t testing.TB, shape string, dt dtype.DType, meshShape []int, start int, pl string) placement.Layout {
	t.Helper()
	return layouttest.Layout(t, shape, dt, layouttest.Interval(t, meshShape, start), pl)
}

// resultSeconds returns the seconds of every line of a job's output out
// that re matches for rank (re's groups: the rank, then its seconds).
func resultSeconds(out string, re *regexp.Regexp, rank int) []float64 {
	var secs []float64
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		if m[1] == fmt.Sprint(rank) {
			var s float64
			fmt.Sscan(m[2], &s)
			secs = append(secs, s)
		}
	}
	return secs
}

// join joins c to a session with opts; the test fails if it cannot.
func join(t testing.TB, c *mpi.Comm, opts session.Options) *session.Session {
	t.Helper()
	s, err := session.Join(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// buffers allocates this rank's buffers of a call from the session's
// memory: sources filled with each tensor's pattern (seed = its index),
// destinations poisoned.
func buffers(t testing.TB, s *session.Session, specs []refit.Spec) []refit.TensorBuffers {
	t.Helper()
	mem := s.Memory()
	upload := func(h []byte) transport.Buffer { // a buffer of the session's memory holding h
		t.Helper()
		b, err := mem.Alloc(int64(len(h)))
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Upload(b, h); err != nil {
			t.Fatal(err)
		}
		return b
	}
	out := make([]refit.TensorBuffers, len(specs))
	for i, sp := range specs {
		if sp.Src.Mesh().Contains(s.Rank()) {
			h := make([]byte, sp.Src.LocalBytes(s.Rank()))
			if err := pattern.Fill(sp.Src, s.Rank(), uint64(i), h, placement.View{}); err != nil {
				t.Fatal(err)
			}
			out[i].Src = upload(h)
		}
		if sp.Dst.Mesh().Contains(s.Rank()) {
			h := make([]byte, sp.Dst.LocalBytes(s.Rank()))
			for k := range h {
				h[k] = pattern.Poison
			}
			out[i].Dst = upload(h)
		}
	}
	return out
}

func check(t testing.TB, s *session.Session, specs []refit.Spec, bufs []refit.TensorBuffers) {
	t.Helper()
	for i, sp := range specs {
		if bufs[i].Dst == nil {
			continue
		}
		h := make([]byte, bufs[i].Dst.Len())
		if err := s.Memory().Download(h, bufs[i].Dst); err != nil {
			t.Fatal(err)
		}
		if err := pattern.Check(sp.Dst, s.Rank(), uint64(i), h, placement.View{}); err != nil {
			t.Fatalf("tensor %s: %v", sp.Name, err)
		}
	}
}

// TestPrepareOnceRunEverySteps moves three tensors of different layouts
// from 4 trainer ranks to a DP2 x TP2 generator over MPI on every route,
// with 2 emulated destination domains, three steps each, checking every
// element after every step.
func TestPrepareOnceRunEverySteps(t *testing.T) {
	mpitest.Run(t, 8, func(t mpitest.T, c *mpi.Comm) {
		s := join(t, c, session.Options{Timeout: 30 * time.Second, Domains: hier.DomainSizes{Dst: 2}, ChunkBytes: 4096, StagingBytes: 64 << 10})
		defer s.Close()
		specs := []refit.Spec{
			{Name: "embed", Src: layout(t, "64x32", dtype.BF16, []int{4}, 0, "S0"), Dst: layout(t, "64x32", dtype.BF16, []int{2, 2}, 4, "R,S0")},
			{Name: "row", Src: layout(t, "48x40", dtype.F32, []int{4}, 0, "S0"), Dst: layout(t, "48x40", dtype.F32, []int{2, 2}, 4, "R,S1")},
			{Name: "norm", Src: layout(t, "40", dtype.BF16, []int{4}, 0, "R"), Dst: layout(t, "40", dtype.BF16, []int{2, 2}, 4, "R,R")},
		}
		for _, route := range []reshard.Route{reshard.Flat, reshard.AllGatherBroadcast, hier.Hier{}, bounds.Auto{Fabric: bounds.Fabric{NetBW: 1e9, LocalBW: 1e10}}} {
			call, err := s.Prepare(context.Background(), specs, route)
			if err != nil {
				t.Fatalf("%s: %v", route.Name(), err)
			}
			bufs := buffers(t, s, specs)
			for step := 0; step < 3; step++ {
				rep, err := call.Run(context.Background(), bufs)
				if err != nil {
					t.Fatalf("%s step %d: %v", route.Name(), step, err)
				}
				if len(rep.Completed) != len(specs) {
					t.Fatalf("%s: completed %v", route.Name(), rep.Completed)
				}
				check(t, s, specs, bufs)
			}
			call.Close()
		}
	})
}

// TestPrepareAgreesOnEverything starts one rank with another chunk size,
// another route and another domain override in turn: Join or Prepare fails
// on every rank with the same *reshard.AgreementError naming rank 3 and
// the field, before anything moves.
func TestPrepareAgreesOnEverything(t *testing.T) {
	specs := func(t testing.TB) []refit.Spec {
		return []refit.Spec{{Name: "w", Src: layout(t, "16x8", dtype.BF16, []int{2}, 0, "S0"), Dst: layout(t, "16x8", dtype.BF16, []int{2}, 2, "S1")}}
	}
	cases := []struct {
		name  string
		opts  func(rank int) session.Options
		route func(rank int) reshard.Route
		field string
	}{
		{"chunk", func(r int) session.Options {
			o := session.Options{Timeout: 20 * time.Second}
			if r == 3 {
				o.ChunkBytes = 1 << 20
			}
			return o
		}, func(int) reshard.Route { return reshard.Flat }, "chunk bytes"},
		{"route", func(int) session.Options { return session.Options{Timeout: 20 * time.Second} }, func(r int) reshard.Route {
			if r == 3 {
				return hier.Hier{}
			}
			return reshard.Flat
		}, "route"},
		{"topology", func(r int) session.Options {
			o := session.Options{Timeout: 20 * time.Second}
			if r == 3 {
				o.Domains.Dst = 1
			}
			return o
		}, func(int) reshard.Route { return hier.Hier{} }, "domain sizes"},
	}
	for _, tc := range cases {
		mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
			s, err := session.Join(c, tc.opts(c.Rank()))
			if err == nil {
				defer s.Close()
				_, err = s.Prepare(context.Background(), specs(t), tc.route(c.Rank()))
			}
			var ae *control.AgreementError
			if !errors.As(err, &ae) || ae.Rank != 3 || ae.Field != tc.field {
				t.Fatalf("%s: %v, want an agreement error on %q naming rank 3", tc.name, err, tc.field)
			}
		})
	}
}

// TestTypedErrorsCrossRanks gives rank 2 a destination buffer one byte
// short: every rank's Run fails with a *reshard.ValidationError that
// errors.As matches to the *reshard.BufferError naming rank 2, and the
// session stays usable: the next step with good buffers passes. Then rank
// 1 refuses a step (Call.Refuse), with the same outcome.
func TestTypedErrorsCrossRanks(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		s := join(t, c, session.Options{Timeout: 20 * time.Second, Verify: true, Atomic: true})
		defer s.Close()
		specs := []refit.Spec{{Name: "w", Src: layout(t, "16x8", dtype.BF16, []int{2}, 0, "S0"), Dst: layout(t, "16x8", dtype.BF16, []int{2}, 2, "S1")}}
		call, err := s.Prepare(context.Background(), specs, reshard.Flat)
		if err != nil {
			t.Fatal(err)
		}
		bufs := buffers(t, s, specs)
		bad := append([]refit.TensorBuffers(nil), bufs...)
		if c.Rank() == 2 {
			bad[0].Dst = transport.HostBuffer(bufs[0].Dst.(transport.HostBuffer)[1:])
		}
		_, err = call.Run(context.Background(), bad)
		var be *refit.BufferError
		if !errors.As(err, &be) || be.Rank != 2 || be.Tensor != "w" || be.Side != "destination" {
			t.Fatalf("run with a short buffer on rank 2: %v (%T)", err, err)
		}
		if aborted, _ := s.Aborted(); aborted {
			t.Fatal("an agreed validation error aborted the session")
		}
		if _, err := call.Run(context.Background(), bufs); err != nil {
			t.Fatal(err)
		}
		check(t, s, specs, bufs)
		// rank 1 refuses the next step (what only it can tell): every
		// rank fails with its error, typed, and the session stays usable.
		if c.Rank() == 1 {
			err = call.Refuse(context.Background(), &refit.BufferError{Rank: 1, Tensor: "w", Side: "source", Why: "is not contiguous", Want: 64, Got: -1})
		} else {
			_, err = call.Run(context.Background(), bufs)
		}
		if !errors.As(err, &be) || be.Rank != 1 || be.Why != "is not contiguous" {
			t.Fatalf("a step rank 1 refused: %v (%T)", err, err)
		}
		if _, err := call.Run(context.Background(), buffers(t, s, specs)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStoppedRankNamed stops rank 3 (it sleeps instead of calling Run)
// while the others run a step: with no watchdog in the test, every other
// rank returns, within the timeout plus a few seconds, an error that
// errors.As matches to a *reshard.TimeoutError naming rank 3, and the
// session reports that it aborted.
func TestStoppedRankNamed(t *testing.T) {
	const timeout = 3 * time.Second
	out, _ := mpitest.Output(t, 4, func(t mpitest.T, c *mpi.Comm) {
		s, call, bufs := twoByTwo(t, c, timeout)
		if c.Rank() == 3 {
			time.Sleep(3 * timeout) // stopped: never calls Run in time
			fmt.Printf("RESULT rank 3 woke up\n")
			mpi.MarkFailed(errors.New("stopped on purpose"))
			return
		}
		start := time.Now()
		_, err := call.Run(context.Background(), bufs)
		var te *control.TimeoutError
		aborted, _ := s.Aborted()
		fmt.Printf("RESULT rank %d after %.1fs: timeout=%v peers=%v aborted=%v: %v\n", c.Rank(), time.Since(start).Seconds(),
			errors.As(err, &te), peersOf(te), aborted, err)
		s.Close()
	})
	if mpitest.InChild() {
		return
	}
	if testing.Verbose() {
		t.Logf("job output:\n%s", out)
	}
	re := regexp.MustCompile(`RESULT rank (\d) after ([0-9.]+)s: timeout=true peers=\[3\] aborted=true`)
	for r := 0; r < 3; r++ {
		secs := resultSeconds(out, re, r)
		for _, s := range secs {
			if s > timeout.Seconds()+5 {
				t.Errorf("rank %d returned after %.1fs, timeout %v", r, s, timeout)
			}
		}
		if len(secs) == 0 {
			t.Errorf("rank %d did not return a timeout naming rank 3:\n%s", r, out)
		}
	}
	if strings.Contains(out, "panic") {
		t.Errorf("a panic:\n%s", out)
	}
}

// twoByTwo joins a session over c (4 ranks) and prepares one call on it:
// a 16x8 bf16 tensor from ranks 0-1 in rows to ranks 2-3 in columns, with
// its buffers (the source filled, the destination poisoned).
func twoByTwo(t mpitest.T, c *mpi.Comm, timeout time.Duration) (*session.Session, *refit.Call, []refit.TensorBuffers) {
	s := join(t, c, session.Options{Timeout: timeout})
	specs := []refit.Spec{{Name: "w", Src: layout(t, "16x8", dtype.BF16, []int{2}, 0, "S0"), Dst: layout(t, "16x8", dtype.BF16, []int{2}, 2, "S1")}}
	call, err := s.Prepare(context.Background(), specs, reshard.Flat)
	if err != nil {
		t.Fatal(err)
	}
	return s, call, buffers(t, s, specs)
}

func peersOf(te *control.TimeoutError) []int {
	if te == nil {
		return nil
	}
	return te.Peers
}

// TestStagesConcurrent runs the paper's Example B through Stages: two
// stages of two trainer ranks reshard concurrently to one generator rank,
// each on its own communicator, three steps, every element checked.
func TestStagesConcurrent(t *testing.T) {
	mpitest.Run(t, 5, func(t mpitest.T, c *mpi.Comm) {
		s := join(t, c, session.Options{Timeout: 30 * time.Second})
		defer s.Close()
		_, before := mpi.Live()
		st, err := s.Pipeline(pipeline.Contiguous(2, 2, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		// one communicator per stage this rank is in, which the stage's
		// data and control plane share; the generator's rank in both.
		in := 0
		for _, ss := range st.Sessions {
			if ss != nil {
				in++
			}
		}
		if _, after := mpi.Live(); after-before != int64(in) {
			t.Errorf("the stages made %d communicators on a rank in %d stages, want %d", after-before, in, in)
		}
		specsOf := func(int) []refit.Spec {
			return []refit.Spec{{Name: "layer", Src: layout(t, "8x6", dtype.F32, []int{2}, 0, "S0"), Dst: layout(t, "8x6", dtype.F32, []int{1}, 2, "R")}}
		}
		sc, err := st.Prepare(context.Background(), specsOf, hier.Hier{})
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([][]refit.TensorBuffers, 2)
		for i, ss := range st.Sessions {
			if ss != nil {
				bufs[i] = buffers(t, ss, specsOf(i))
			}
		}
		for step := 0; step < 3; step++ {
			if _, err := sc.Run(context.Background(), func(i int) []refit.TensorBuffers { return bufs[i] }); err != nil {
				t.Fatal(err)
			}
			for i, ss := range st.Sessions {
				if ss != nil {
					check(t, ss, specsOf(i), bufs[i])
				}
			}
		}
		sc.Close()
	})
}

// TestOneStageIsTheSession splits a session into one stage that holds
// every rank in order: the stage is the session under another name (no
// communicator made), its call moves and checks every element, and
// closing the stage leaves the session usable for a call and a barrier.
func TestOneStageIsTheSession(t *testing.T) {
	mpitest.Run(t, 3, func(t mpitest.T, c *mpi.Comm) {
		s := join(t, c, session.Options{Timeout: 30 * time.Second})
		defer s.Close()
		_, before := mpi.Live()
		st, err := s.Pipeline(pipeline.Contiguous(1, 2, 1))
		if err != nil {
			t.Fatal(err)
		}
		if _, after := mpi.Live(); after != before {
			t.Errorf("a stage of every rank made %d communicators, want none", after-before)
		}
		specs := []refit.Spec{{Name: "layer", Src: layout(t, "8x6", dtype.F32, []int{2}, 0, "S0"), Dst: layout(t, "8x6", dtype.F32, []int{1}, 2, "R")}}
		sc, err := st.Prepare(context.Background(), func(int) []refit.Spec { return specs }, hier.Hier{})
		if err != nil {
			t.Fatal(err)
		}
		bufs := buffers(t, st.Sessions[0], specs)
		if _, err := sc.Run(context.Background(), func(int) []refit.TensorBuffers { return bufs }); err != nil {
			t.Fatal(err)
		}
		check(t, st.Sessions[0], specs, bufs)
		sc.Close()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		// the session's own call after the stage's: numbered after it,
		// on the same communicator.
		specs[0].Name = "after"
		bufs = buffers(t, s, specs)
		call, err := s.Prepare(context.Background(), specs, hier.Hier{})
		if err != nil {
			t.Fatalf("the session after its stage closed: %v", err)
		}
		defer call.Close()
		if _, err := call.Run(context.Background(), bufs); err != nil {
			t.Fatal(err)
		}
		check(t, s, specs, bufs)
		if err := s.Barrier(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOneRank runs calls on a session of one rank, whose collectives make
// no MPI call: steps move and check, a bad buffer is still the typed
// *reshard.ValidationError, and on CPUs only the host driver runs (Launch
// and the GPU drivers are errors that say why).
func TestOneRank(t *testing.T) {
	mpitest.Run(t, 1, func(t mpitest.T, c *mpi.Comm) {
		s := join(t, c, session.Options{Timeout: 30 * time.Second})
		defer s.Close()
		specs := []refit.Spec{
			{Name: "a", Src: layout(t, "64x64", dtype.BF16, []int{1}, 0, "S0"), Dst: layout(t, "64x64", dtype.BF16, []int{1}, 0, "S1")},
			{Name: "b", Src: layout(t, "7x5", dtype.F32, []int{1}, 0, "R"), Dst: layout(t, "7x5", dtype.F32, []int{1}, 0, "S0")},
		}
		call, err := s.Prepare(context.Background(), specs, reshard.AllGatherBroadcast)
		if err != nil {
			t.Fatal(err)
		}
		defer call.Close()
		bufs := buffers(t, s, specs)
		for step := 0; step < 3; step++ {
			rep, err := call.Run(context.Background(), bufs)
			if err != nil || len(rep.Completed) != 2 {
				t.Fatalf("step %d: %v, %v", step, rep, err)
			}
			check(t, s, specs, bufs)
		}
		if d := call.Driver().Name(); d != string(refit.DriverHost) {
			t.Errorf("a CPU call's driver is %s", d)
		}
		if _, err := session.Join(c, session.Options{Timeout: 30 * time.Second, Driver: refit.DriverReplay}); err == nil || !strings.Contains(err.Error(), "join with device cuda") {
			t.Errorf("the replay driver on a CPU session: %v", err)
		}
		var ve *control.ValidationError
		if _, err := call.Launch(context.Background(), bufs, nil); !errors.As(err, &ve) || !strings.Contains(err.Error(), "Launch needs a call moved by a device driver") {
			t.Errorf("Launch on a CPU call: %v", err)
		}
		short := append([]refit.TensorBuffers(nil), bufs...)
		short[1].Dst = transport.HostBuffer(make([]byte, 3))
		_, err = call.Run(context.Background(), short)
		if !errors.As(err, &ve) {
			t.Fatalf("a short buffer: %v", err)
		}
		if aborted, _ := s.Aborted(); aborted {
			t.Fatal("an agreed error aborted the session")
		}
		if err := s.Barrier(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLeaveNamedAtOnce: rank 2's program fails after preparing a call
// and leaves the session with its error; the other ranks, in the step's
// first collective, fail at once (well inside the minute-long timeout)
// with a *control.LeftError naming rank 2 and its cause.
func TestLeaveNamedAtOnce(t *testing.T) {
	const timeout = time.Minute
	out, _ := mpitest.Output(t, 4, func(t mpitest.T, c *mpi.Comm) {
		s, call, bufs := twoByTwo(t, c, timeout)
		// every rank is done with Prepare's collectives before rank 2
		// leaves (a plain MPI barrier, apart from the session): a rank
		// still finishing one is not disturbed by the leaver, but can be
		// by the abort notice of a peer that already met its absence.
		if req, err := c.Ibarrier(); err != nil {
			t.Fatal(err)
		} else if err := req.Wait(); err != nil {
			t.Fatal(err)
		}
		if c.Rank() == 2 {
			if err := s.Leave(errors.New("the trainer's optimizer diverged")); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("RESULT rank 2 left\n")
			return
		}
		start := time.Now()
		_, err := call.Run(context.Background(), bufs)
		var le *control.LeftError
		fmt.Printf("RESULT rank %d after %.1fs: left=%v rank=%d: %v\n", c.Rank(), time.Since(start).Seconds(),
			errors.As(err, &le), leftRank(le), err)
		s.Close()
	})
	if mpitest.InChild() {
		return
	}
	re := regexp.MustCompile(`RESULT rank (\d) after ([0-9.]+)s: left=true rank=2: .*rank 2 left the session: the trainer's optimizer diverged`)
	for _, r := range []int{0, 1, 3} {
		secs := resultSeconds(out, re, r)
		for _, s := range secs {
			if s > 10 {
				t.Errorf("rank %d learned it after %.1fs; the timeout is %v", r, s, timeout)
			}
		}
		if len(secs) == 0 {
			t.Errorf("rank %d did not name rank 2 leaving:\n%s", r, out)
		}
	}
}

// TestCloseAfterLastStep: ranks that close their sessions as soon as the
// last step is done on them disturb no rank still finishing that step.
func TestCloseAfterLastStep(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		s, call, bufs := twoByTwo(t, c, time.Minute)
		for step := 0; step < 3; step++ {
			if _, err := call.Run(context.Background(), bufs); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		if c.Rank() == 0 {
			time.Sleep(200 * time.Millisecond) // the others close first
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func leftRank(le *control.LeftError) int {
	if le == nil {
		return -1
	}
	return le.Rank
}

// TestDeltaOnlyOnCPUs: Join (through Resolved, which it uses) refuses
// delta mode on a GPU session before it touches a GPU, naming the field;
// on CPUs delta mode is an option like the others.
func TestDeltaOnlyOnCPUs(t *testing.T) {
	_, err := session.Options{Device: session.GPU, Delta: true}.Resolved()
	var fe *reshard.FieldError
	if !errors.As(err, &fe) || fe.Field != "delta" || !strings.Contains(err.Error(), "host memory") {
		t.Fatalf("a GPU session in delta mode: %v, want a FieldError naming delta and why", err)
	}
	if o, err := (session.Options{Device: session.CPU, Delta: true}).Resolved(); err != nil || !o.Delta {
		t.Fatalf("a CPU session in delta mode: %+v, %v", o, err)
	}
}

// TestRejoinAfterClose: sessions joined and closed one after another on
// the same communicator (a Python `with Session(comm)` in a loop) do not
// hear each other: a leave notice that one session's close sent to a
// peer that had already closed must not reach the next session, whose
// control communicator MPI may give the same context id, as a stale
// "closed the session" (it failed the next session's steps).
func TestRejoinAfterClose(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		for round := 0; round < 4; round++ {
			s, err := session.Join(c, session.Options{Timeout: 20 * time.Second})
			if err != nil {
				t.Fatalf("round %d: join: %v", round, err)
			}
			if round%2 == 1 {
				// some steps, so that this session's collective count
				// (which a leave notice carries) is not the next one's
				for step := 0; step < 3; step++ {
					if err := s.Barrier(context.Background()); err != nil {
						t.Fatalf("round %d, barrier %d: %v", round, step, err)
					}
				}
			}
			if c.Rank() == round%4 {
				time.Sleep(50 * time.Millisecond) // the others close first
			}
			if err := s.Close(); err != nil {
				t.Fatalf("round %d: close: %v", round, err)
			}
		}
		s, call, bufs := twoByTwo(t, c, 20*time.Second)
		defer s.Close()
		for step := 0; step < 12; step++ {
			if _, err := call.Run(context.Background(), bufs); err != nil {
				t.Fatalf("step %d after the rejoins: %v", step, err)
			}
		}
	})
}
