package gpu_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/internal/testutil/nccltest"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/nccl"
	pat "github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/refit/gpu"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// setup makes a context on the GPU and its stream, or skips without a GPU
// or NCCL.
var setup = nccltest.Setup

// oneRankTransport makes a one-rank communicator, its transport and a
// memory on the one GPU, freed when the test ends.
func oneRankTransport(t *testing.T, topo reshard.Topology) (*cuda.Context, *nccl.Comm, *nccl.Transport, *cudamem.Memory) {
	t.Helper()
	ctx, _ := setup(t)
	comm := nccltest.OneRank(t, ctx)
	tr, err := nccl.NewTransport(comm, ctx, topo)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := cudamem.NewMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mem.Close()
		_ = tr.Close()
	})
	return ctx, comm, tr, mem
}

// replayRunner is a transporttest runner that replays every case on tr,
// with or without a graph; graphErr collects why a capture fell back.
func replayRunner(tr *nccl.Transport, mem *cudamem.Memory, graph bool, graphErr *error) func(p *program.Program) (refit.Driver, error) {
	return func(p *program.Program) (refit.Driver, error) {
		r, err := gpu.NewReplay(p, tr, mem, gpu.Options{Timeout: time.Minute, Graph: graph})
		if err != nil {
			return nil, err
		}
		return graphNoted{r, graphErr}, nil
	}
}

// graphNoted is a Replay that notes why its capture fell back when closed.
type graphNoted struct {
	*gpu.Replay
	graphErr *error
}

func (g graphNoted) Close() error {
	if e := g.GraphError(); e != nil && *g.graphErr == nil {
		*g.graphErr = e
	}
	return g.Replay.Close()
}

// TestGPUReplayColocated replays every conformance pair's tensor held
// whole on the one rank on both sides, on every route, dense and through
// padded views (strided local copies through the batched kernel), small
// messages coalesced or not, queued on the streams and captured as a graph:
// every element checked, the bytes outside the views untouched.
func TestGPUReplayColocated(t *testing.T) {
	_, _, tr, mem := oneRankTransport(t, reshard.Topology{})
	pairs, err := transporttest.DefaultPairs()
	if err != nil {
		t.Fatal(err)
	}
	one, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, graph := range []bool{false, true} {
		var graphErr error
		for _, p := range pairs {
			dt, err := dtype.Parse(p.DType)
			if err != nil {
				t.Fatal(err)
			}
			src, err := placement.ParseLayout(p.Shape, dt, one, "S0")
			if err != nil {
				t.Fatal(err)
			}
			dst, err := placement.ParseLayout(p.Shape, dt, one, "R")
			if err != nil {
				t.Fatal(err)
			}
			c := transporttest.Case{Pair: p, Arrangement: transporttest.Colocated, Src: src, Dst: dst}
			for _, route := range []reshard.Route{reshard.Flat, reshard.AllGatherBroadcast, hier.Hier{}} {
				for _, padded := range []bool{false, true} {
					cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					env := transporttest.Env{T: tr, Mem: mem, IO: mem, Padded: padded, Coalesce: 1 << 10,
						Opts:   reshard.ScheduleOptions{ChunkBytes: 4 << 10, StagingBytes: 32 << 10},
						Driver: replayRunner(tr, mem, graph, &graphErr)}
					if _, err := transporttest.RunCase(cctx, env, c, route); err != nil {
						t.Errorf("%v, %s (views %v, graph %v): %v", c, route.Name(), padded, graph, err)
					}
					cancel()
					runs++
				}
			}
		}
		if graph && graphErr != nil {
			t.Errorf("capturing local copies as a graph failed: %v", graphErr)
		}
	}
	t.Logf("%d colocated reshards replayed on the GPU, checked element by element", runs)
}

