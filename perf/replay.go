package perf

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/nccl"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/refit/gpu"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/units"
)

// ReplayOptions configure a Replay: the timed calls of the 64x64 case
// (a tenth of them for 1000 tensors) and of the expert tensor and the
// models, the drivers to time in order, the models to sync colocated
// (scaled and cut), whether to skip the 7 GiB expert tensor, and whether
// to check every element of it (slow: it reads 7 GiB back).
type ReplayOptions struct {
	Iters, BigIters int
	Drivers         []refit.DriverKind
	Models          []string
	Scale           int64
	Layers          int
	NoExpert, Check bool
	// FP8 also times each model into vLLM's FP8 generator, quantized in
	// flight with these scales (0: bf16 only).
	FP8 fp8.Mode
}

// NewReplay sets a replay up on s, a one-rank session: on the GPU every
// driver of opt, in host memory the host driver only (a try-out of the
// set-up and checks).
func NewReplay(s *session.Session, opt ReplayOptions) (*replay, error) {
	rank0, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		return nil, err
	}
	b := &replay{opt: opt, s: s, mem: s.Memory(), drivers: opt.Drivers, rank0: rank0}
	if gpu, ok := s.Memory().(*cudamem.Memory); ok {
		b.gpu = gpu
	} else {
		b.drivers = []refit.DriverKind{refit.DriverHost}
	}
	return b, nil
}

// Describe says where the replay runs and how it times.
func (b *replay) Describe() string {
	if b.gpu == nil {
		return "replay-bench on the CPU (host memory; the host driver only: a try-out of the set-up and checks)"
	}
	name, _ := b.gpu.Ctx.Device().Name()
	nv, _ := nccl.Version()
	return fmt.Sprintf("replay-bench on %s (one rank holding both meshes), NCCL %d, graphs %v; small cases median of %d calls, large of %d",
		name, nv, cuda.HasGraphs(), b.opt.Iters, b.opt.BigIters)
}

