package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/internal/pattern"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/refit/gpu"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/units"
	"github.com/spf13/cobra"
)

type replayBenchFlags struct {
	iters    int
	bigIters int
	drivers  string
	models   string
	scale    int64
	layers   int
	noExpert bool
	check    bool
	timeout  time.Duration
	device   string
}

func newReplayBenchCmd() *cobra.Command {
	var f replayBenchFlags
	cmd := &cobra.Command{
		Use:   "replay-bench [--iters 2000] [--big-iters 10] [--drivers host,replay,graph] [--models deepseek-v3,qwen3-235b-a22b] [--scale 4]",
		Short: "Time prepared GPU calls on each driver against their bounds, on one GPU (launch with mpirun -np 1)",
		Long: `replay-bench measures prepared calls on one GPU, with both meshes on the one
rank (so every byte is a local copy), on each driver in the same run:

  host    the round-by-round host driver (reshard.Executor), the driver
          before the replay, which --verify still uses
  replay  the whole step queued on the streams, one host wait at the end
  graph   the same step captured once as a CUDA graph and launched

Cases, each against its bound measured in the same run:

  64x64 bf16            one 8 KiB tensor per call: per-call time (goal: under
                        8 us), against a device memcpy of the same bytes
                        and a stream synchronize, timed the same way
  1000 x 64x64 bf16     1000 such tensors in one call: time per tensor (goal:
                        under 1 us), against one memcpy of all their bytes
  ..., Launch (host)    both small cases on replay and graph again, timing
                        only the host's part of Launch (the caller orders
                        its streams on the returned event; the Wait after
                        each is not timed), against queuing a memcpy of the
                        same bytes: what the host pays per step when it does
                        not wait
  expert                DeepSeek-V3's 7 GiB expert tensor (256x2048x7168 bf16):
                        against a device memcpy of the same bytes (goal 97%);
                        and into a destination whose rows are padded (strided:
                        the batched copy kernel), against the same memcpy
  model                 every tensor of each --models model scaled by --scale
                        (fused weights through their views), colocated: the
                        model's bytes over the step's time against the copy
                        bandwidth of the expert's memcpy

Times are host wall clock per call (median of --iters, or --big-iters for
the expert and models, after a warm-up), each call's Run returning once
every byte is in place. Each driver's destinations are poisoned and checked
after its timed calls (every element of the small cases and models; a
sample of the expert unless --check). It needs about 22 GiB of GPU memory
for the expert and twice the scaled model's bytes.`,
		Example: `  scripts/mpirun.sh -np 1 .devbin/refit replay-bench
  scripts/mpirun.sh -np 1 .devbin/refit replay-bench --models deepseek-v3 --scale 8 --no-expert`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReplayBench(cmd.OutOrStdout(), &f)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.iters, "iters", 2000, "timed calls of the 64x64 case (a tenth of them for 1000 tensors)")
	fs.IntVar(&f.bigIters, "big-iters", 10, "timed calls of the expert tensor and the models")
	fs.StringVar(&f.drivers, "drivers", "host,replay,graph", "drivers to time, in order")
	fs.StringVar(&f.models, "models", "deepseek-v3,qwen3-235b-a22b", "models to sync colocated (comma list; empty: none)")
	fs.Int64Var(&f.scale, "scale", 4, "divide the models' hidden and intermediate sizes and expert counts by this")
	fs.IntVar(&f.layers, "layers", 0, "keep only the first N decoder layers (0: all)")
	fs.BoolVar(&f.noExpert, "no-expert", false, "skip the 7 GiB expert tensor")
	fs.BoolVar(&f.check, "check", false, "check every element of the expert tensor too (slow: it reads 7 GiB back)")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "bound on every wait")
	fs.StringVar(&f.device, "device", "cuda", "cuda, or cpu to try the benchmark's set-up and checks on host memory (host driver only)")
	_ = fs.MarkHidden("device")
	return cmd
}

