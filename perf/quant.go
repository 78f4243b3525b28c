package perf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cudamem"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// QuantOptions configures Quantize. Zero fields take the
// defaults.
type QuantOptions struct {
	RowBytes   []int    // bf16 row widths of the strided source; default 256 B, 4 KiB, 64 KiB
	TotalBytes int      // bf16 bytes each operation reads; default 1 GiB
	Mode       fp8.Mode // default fp8.Block
	Iters      int      // timed iterations, the median is reported; default 20
	Warmup     int      // untimed iterations first; default 3
}

// QuantResult is one operation at one row width.
type QuantResult struct {
	RowBytes int
	Op       string // copy, pack, amax, quant-pack, stage-2pass, stage-2pass+host, stage-fused, convert, pack+convert, fused-dense
	Bytes    int64  // bf16 input bytes
	Median   time.Duration
	GBps     float64 // Bytes / Median, decimal GB/s of bf16 input
	VsPack   float64 // pack's median over this one's: 1 = as fast as packing the bf16 bytes
}

// Quantize measures the FP8 kernels against packing alone, at the same
// input bytes, for each row width: the source holds TotalBytes of bf16 in
// rows of RowBytes, each 2*RowBytes after the previous (a box of half the
// columns of a matrix, as a reshard from rows to columns sends), quantized
// over the matrix's blocks (Mode).
//
//	copy          a plain device-to-device copy of the input bytes
//	pack          the bf16 pack kernel: what a bf16 reshard stages
//	amax          BlockAmax of the box: the pass before quantizing
//	quant-pack    PackQuantize of the box: packing straight into E4M3
//	stage-2pass   the FP8 stage as a step pays it for blocks a shard
//	              boundary cuts: zeroing the amax window, BlockAmax, then
//	              PackQuantize, back to back on the stream (the host's turn
//	              of amaxes into scales and the exchange between them are
//	              not timed)
//	stage-2pass+host  the same with the host's part of a step between the
//	              passes, as one GPU's step pays it without the exchange:
//	              the amax window read back, turned into scales on the
//	              host and written again
//	stage-fused   the FP8 stage of whole blocks: FusedQuantize of the box
//	              (amax, scales and E4M3 in one pass); only where the box
//	              holds every block it touches whole (Block scaling: the
//	              box's columns are a multiple of 128; Row and Tensor
//	              scaling cut every row of this box, so there the stage is
//	              stage-2pass)
//	convert       PackQuantize of a contiguous bf16 buffer: the separate
//	              pass a generator makes over bf16 it received
//	fused-dense   FusedQuantize of that contiguous buffer as a matrix of
//	              its own, whose blocks and rows are all whole (Block and
//	              Row scaling; a Tensor-scaled matrix is one block, which
//	              one team cannot stream at speed)
//	pack+convert  pack then convert: the convert-after pipeline
//
// Each operation is timed with events on one stream, Warmup times untimed
// then Iters times, and the median reported (pack+convert is the sum of
// the medians). It needs about 4.5*TotalBytes of device memory.
func Quantize(ctx *cuda.Context, opt QuantOptions) (res []QuantResult, err error) {
	if len(opt.RowBytes) == 0 {
		opt.RowBytes = []int{256, 4 << 10, 64 << 10}
	}
	opt.TotalBytes = cmp.Or(opt.TotalBytes, 1<<30)
	opt.Mode = cmp.Or(opt.Mode, fp8.Block)
	opt.Iters, opt.Warmup = cmp.Or(opt.Iters, 20), cmp.Or(opt.Warmup, 3)
	mem, err := cudamem.NewMemory(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, mem.Close()) }()
	q := &quantBench{ctx: ctx, mem: mem, opt: opt}
	defer q.free()
	if err := q.buffers(); err != nil {
		return nil, err
	}
	t, err := newEventTimer(ctx, mem.Stream, opt.Warmup, opt.Iters)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, t.close()) }()
	for _, row := range opt.RowBytes {
		r, err := q.row(t, row)
		if err != nil {
			return res, err
		}
		res = append(res, r...)
	}
	return res, nil
}

// quantBench is Quantize's buffers.
type quantBench struct {
	ctx                         *cuda.Context
	mem                         *cudamem.Memory
	opt                         QuantOptions
	bufs                        []cudamem.Buffer
	srcBuf, packed, other, e4m3 cudamem.Buffer
}

func (q *quantBench) get(sizes ...int) ([]cudamem.Buffer, error) {
	var out []cudamem.Buffer
	for _, n := range sizes {
		b, err := q.mem.Alloc(int64(n))
		if err != nil {
			return nil, err
		}
		q.bufs = append(q.bufs, b.(cudamem.Buffer))
		out = append(out, b.(cudamem.Buffer))
	}
	return out, nil
}