// Run times every case on every driver and returns the rows: one 64x64
// tensor per call and 1000 of them in one call (and, on the GPU, the
// host's part of Launch for both), the expert tensor dense and into
// padded rows, and every model; each against its bound measured in the
// same run, each driver's destinations checked after its timed calls.
func (b *replay) Run() ([]replayRow, error) {
	var rows []replayRow
	for _, n := range []int{1, 1000} {
		r, err := b.small(n)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if !b.opt.NoExpert {
		r, err := b.expert()
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if len(b.opt.Models) > 0 && b.copyBW == 0 {
		var err error
		if b.copyBW, err = b.measureCopy(1 << 30); err != nil {
			return nil, err
		}
	}
	for _, m := range b.opt.Models {
		modes := []fp8.Mode{0}
		if b.opt.FP8 != 0 {
			modes = append(modes, b.opt.FP8)
		}
		for _, mode := range modes {
			r, err := b.model(m, mode)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
	}
	return rows, nil
}

// replayRow is one case on one driver: its median time per call beside
// its bound, and the goal it has, met or not.
type replayRow struct {
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

// replay times prepared calls on one GPU with both meshes on the one
// rank (every byte a local copy), on each driver (NewReplay, Run).
type replay struct {
	opt     ReplayOptions
	s       *session.Session
	mem     session.Memory
	gpu     *cudamem.Memory // nil on the CPU
	drivers []refit.DriverKind
	copyBW  float64 // bytes/s of the expert's memcpy
	rank0   mesh.Mesh
	// bf16 holds each model's bf16 step time by driver ("model|driver"),
	// the FP8 row's goal.
	bf16 map[string]float64
}

// WriteReplay writes rows as a table, then each row's note.
func WriteReplay(out io.Writer, rows []replayRow) error {
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
func (b *replay) timeCalls(c *benchCase) ([]replayRow, error) {
	var rows []replayRow
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
func (b *replay) timeDriver(c *benchCase, d refit.DriverKind) ([]replayRow, error) {
	ctx := context.Background()
	if err := b.s.SetDriver(d); err != nil {
		return nil, err
	}
	call, err := b.s.Prepare(ctx, c.specs, reshard.Flat)
	if err != nil {
		return nil, err
	}
	defer call.Close()
	var rows []replayRow
	{
		warm := max(3, min(c.iters/10, 100))
		var times timings
		for it := 0; it < warm+c.iters; it++ {
			t0 := time.Now()
			if _, err := call.Run(ctx, c.bufs); err != nil {
				return nil, fmt.Errorf("%s on the %s driver: %w", c.name, d, err)
			}
			if it >= warm {
				times.Add(time.Since(t0).Seconds())
			}
		}
		row := replayRow{Case: c.name, Driver: string(d), Tensors: len(c.specs), Bytes: c.bytes, Sec: times.Median(),
			Bound: c.bound, BoundSec: c.boundAt}
		row.Goal, row.Met = c.goal(d, row.Sec)
		if got := call.Driver().Name(); got != string(d) {
			row.Note = fmt.Sprintf("ran on the %s driver", got)
		}
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
func (b *replay) timeLaunches(call *refit.Call, c *benchCase, d refit.DriverKind, warm int) (replayRow, error) {
	ctx := context.Background()
	var times timings
	for it := 0; it < warm+c.iters; it++ {
		t0 := time.Now()
		if _, err := call.Launch(ctx, c.bufs, nil); err != nil {
			return replayRow{}, fmt.Errorf("%s, Launch on the %s driver: %w", c.name, d, err)
		}
		if it >= warm {
			times.Add(time.Since(t0).Seconds())
		}
		if _, err := call.Wait(ctx); err != nil {
			return replayRow{}, fmt.Errorf("%s, Wait on the %s driver: %w", c.name, d, err)
		}
	}
	enq, err := b.timeFreshCopy(c.bytes, c.iters, false)
	if err != nil {
		return replayRow{}, err
	}
	return replayRow{Case: c.name + ", Launch (host)", Driver: string(d), Tensors: len(c.specs), Bytes: c.bytes,
		Sec: times.Median(), Bound: "memcpy enqueue " + fmtSec(enq), BoundSec: enq}, nil
}

// timeFreshCopy is timeCopy on two buffers of n bytes allocated for it.
func (b *replay) timeFreshCopy(n int64, iters int, synced bool) (float64, error) {
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
func (b *replay) buf(n int64) (transport.Buffer, error) {
	x, err := b.mem.Alloc(n)
	if err != nil {
		return nil, fmt.Errorf("replay-bench: %s of device memory: %w", units.FormatBytes(n), err)
	}
	return x, nil
}

// timeCopy times iters device memcpys of n bytes (median, after
// warm-ups): with the stream synchronize after each if synced, else
// queuing alone (the synchronize follows untimed).
func (b *replay) timeCopy(dst, src transport.Buffer, n int64, iters int, synced bool) (float64, error) {
	var times timings
	warm := max(3, min(iters/10, 100))
	for it := 0; it < iters+warm; it++ {
		t0 := time.Now()
		var el time.Duration
		if b.gpu == nil {
			copy(dst.(transport.HostBuffer)[:n], src.(transport.HostBuffer)[:n])
		} else {
			d, s := dst.(cudamem.Buffer), src.(cudamem.Buffer)
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
func (b *replay) fill(buf transport.Buffer, v byte) error {
	if b.gpu == nil {
		h := buf.(transport.HostBuffer)
		for i := range h {
			h[i] = v
		}
		return nil
	}
	return b.gpu.Ctx.Memset(buf.(cudamem.Buffer).Ptr, v, int(buf.Len()))
}

// readAt copies len(dst) bytes of buf from offset off.
func (b *replay) readAt(dst []byte, buf transport.Buffer, off int64) error {
	if b.gpu == nil {
		copy(dst, buf.(transport.HostBuffer)[off:])
		return nil
	}
	return b.gpu.Ctx.CopyDtoH(dst, buf.(cudamem.Buffer).Ptr+cuda.DevicePtr(off))
}

// measureCopy returns the memcpy bandwidth of n bytes.
func (b *replay) measureCopy(n int64) (float64, error) {
	sec, err := b.timeFreshCopy(n, b.opt.BigIters, true)
	return float64(n) / sec, err
}

func (b *replay) layout(shape string) (placement.Layout, error) {
	return placement.ParseLayout(shape, dtype.BF16, b.rank0, "S0")
}