// benchRow is one line of the table.
type benchRow struct {
	Case, Driver string
	Tensors      int
	Bytes        int64
	Sec          float64 // median per call
	BoundSec     float64
	Bound        string
	Goal         string
	Met          string // "yes", "NO", or ""
	Note         string
}

type replayBench struct {
	f       *replayBenchFlags
	s       *session.Session
	mem     session.Memory
	gpu     *cuda.Memory // nil on the CPU
	drivers []refit.DriverKind
	copyBW  float64 // bytes/s of the expert's memcpy
	rank0   mesh.Mesh
}

func runReplayBench(out io.Writer, f *replayBenchFlags) (err error) {
	var drivers []refit.DriverKind
	for _, d := range strings.Split(f.drivers, ",") {
		dv, err := refit.ParseDriver(strings.TrimSpace(d))
		if err != nil {
			return flagError("drivers", f.drivers, err)
		}
		drivers = append(drivers, dv)
	}
	for _, c := range []struct {
		flag string
		n    int
	}{{"iters", f.iters}, {"big-iters", f.bigIters}} {
		if c.n < 1 || c.n > maxIterations {
			return flagError(c.flag, fmt.Sprint(c.n), fmt.Errorf("want 1 to %d timed calls", maxIterations))
		}
	}
	if _, err := mpi.Init(mpi.ThreadMultiple); err != nil {
		return err
	}
	defer finish(&err)
	world := mpi.World()
	jobRank = world.Rank()
	if world.Size() != 1 {
		return usageError{fmt.Errorf("replay-bench runs on one rank and one GPU (mpirun -np 1); this job has %d", world.Size())}
	}
	dev, err := session.ParseDevice(f.device)
	if err != nil {
		return flagError("device", f.device, err)
	}
	s, err := session.Join(world, session.Options{Device: dev, Timeout: f.timeout})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	rank0, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		return err
	}
	b := &replayBench{f: f, s: s, mem: s.Memory(), drivers: drivers, rank0: rank0}
	if gpu, ok := s.Memory().(*cuda.Memory); ok {
		b.gpu = gpu
		name, _ := gpu.Ctx.Device().Name()
		nv, _ := nccl.Version()
		fmt.Fprintf(out, "replay-bench on %s (one rank holding both meshes), NCCL %d, graphs %v; small cases median of %d calls, large of %d\n\n",
			name, nv, cuda.HasGraphs(), f.iters, f.bigIters)
	} else {
		b.drivers = []refit.DriverKind{refit.DriverHost}
		fmt.Fprintf(out, "replay-bench on the CPU (host memory; the host driver only: a try-out of the set-up and checks)\n\n")
	}
	var rows []benchRow
	for _, n := range []int{1, 1000} {
		r, err := b.small(n)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if !f.noExpert {
		r, err := b.expert()
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	if f.models != "" {
		if b.copyBW == 0 {
			if b.copyBW, err = b.measureCopy(1 << 30); err != nil {
				return err
			}
		}
		for _, m := range strings.Split(f.models, ",") {
			r, err := b.model(strings.TrimSpace(m))
			if err != nil {
				return err
			}
			rows = append(rows, r...)
		}
	}
	return writeBenchRows(out, rows)
}

func writeBenchRows(out io.Writer, rows []benchRow) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tdriver\ttensors\tbytes\tper call\tper tensor\tGB/s\tbound\tvs bound\tgoal\tmet\t")
	for _, r := range rows {
		vs := ""
		if r.BoundSec > 0 && r.Sec > 0 {
			vs = fmt.Sprintf("%.1f%%", 100*r.BoundSec/r.Sec)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t\n", r.Case, r.Driver, r.Tensors, units.FormatBytes(r.Bytes),
			fmtSec(r.Sec), fmtSec(r.Sec/float64(max(r.Tensors, 1))), float64(r.Bytes)/r.Sec/1e9, r.Bound, vs, r.Goal, r.Met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(out, "note: %s, %s: %s\n", r.Case, r.Driver, r.Note)
		}
	}
	return nil
}