func (q *quantBench) free() {
	for _, b := range q.bufs {
		q.mem.Free(b)
	}
}

// buffers allocates the strided source, the packed buffer, a copy target
// and the E4M3 output, the first three filled with random normal bf16
// values (1 MiB of them, repeated).
func (q *quantBench) buffers() error {
	total := q.opt.TotalBytes
	big, err := q.get(2*total, total, total, total/2)
	if err != nil {
		return err
	}
	q.srcBuf, q.packed, q.other, q.e4m3 = big[0], big[1], big[2], big[3]
	pattern := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(pattern); i += 2 {
		binary.LittleEndian.PutUint16(pattern[i:], uint16(math.Float32bits(float32(r.NormFloat64()*0.02))>>16))
	}
	for _, b := range []cudamem.Buffer{q.srcBuf, q.packed, q.other} {
		for off := int64(0); off < b.N; off += int64(len(pattern)) {
			n := min(int64(len(pattern)), b.N-off)
			if err := q.ctx.CopyHtoD(b.Ptr+cuda.DevicePtr(off), pattern[:n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// scales writes win's scales as a reshard computes them: amaxes on the
// device, scales on the host.
func (q *quantBench) scales(g fp8.Grid, w cudamem.FP8Window, reg cudamem.FP8Region) error {
	win := w.Values
	if err := q.mem.Stream.Memset(win.Ptr, 0, int(win.N)); err != nil {
		return err
	}
	if err := q.mem.BlockAmax(g, w, reg); err != nil {
		return err
	}
	host := fp8.Window{Blocks: w.Blocks, Values: make([]float32, w.Blocks.Elems())}
	raw := make([]byte, win.N)
	if err := q.mem.Download(raw, win); err != nil {
		return err
	}
	for i := range host.Values {
		host.Values[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	if err := host.ToScales(); err != nil {
		return err
	}
	for i, v := range host.Values {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return q.mem.Upload(win, raw)
}

// row times every op at one row width.
func (q *quantBench) row(t *eventTimer, row int) ([]QuantResult, error) {
	total, mode, s, mem := q.opt.TotalBytes, q.opt.Mode, q.mem.Stream, q.mem
	if row <= 0 || row%2 != 0 || total%row != 0 {
		return nil, fmt.Errorf("perf: Quantize: row %d B does not divide %d into bf16 rows", row, total)
	}
	rows, cols := int64(total/row), int64(row/2)
	g, err := fp8.NewGrid([]int64{rows, 2 * cols}, mode)
	if err != nil {
		return nil, err
	}
	box := placement.Box{Lo: []int64{0, 0}, Hi: []int64{rows, cols}}
	blocks, _ := g.Blocks(box)
	gc, err := fp8.NewGrid([]int64{rows, cols}, mode)
	if err != nil {
		return nil, err
	}
	cblocks := gc.All()
	wins, err := q.get(int(4*blocks.Elems()), int(4*blocks.Elems()), int(4*cblocks.Elems()), int(4*blocks.Elems()), int(4*cblocks.Elems()))
	if err != nil {
		return nil, err
	}
	win, awin, cwin, fwin, dwin := wins[0], wins[1], wins[2], wins[3], wins[4]
	w := cudamem.FP8Window{Blocks: blocks, Values: win}
	desc := strided.Desc{Run: int64(row), Count: []int64{rows}, Stride: []int64{2 * int64(row)}}
	reg := cudamem.FP8Region{DType: dtype.BF16, Src: q.srcBuf, At: desc, Box: box}
	if err := q.scales(g, w, reg); err != nil {
		return nil, err
	}
	// The received bf16, contiguous: [rows, cols] of its own grid.
	if err := s.Memset(cwin.Ptr, 0x3c, int(cwin.N)); err != nil { // scales of about 0.0115
		return nil, err
	}
	creg := cudamem.FP8Region{DType: dtype.BF16, Src: q.packed, At: strided.Desc{Run: int64(total)}, Box: box}
	cw := cudamem.FP8Window{Blocks: cblocks, Values: cwin}
	ops := []struct {
		name string
		run  func() error
	}{
		{"copy", func() error { return s.CopyDtoD(q.other.Ptr, q.packed.Ptr, total) }},
		{"pack", func() error { return mem.Pack(q.packed, 0, q.srcBuf, desc) }},
		{"amax", func() error {
			if err := s.Memset(awin.Ptr, 0, int(awin.N)); err != nil {
				return err
			}
			return mem.BlockAmax(g, cudamem.FP8Window{Blocks: blocks, Values: awin}, reg)
		}},
		{"quant-pack", func() error { return mem.PackQuantize(g, q.e4m3, 0, reg, w) }},
		{"stage-2pass", func() error {
			if err := s.Memset(awin.Ptr, 0, int(awin.N)); err != nil {
				return err
			}
			if err := mem.BlockAmax(g, cudamem.FP8Window{Blocks: blocks, Values: awin}, reg); err != nil {
				return err
			}
			return mem.PackQuantize(g, q.e4m3, 0, reg, w)
		}},
		{"stage-2pass+host", func() error {
			if err := q.scales(g, w, reg); err != nil {
				return err
			}
			return mem.PackQuantize(g, q.e4m3, 0, reg, w)
		}},
		{"convert", func() error { return mem.PackQuantize(gc, q.e4m3, 0, creg, cw) }},
	}
	if g.WholeBlocks(box) == nil { // chosen from the layout, as a step would at prepare time
		ops = append(ops, struct {
			name string
			run  func() error
		}{"stage-fused", func() error {
			return mem.FusedQuantize(g, q.e4m3, 0, reg, cudamem.FP8Window{Blocks: blocks, Values: fwin})
		}})
	}
	if mode != fp8.Tensor {
		ops = append(ops, struct {
			name string
			run  func() error
		}{"fused-dense", func() error {
			return mem.FusedQuantize(gc, q.e4m3, 0, creg, cudamem.FP8Window{Blocks: cblocks, Values: dwin})
		}})
	}
	times := map[string]time.Duration{}
	for _, op := range ops {
		d, err := t.time(op.run)
		if err != nil {
			return nil, fmt.Errorf("perf: Quantize: %s, rows of %d B: %w", op.name, row, err)
		}
		times[op.name] = d
	}
	times["pack+convert"] = times["pack"] + times["convert"]
	if _, ok := times["stage-fused"]; ok {
		if err := q.sameStages(g, reg, w, cudamem.FP8Window{Blocks: blocks, Values: fwin}); err != nil {
			return nil, fmt.Errorf("perf: Quantize: rows of %d B: %w", row, err)
		}
	}
	var res []QuantResult
	for _, name := range []string{"copy", "pack", "amax", "quant-pack", "stage-2pass", "stage-2pass+host", "stage-fused", "convert", "pack+convert", "fused-dense"} {
		d, ok := times[name]
		if !ok {
			continue
		}
		res = append(res, QuantResult{RowBytes: row, Op: name, Bytes: int64(total), Median: d,
			GBps: float64(total) / d.Seconds() / 1e9, VsPack: times["pack"].Seconds() / d.Seconds()})
	}
	return res, nil
}

// sameStages checks that the fused stage wrote the bytes and scales the
// two-pass stage writes (the scales w holds came from BlockAmax).
func (q *quantBench) sameStages(g fp8.Grid, reg cudamem.FP8Region, w, fw cudamem.FP8Window) error {
	n := reg.Box.Elems()
	two, fused := make([]byte, n), make([]byte, n)
	sc2, scf := make([]byte, w.Values.N), make([]byte, fw.Values.N)
	if err := q.mem.PackQuantize(g, q.e4m3, 0, reg, w); err != nil {
		return err
	}
	if err := q.mem.Download(two, q.e4m3); err != nil {
		return err
	}
	if err := q.mem.FusedQuantize(g, q.e4m3, 0, reg, fw); err != nil {
		return err
	}
	if err := q.mem.Download(fused, q.e4m3); err != nil {
		return err
	}
	if err := q.mem.Download(sc2, w.Values); err != nil {
		return err
	}
	if err := q.mem.Download(scf, fw.Values); err != nil {
		return err
	}
	if i := firstDiff(two, fused); i >= 0 {
		return fmt.Errorf("the fused stage's E4M3 byte %d is %#02x, the two-pass stage's %#02x", i, fused[i], two[i])
	}
	if i := firstDiff(sc2, scf); i >= 0 {
		return fmt.Errorf("the fused stage's scales differ from the two-pass stage's at byte %d", i)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// FormatQuant renders results as a table, one line per row width and
// op.
func FormatQuant(res []QuantResult) string {
	k := newKernelTable(16, "bf16 bytes", "vs pack", 8)
	for _, r := range res {
		k.row(r.RowBytes, r.Op, r.Bytes, r.Median, r.GBps, r.VsPack)
	}
	return k.String()
}