// TestGPUReplayManyTensors replays one call of 600 tensors of varied
// shapes on one rank (through padded views for a third, so that copies of
// every shape and size share each launch, and large contiguous ones run as
// memcpys), twice in a row with the same buffers and once with others.
func TestGPUReplayManyTensors(t *testing.T) {
	_, _, tr, mem := oneRankTransport(t, reshard.Topology{})
	one, _ := mesh.Interval([]int{1}, 0)
	r := rand.New(rand.NewPCG(5, 6))
	const n = 600
	var plans []*reshard.Plan
	var views []program.TensorViews
	var layouts []placement.Layout
	for i := range n {
		shape := fmt.Sprintf("%dx%d", 1+r.IntN(40), 1+r.IntN(300))
		if i%100 == 0 {
			shape = "2048x4096" // 16 MiB of bf16: memcpys
		}
		l, err := placement.ParseLayout(shape, dtype.BF16, one, "S0")
		if err != nil {
			t.Fatal(err)
		}
		p, err := reshard.NewPlan(l, l, 1, reshard.Options{})
		if err != nil {
			t.Fatal(err)
		}
		plans, layouts = append(plans, p), append(layouts, l)
		var v program.TensorViews
		if i%3 == 1 {
			sh := l.Shape()
			v.Dst = placement.View{Offset: 5, Strides: []int64{sh[1] + 7, 1}}
		}
		views = append(views, v)
	}
	sched, err := reshard.Flat.Schedule(plans, reshard.Topology{}, reshard.ScheduleOptions{ChunkBytes: 64 << 20, StagingBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := program.Compile(sched, 0, program.CompileOptions{Views: views})
	if err != nil {
		t.Fatal(err)
	}
	rp, err := gpu.NewReplay(prog, tr, mem, gpu.Options{Timeout: time.Minute, MemcpyMin: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	type tensor struct {
		bufs refit.TensorBuffers
		got  []byte
	}
	alloc := func() []tensor {
		ts := make([]tensor, n)
		for i, l := range layouts {
			host := make([]byte, l.LocalBytes(0))
			if err := pat.Fill(l, 0, uint64(i), host, placement.View{}); err != nil {
				t.Fatal(err)
			}
			srcBuf, err := mem.Alloc(int64(len(host)))
			if err != nil {
				t.Fatal(err)
			}
			if err := mem.Upload(srcBuf, host); err != nil {
				t.Fatal(err)
			}
			dn := l.LocalBytes(0)
			if v := views[i].Dst; !v.Dense() {
				ext, err := v.Extent(l.Shape())
				if err != nil {
					t.Fatal(err)
				}
				dn = ext * l.ElemSize()
			}
			dstBuf, err := mem.Alloc(dn)
			if err != nil {
				t.Fatal(err)
			}
			ts[i] = tensor{bufs: refit.TensorBuffers{Src: srcBuf, Dst: dstBuf}, got: make([]byte, dn)}
			t.Cleanup(func() { mem.Free(srcBuf); mem.Free(dstBuf) })
		}
		return ts
	}
	check := func(ts []tensor, what string) {
		bufs := make([]refit.TensorBuffers, n)
		for i := range ts {
			for k := range ts[i].got {
				ts[i].got[k] = pat.Poison
			}
			if err := mem.Upload(ts[i].bufs.Dst, ts[i].got); err != nil {
				t.Fatal(err)
			}
			bufs[i] = ts[i].bufs
		}
		if _, err := rp.Move(context.Background(), refit.StepInput{Bufs: bufs}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i := range ts {
			if err := mem.Download(ts[i].got, ts[i].bufs.Dst); err != nil {
				t.Fatal(err)
			}
			if err := pat.Check(layouts[i], 0, uint64(i), ts[i].got, views[i].Dst); err != nil {
				t.Fatalf("%s: tensor %d: %v", what, i, err)
			}
		}
	}
	a := alloc()
	check(a, "first run")
	check(a, "second run, same buffers")
	check(alloc(), "third run, other buffers")
}

// selfProgram is a hand-made program of one rank that talks to itself:
// staged strided sends and receives, direct ones, a
// forward of bytes received two rounds earlier, and local copies between
// rounds, over a source of 4 KiB and a destination of 8 KiB.
func selfProgram() *program.Program {
	src := func(at strided.Desc) program.Region { return program.Region{Tensor: 0, Buf: reshard.BufSrc, At: at} }
	dst := func(at strided.Desc) program.Region { return program.Region{Tensor: 0, Buf: reshard.BufDst, At: at} }
	run := func(off, n int64) strided.Desc { return strided.Desc{Offset: off, Run: n} }
	part := func(r ...program.Region) []program.Part { return []program.Part{{Regions: r}} }
	p := &program.Program{Rank: 0, World: 1, Route: "self", Full: []int64{0}, Done: []int{3}, Messages: 6}
	p.Staging = [2][2]int64{{1024 + 256, 1024 + 256}, {0, 1024}}
	p.Rounds = []program.Round{
		{Index: 0,
			Copies: []program.Copy{{Bytes: 512, From: []program.Region{src(run(3584, 512))}, To: []program.Region{dst(run(7680, 512))}}},
			Sends: []program.Wire{{Peer: 0, Class: reshard.LinkNetwork, Bytes: 1024 + 256, Mode: program.WireStaged, StagingOff: 0,
				Parts: part(src(strided.Desc{Offset: 0, Run: 64, Count: []int64{16}, Stride: []int64{128}}), src(run(2048, 256)))}},
			Recvs: []program.Wire{{Peer: 0, Class: reshard.LinkNetwork, Bytes: 1024 + 256, Mode: program.WireStaged, StagingOff: 0,
				Parts: part(dst(strided.Desc{Offset: 8, Run: 32, Count: []int64{32}, Stride: []int64{64}}), dst(run(6144, 256)))}}},
		{Index: 1,
			Sends: []program.Wire{{Peer: 0, Class: reshard.LinkLocal, Bytes: 1024, Mode: program.WireDirect, Region: src(run(2304, 1024)), Parts: part(src(run(2304, 1024)))}},
			Recvs: []program.Wire{{Peer: 0, Class: reshard.LinkLocal, Bytes: 1024, Mode: program.WireDirect, Region: dst(run(4096, 1024)), Parts: part(dst(run(4096, 1024)))}}},
		{Index: 3,
			// forwards what round 1 received
			Copies: []program.Copy{{Bytes: 64, From: []program.Region{dst(run(6144, 64))}, To: []program.Region{dst(run(7000, 64))}}},
			Sends:  []program.Wire{{Peer: 0, Class: reshard.LinkNetwork, Bytes: 1024, Mode: program.WireDirect, Region: dst(run(4096, 1024)), Parts: part(dst(run(4096, 1024)))}},
			Recvs: []program.Wire{{Peer: 0, Class: reshard.LinkNetwork, Bytes: 1024, Mode: program.WireStaged, StagingOff: 0,
				Parts: part(dst(strided.Desc{Offset: 5120, Run: 16, Count: []int64{64}, Stride: []int64{16}}))}}},
	}
	return p
}

// TestGPUReplaySelf replays selfProgram on a one-rank communicator (NCCL
// groups, packs, unpacks, forwarding, copies that
// read what a receive wrote) on the streams and as a graph, and compares
// the destination with what the round-by-round host driver makes of the
// same program.
func TestGPUReplaySelf(t *testing.T) {
	_, _, tr, mem := oneRankTransport(t, reshard.Topology{Domain: []int{0}})
	prog := selfProgram()
	src := make([]byte, 4096)
	for i := range src {
		src[i] = byte(i*7 + i/256)
	}
	runWith := func(t *testing.T, d refit.Driver) []byte {
		t.Helper()
		sb, _ := mem.Alloc(4096)
		db, _ := mem.Alloc(8192)
		defer mem.Free(sb)
		defer mem.Free(db)
		if err := mem.Upload(sb, src); err != nil {
			t.Fatal(err)
		}
		if err := mem.Upload(db, bytes.Repeat([]byte{pat.Poison}, 8192)); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := d.Move(cctx, refit.StepInput{Bufs: []refit.TensorBuffers{{Src: sb, Dst: db}}})
		if err != nil {
			t.Fatal(err)
		}
		if st.Rounds != 3 || st.Sent[reshard.LinkNetwork] != 2304 || st.Recv[reshard.LinkLocal] != 1024 || st.Sent[reshard.LinkSelf] != 576 {
			t.Errorf("stats %+v", st)
		}
		got := make([]byte, 8192)
		if err := mem.Download(got, db); err != nil {
			t.Fatal(err)
		}
		return got
	}
	host, err := refit.NewHostDriver(prog, tr, mem, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	want := runWith(t, host)
	if bytes.Equal(want, bytes.Repeat([]byte{pat.Poison}, 8192)) {
		t.Fatal("the host driver moved nothing")
	}
	for _, graph := range []bool{false, true} {
		rp, err := gpu.NewReplay(prog, tr, mem, gpu.Options{Timeout: time.Minute, Graph: graph})
		if err != nil {
			t.Fatal(err)
		}
		for run := range 3 {
			got := runWith(t, rp)
			if !bytes.Equal(got, want) {
				i := 0
				for got[i] == want[i] {
					i++
				}
				t.Fatalf("graph %v, run %d: byte %d is %#x, the host driver wrote %#x", graph, run, i, got[i], want[i])
			}
		}
		if graph {
			if rp.GraphError() != nil {
				t.Logf("NOTE: the step with NCCL groups could not be captured as a graph, so it ran from its commands: %v", rp.GraphError())
			} else if !rp.Graphed() {
				t.Error("graph asked for, captured without error, but not used")
			}
		}
		if err := rp.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGPUReplayLaunch queues steps after an event of another stream (a
// "trainer" that writes the source there) and makes a "generator" stream
// wait on the event Launch returns before reading the destination: no host
// wait in between.
func TestGPUReplayLaunch(t *testing.T) {
	ctx, _, tr, mem := oneRankTransport(t, reshard.Topology{Domain: []int{0}})
	prog := selfProgram()
	rp, err := gpu.NewReplay(prog, tr, mem, gpu.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	trainer := gputest.Stream(t, ctx)
	gen := gputest.Stream(t, ctx)
	wrote, err := ctx.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer wrote.Destroy()
	sb, _ := mem.Alloc(4096)
	db, _ := mem.Alloc(8192)
	out, _ := mem.Alloc(8192)
	defer mem.Free(sb)
	defer mem.Free(db)
	defer mem.Free(out)
	if err := ctx.Memset(db.(cudamem.Buffer).Ptr, 0, 8192); err != nil {
		t.Fatal(err)
	}
	bufs := []refit.TensorBuffers{{Src: sb, Dst: db}}
	var want []byte
	for step := range 3 {
		v := byte(0x10 * (step + 1))
		if err := trainer.Memset(sb.(cudamem.Buffer).Ptr, v, 4096); err != nil {
			t.Fatal(err)
		}
		if err := wrote.Record(trainer); err != nil {
			t.Fatal(err)
		}
		done, err := rp.Launch(refit.StepInput{Bufs: bufs}, wrote)
		if err != nil {
			t.Fatal(err)
		}
		if err := gen.WaitEvent(done.(*cuda.Event)); err != nil {
			t.Fatal(err)
		}
		if err := gen.CopyDtoD(out.(cudamem.Buffer).Ptr, db.(cudamem.Buffer).Ptr, 8192); err != nil {
			t.Fatal(err)
		}
		if err := gen.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if _, err := rp.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8192)
		if err := mem.Download(got, out); err != nil {
			t.Fatal(err)
		}
		if step == 0 {
			want = got
		}
		moved := 0
		for i := range got {
			if got[i] == v {
				moved++
			}
			if (want[i] == 0x10) != (got[i] == v) {
				t.Fatalf("step %d: byte %d is %#x, want %#x where step 0 moved a byte", step, i, got[i], v)
			}
		}
		if moved != 1024+256+1024+512+64+1024 {
			t.Fatalf("step %d: %d bytes moved", step, moved)
		}
	}
}

// TestGPUReplayTimeout holds a step back behind a gate on another stream
// (as a peer that never sends would hold a round back): the host's wait must
// give up after the timeout with a *reshard.TimeoutError naming the rank,
// the stuck round and its peers; once the gate opens, the step completes.
func TestGPUReplayTimeout(t *testing.T) {
	ctx, _, tr, mem := oneRankTransport(t, reshard.Topology{Domain: []int{0}})
	prog := selfProgram()
	rp, err := gpu.NewReplay(prog, tr, mem, gpu.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	sb, _ := mem.Alloc(4096)
	db, _ := mem.Alloc(8192)
	defer mem.Free(sb)
	defer mem.Free(db)
	// a first step binds the buffers and loads the kernels: loading a
	// module waits for the context, which a held stream would block.
	if _, err := rp.Launch(refit.StepInput{Bufs: []refit.TensorBuffers{{Src: sb, Dst: db}}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	word := gputest.Alloc(t, ctx, 4)
	if err := ctx.Memset(word, 0, 4); err != nil {
		t.Fatal(err)
	}
	gate := gputest.Stream(t, ctx)
	if err := gate.WaitValue32(word, 1); err != nil {
		t.Skipf("no gate to hold a step back: %v", err)
	}
	held, err := ctx.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Destroy()
	if err := held.Record(gate); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := rp.Launch(refit.StepInput{Bufs: []refit.TensorBuffers{{Src: sb, Dst: db}}}, held); err != nil {
		t.Fatal(err)
	}
	_, err = rp.Wait(context.Background())
	var te *control.TimeoutError
	if !errors.As(err, &te) || te.Rank != 0 || te.Round != 0 || len(te.Peers) != 1 || te.Peers[0] != 0 {
		t.Fatalf("after %v: %v, want a timeout of round 0 naming rank 0", time.Since(start), err)
	}
	if d := time.Since(start); d < 2*time.Second || d > 10*time.Second {
		t.Errorf("gave up after %v, the timeout is 2s", d)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err := ctx.Memset(word, 1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Wait(context.Background()); err != nil {
		t.Fatalf("after the gate opened: %v", err)
	}
}