func fmtSec(s float64) string {
	switch {
	case s < 1e-3:
		return fmt.Sprintf("%.2f us", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3f ms", s*1e3)
	}
	return fmt.Sprintf("%.3f s", s)
}

// benchCase is one call to time on every driver.
type benchCase struct {
	name    string
	specs   []refit.Spec
	bufs    []refit.TensorBuffers
	bytes   int64
	iters   int
	poison  func() error
	check   func() error
	goal    func(d refit.DriverKind, sec float64) (goal, met string)
	bound   string
	boundAt float64
	// launch: also time the host's part of Launch on the replay and graph
	// drivers (the caller orders its streams on events; Wait follows
	// untimed), against the enqueue of a device memcpy of the same bytes.
	launch bool
}

// timeCalls prepares c on every driver and times it.
func (b *replayBench) timeCalls(c *benchCase) ([]benchRow, error) {
	var rows []benchRow
	for _, d := range b.drivers {
		r, err := b.timeDriver(c, d)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// timeDriver prepares c on driver d and times it.
func (b *replayBench) timeDriver(c *benchCase, d refit.DriverKind) ([]benchRow, error) {
	ctx := context.Background()
	if err := b.s.SetDriver(d); err != nil {
		return nil, err
	}
	call, err := b.s.Prepare(ctx, c.specs, reshard.Flat{})
	if err != nil {
		return nil, err
	}
	defer call.Close()
	var rows []benchRow
	{
		warm := max(3, min(c.iters/10, 100))
		var times perf.Timings
		for it := 0; it < warm+c.iters; it++ {
			t0 := time.Now()
			if _, err := call.Run(ctx, c.bufs); err != nil {
				return nil, fmt.Errorf("%s on the %s driver: %w", c.name, d, err)
			}
			if it >= warm {
				times.Add(time.Since(t0).Seconds())
			}
		}
		row := benchRow{Case: c.name, Driver: string(d), Tensors: len(c.specs), Bytes: c.bytes, Sec: times.Median(),
			Bound: c.bound, BoundSec: c.boundAt}
		row.Goal, row.Met = c.goal(d, row.Sec)
		if err := c.poison(); err != nil {
			return nil, err
		}
		if _, err := call.Run(ctx, c.bufs); err != nil {
			return nil, err
		}
		if err := c.check(); err != nil {
			return nil, fmt.Errorf("%s on the %s driver: check failed: %w", c.name, d, err)
		}
		if r, ok := call.Driver().(*gpu.Replay); ok && d == refit.DriverGraph {
			if gerr := r.GraphError(); gerr != nil {
				row.Note = "not captured, ran from its commands: " + gerr.Error()
			}
		}
		rows = append(rows, row)
		if c.launch && b.gpu != nil && d != refit.DriverHost {
			lr, err := b.timeLaunches(call, c, d, warm)
			if err != nil {
				return nil, err
			}
			rows = append(rows, lr)
		}
	}
	return rows, nil
}

// timeLaunches times the host's part of call.Launch on driver d: the call
// is queued on the streams and Launch returns; the Wait after each (which
// waits for the GPU and agrees on the outcome) is not timed. The bound is
// the host time of queuing a device memcpy of the same bytes.
func (b *replayBench) timeLaunches(call *refit.Call, c *benchCase, d refit.DriverKind, warm int) (benchRow, error) {
	ctx := context.Background()
	var times perf.Timings
	for it := 0; it < warm+c.iters; it++ {
		t0 := time.Now()
		if _, err := call.Launch(ctx, c.bufs, nil); err != nil {
			return benchRow{}, fmt.Errorf("%s, Launch on the %s driver: %w", c.name, d, err)
		}
		if it >= warm {
			times.Add(time.Since(t0).Seconds())
		}
		if _, err := call.Wait(ctx); err != nil {
			return benchRow{}, fmt.Errorf("%s, Wait on the %s driver: %w", c.name, d, err)
		}
	}
	enq, err := b.timeFreshCopy(c.bytes, c.iters, false)
	if err != nil {
		return benchRow{}, err
	}
	return benchRow{Case: c.name + ", Launch (host)", Driver: string(d), Tensors: len(c.specs), Bytes: c.bytes,
		Sec: times.Median(), Bound: "memcpy enqueue " + fmtSec(enq), BoundSec: enq}, nil
}

// timeFreshCopy is timeCopy on two buffers of n bytes allocated for it.
func (b *replayBench) timeFreshCopy(n int64, iters int, synced bool) (float64, error) {
	src, err := b.buf(n)
	if err != nil {
		return 0, err
	}
	defer b.mem.Free(src)
	dst, err := b.buf(n)
	if err != nil {
		return 0, err
	}
	defer b.mem.Free(dst)
	return b.timeCopy(dst, src, n, iters, synced)
}

// buf allocates n bytes of device memory.
func (b *replayBench) buf(n int64) (transport.Buffer, error) {
	x, err := b.mem.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("replay-bench: %s of device memory: %w", units.FormatBytes(n), err)
	}
	return x, nil
}

// timeCopy times iters device memcpys of n bytes (median, after
// warm-ups): with the stream synchronize after each if synced, else
// queuing alone (the synchronize follows untimed).
func (b *replayBench) timeCopy(dst, src transport.Buffer, n int64, iters int, synced bool) (float64, error) {
	var times perf.Timings
	warm := max(3, min(iters/10, 100))
	for it := 0; it < iters+warm; it++ {
		t0 := time.Now()
		var el time.Duration
		if b.gpu == nil {
			copy(dst.(transport.HostBuffer)[:n], src.(transport.HostBuffer)[:n])
		} else {
			d, s := dst.(cuda.Buffer), src.(cuda.Buffer)
			if err := b.gpu.Stream.CopyDtoD(d.Ptr, s.Ptr, int(n)); err != nil {
				return 0, err
			}
			el = time.Since(t0)
			if err := b.gpu.Stream.Synchronize(); err != nil {
				return 0, err
			}
		}
		if synced || b.gpu == nil {
			el = time.Since(t0)
		}
		if it >= warm {
			times.Add(el.Seconds())
		}
	}
	return times.Median(), nil
}

// fill sets every byte of buf to v.
func (b *replayBench) fill(buf transport.Buffer, v byte) error {
	if b.gpu == nil {
		h := buf.(transport.HostBuffer)
		for i := range h {
			h[i] = v
		}
		return nil
	}
	return b.gpu.Ctx.Memset(buf.(cuda.Buffer).Ptr, v, int(buf.Len()))
}

// readAt copies len(dst) bytes of buf from offset off.
func (b *replayBench) readAt(dst []byte, buf transport.Buffer, off int64) error {
	if b.gpu == nil {
		copy(dst, buf.(transport.HostBuffer)[off:])
		return nil
	}
	return b.gpu.Ctx.CopyDtoH(dst, buf.(cuda.Buffer).Ptr+cuda.DevicePtr(off))
}

// measureCopy returns the memcpy bandwidth of n bytes.
func (b *replayBench) measureCopy(n int64) (float64, error) {
	sec, err := b.timeFreshCopy(n, b.f.bigIters, true)
	return float64(n) / sec, err
}

func (b *replayBench) layout(shape string) (placement.Layout, error) {
	return placement.ParseLayout(shape, placement.BF16, b.rank0, "S0")
}

// small times n 64x64 bf16 tensors in one call.
func (b *replayBench) small(n int) ([]benchRow, error) {
	l, err := b.layout("64x64")
	if err != nil {
		return nil, err
	}
	// the host driver makes a launch per tensor: a tenth of the calls for
	// a call of 1000.
	c := &benchCase{name: fmt.Sprintf("%d x 64x64 bf16", n), launch: true, iters: max(b.f.iters/n, min(b.f.iters, 10), b.f.iters/10)}
	if n == 1 {
		c.name = "64x64 bf16"
	}
	var free []transport.Buffer
	defer func() {
		for _, x := range free {
			b.mem.Free(x)
		}
	}()
	size := l.LocalBytes(0)
	host := make([]byte, size)
	for i := range n {
		c.specs = append(c.specs, refit.Spec{Name: fmt.Sprintf("t%04d", i), Src: l, Dst: l})
		src, err := b.buf(size)
		if err != nil {
			return nil, err
		}
		dst, err := b.buf(size)
		if err != nil {
			return nil, err
		}
		free = append(free, src, dst)
		if err := pattern.Fill(l, 0, uint64(i), host, placement.View{}); err != nil {
			return nil, err
		}
		if err := b.mem.Upload(src, host); err != nil {
			return nil, err
		}
		c.bufs = append(c.bufs, refit.TensorBuffers{Src: src, Dst: dst})
		c.bytes += size
	}
	c.poison = func() error {
		for i := range host {
			host[i] = pattern.Poison
		}
		for _, tb := range c.bufs {
			if err := b.mem.Upload(tb.Dst, host); err != nil {
				return err
			}
		}
		return nil
	}
	c.check = func() error {
		for i, tb := range c.bufs {
			if err := b.mem.Download(host, tb.Dst); err != nil {
				return err
			}
			if err := pattern.Check(l, 0, uint64(i), host, placement.View{}); err != nil {
				return fmt.Errorf("tensor %s: %w", c.specs[i].Name, err)
			}
		}
		return nil
	}
	// bound: one memcpy of all the bytes and a synchronize.
	bs, err := b.buf(c.bytes)
	if err != nil {
		return nil, err
	}
	bd, err := b.buf(c.bytes)
	if err != nil {
		return nil, err
	}
	free = append(free, bs, bd)
	if c.boundAt, err = b.timeCopy(bd, bs, c.bytes, b.f.iters, true); err != nil {
		return nil, err
	}
	c.bound = "memcpy+sync " + fmtSec(c.boundAt)
	c.goal = func(d refit.DriverKind, sec float64) (string, string) {
		if d == refit.DriverHost {
			return "", ""
		}
		if n == 1 {
			return "< 8 us", yesNo(sec < 8e-6)
		}
		return "< 1 us/tensor", yesNo(sec/float64(n) < 1e-6)
	}
	return b.timeCalls(c)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// expert times DeepSeek-V3's 7 GiB expert tensor colocated, into a dense
// destination and into one with padded rows.
func (b *replayBench) expert() ([]benchRow, error) {
	const shape = "256x2048x7168"
	l, err := b.layout(shape)
	if err != nil {
		return nil, err
	}
	n := l.LocalBytes(0)
	src, err := b.buf(n)
	if err != nil {
		return nil, err
	}
	defer b.mem.Free(src)
	if err := b.fillBig(l, src); err != nil {
		return nil, err
	}
	dst, err := b.buf(n)
	if err != nil {
		return nil, err
	}
	defer b.mem.Free(dst)
	copySec, err := b.timeCopy(dst, src, n, b.f.bigIters, true)
	if err != nil {
		return nil, err
	}
	b.copyBW = float64(n) / copySec
	bound := fmt.Sprintf("memcpy %s (%.0f GB/s)", fmtSec(copySec), b.copyBW/1e9)
	goal := func(d refit.DriverKind, sec float64) (string, string) {
		if d == refit.DriverHost {
			return "", ""
		}
		return ">= 97% of memcpy", yesNo(copySec/sec >= 0.97)
	}
	dense := &benchCase{name: "expert " + shape + " bf16", iters: b.f.bigIters, bytes: n, bound: bound, boundAt: copySec, goal: goal,
		specs: []refit.Spec{{Name: "experts.gate_up_proj", Src: l, Dst: l}},
		bufs:  []refit.TensorBuffers{{Src: src, Dst: dst}}}
	dense.poison = func() error { return b.fill(dst, pattern.Poison) }
	dense.check = func() error { return b.checkBig(l, dst, placement.View{}) }
	rows, err := b.timeCalls(dense)
	if err != nil {
		return nil, err
	}
	b.mem.Free(dst)
	// rows padded by 64 elements: every chunk a strided copy.
	sh := l.Shape()
	v := placement.View{Strides: []int64{sh[1] * (sh[2] + 64), sh[2] + 64, 1}}
	ext, err := v.Extent(sh)
	if err != nil {
		return nil, err
	}
	padded, err := b.buf(ext * l.ElemSize())
	if err != nil {
		return nil, err
	}
	defer b.mem.Free(padded)
	strided := &benchCase{name: "expert, padded destination rows", iters: b.f.bigIters, bytes: n, bound: bound, boundAt: copySec,
		goal:  func(refit.DriverKind, float64) (string, string) { return "", "" },
		specs: []refit.Spec{{Name: "experts.gate_up_proj", Src: l, Dst: l, Views: reshard.TensorViews{Dst: v}}},
		bufs:  []refit.TensorBuffers{{Src: src, Dst: padded}}}
	strided.poison = func() error { return b.fill(padded, pattern.Poison) }
	strided.check = func() error { return b.checkBig(l, padded, v) }
	more, err := b.timeCalls(strided)
	if err != nil {
		return nil, err
	}
	return append(rows, more...), nil
}

// fillBig fills a large dense source of a tensor held whole with the
// pattern, on every core.
func (b *replayBench) fillBig(l placement.Layout, buf transport.Buffer) error {
	host := make([]byte, buf.Len())
	esz := l.ElemSize()
	elems := int64(len(host)) / esz
	const per = 1 << 22
	err := parallel(int((elems+per-1)/per), func(c int) error {
		for e := int64(c) * per; e < min(int64(c+1)*per, elems); e++ {
			for k := range esz {
				host[e*esz+k] = pattern.Byte(e, int(k), 0)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.mem.Upload(buf, host)
}

// parallel runs f(0..n-1) on every core and returns the first error.
func parallel(n int, f func(i int) error) error {
	var next atomic.Int64
	errs := make([]error, runtime.NumCPU())
	var wg sync.WaitGroup
	for w := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer endOnPanic()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || errs[w] != nil {
					return
				}
				errs[w] = f(i)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkBig checks a large destination of a 3-D tensor held whole through
// view v (dense, or rows padded): every element with --check, else 16 MiB
// at its start, middle and end, byte by byte against the pattern (padding
// keeps its poison).
func (b *replayBench) checkBig(l placement.Layout, buf transport.Buffer, v placement.View) error {
	if b.f.check {
		host := make([]byte, buf.Len())
		if err := b.mem.Download(host, buf); err != nil {
			return err
		}
		return pattern.Check(l, 0, 0, host, v)
	}
	sh := l.Shape()
	st := v.ResolvedStrides(sh)
	esz := l.ElemSize()
	n := buf.Len()
	part := make([]byte, min(16<<20, n))
	for _, at := range []int64{0, (n/2 - int64(len(part))/2) &^ 15, n - int64(len(part))} {
		at = max(at, 0)
		if err := b.readAt(part, buf, at); err != nil {
			return err
		}
		for i, got := range part {
			off := at + int64(i)
			e := off/esz - v.Offset
			i0, r := e/st[0], e%st[0]
			i1, i2 := r/st[1], r%st[1]
			want := byte(pattern.Poison)
			if e >= 0 && i1 < sh[1] && i2 < sh[2] {
				want = pattern.Byte((i0*sh[1]+i1)*sh[2]+i2, int(off%esz), 0)
			}
			if got != want {
				return fmt.Errorf("byte %d is %#x, want %#x", off, got, want)
			}
		}
	}
	return nil
}

// model times every tensor of a scaled model, both sides on this rank:
// the trainer's (Megatron, TP 1) and the generator's (vLLM, TP 1) layouts
// and fused buffers, the generator's moved onto rank 0.
func (b *replayBench) model(name string) ([]benchRow, error) {
	m, err := model.Load(name, model.LoadOptions{Scale: b.f.scale, Layers: b.f.layers})
	if err != nil {
		return nil, usageError{fmt.Errorf("--models %q: %w", name, err)}
	}
	ls, err := model.New(m, model.Trainer{TP: 1}, model.Generator{TP: 1})
	if err != nil {
		return nil, err
	}
	st := ls.Stages[0]
	bufs := [2]map[string]transport.Buffer{{}, {}}
	hosts := [2]map[string][]byte{{}, {}}
	defer func() {
		for _, side := range bufs {
			for _, x := range side {
				b.mem.Free(x)
			}
		}
	}()
	for side, rank := range []int{0, 1} {
		for _, mb := range st.Buffers(model.Side(side), rank) {
			x, err := b.buf(mb.Bytes())
			if err != nil {
				return nil, err
			}
			bufs[side][mb.Name] = x
			hosts[side][mb.Name] = make([]byte, mb.Bytes())
		}
	}
	c := &benchCase{name: fmt.Sprintf("model %s", m.Name), iters: b.f.bigIters}
	type part struct {
		t   *model.TensorLayout
		dst placement.Layout
		src model.Part
		d   model.Part
	}
	var parts []part
	for _, t := range st.Tensors {
		dst, err := placement.NewLayout(t.Dst.Shape(), t.Dst.DType(), b.rank0, t.Dst.Placements())
		if err != nil {
			return nil, err
		}
		sp, _ := t.Part(model.Src, 0)
		dp, _ := t.Part(model.Dst, 1)
		parts = append(parts, part{t, dst, sp, dp})
		c.specs = append(c.specs, refit.Spec{Name: t.Name, Src: t.Src, Dst: dst, Views: reshard.TensorViews{Src: sp.View, Dst: dp.View}})
		c.bufs = append(c.bufs, refit.TensorBuffers{Src: bufs[0][sp.Buffer], Dst: bufs[1][dp.Buffer]})
		c.bytes += t.Src.Bytes()
	}
	// tensors that share a fused buffer fill and check disjoint bytes of
	// it, so they run concurrently.
	if err := parallel(len(parts), func(i int) error {
		p := parts[i]
		return pattern.Fill(p.t.Src, 0, uint64(i), hosts[0][p.src.Buffer], p.src.View)
	}); err != nil {
		return nil, err
	}
	for name, h := range hosts[0] {
		if err := b.mem.Upload(bufs[0][name], h); err != nil {
			return nil, err
		}
	}
	c.poison = func() error {
		for name, h := range hosts[1] {
			for i := range h {
				h[i] = pattern.Poison
			}
			if err := b.mem.Upload(bufs[1][name], h); err != nil {
				return err
			}
		}
		return nil
	}
	c.check = func() error {
		for name, h := range hosts[1] {
			if err := b.mem.Download(h, bufs[1][name]); err != nil {
				return err
			}
		}
		return parallel(len(parts), func(i int) error {
			p := parts[i]
			if err := pattern.Check(p.dst, 0, uint64(i), hosts[1][p.d.Buffer], p.d.View); err != nil {
				return fmt.Errorf("tensor %s: %w", p.t.Name, err)
			}
			return nil
		})
	}
	c.boundAt = float64(c.bytes) / b.copyBW
	c.bound = fmt.Sprintf("bytes at %.0f GB/s %s", b.copyBW/1e9, fmtSec(c.boundAt))
	c.goal = func(refit.DriverKind, float64) (string, string) { return "", "" }
	rows, err := b.timeCalls(c)
	for i := range rows {
		rows[i].Case = fmt.Sprintf("%s (%d tensors, %s)", c.name, len(c.specs), "scale 1/"+fmt.Sprint(b.f.scale))
	}
	return rows, err
}
