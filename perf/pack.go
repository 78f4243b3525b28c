package perf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/strided"
)

// PackOptions configures PackUnpack. Zero fields take the defaults.
type PackOptions struct {
	RowBytes   []int // run widths; default 256 B, 4 KiB, 64 KiB
	TotalBytes int   // bytes moved per operation; default 1 GiB
	Iters      int   // timed iterations, the median is reported; default 20
	Warmup     int   // untimed iterations first; default 3
}

// PackResult is one operation at one row width.
type PackResult struct {
	RowBytes int
	Op       string // "copy" (plain device-to-device), "pack", "unpack", "memcpy2d"
	Bytes    int64
	Median   time.Duration
	GBps     float64 // Bytes / Median, decimal GB/s (bytes copied, counted once)
	VsCopy   float64 // GBps over the plain copy's GBps at the same size
}

// PackUnpack measures cuda.Pack and cuda.Unpack against a plain device-to-device
// copy of the same number of bytes (cuMemcpyDtoDAsync), and cuMemcpy2DAsync
// doing the pack, for each row width: the strided side has TotalBytes in
// rows of RowBytes, each row 2*RowBytes after the previous (source pitch
// twice the row). Each operation is timed with events on one stream, Warmup
// times untimed then Iters times, and the median reported. It needs
// 4*TotalBytes of device memory.
func PackUnpack(ctx *cuda.Context, opt PackOptions) (res []PackResult, err error) {
	if len(opt.RowBytes) == 0 {
		opt.RowBytes = []int{256, 4 << 10, 64 << 10}
	}
	if opt.TotalBytes == 0 {
		opt.TotalBytes = 1 << 30
	}
	if opt.Iters == 0 {
		opt.Iters = 20
	}
	if opt.Warmup == 0 {
		opt.Warmup = 3
	}
	total := opt.TotalBytes
	free := func(p cuda.DevicePtr) { err = errors.Join(err, ctx.Free(p)) }
	srcBuf, err := ctx.Alloc(2 * total)
	if err != nil {
		return nil, err
	}
	defer free(srcBuf)
	packed, err := ctx.Alloc(total)
	if err != nil {
		return nil, err
	}
	defer free(packed)
	other, err := ctx.Alloc(total)
	if err != nil {
		return nil, err
	}
	defer free(other)
	for _, p := range []cuda.DevicePtr{srcBuf, packed, other} {
		if err := ctx.Memset(p, 0x5a, total); err != nil {
			return nil, err
		}
	}
	s, err := ctx.NewStream()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.Destroy()) }()
	t, err := newEventTimer(ctx, s, opt.Warmup, opt.Iters)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, t.close()) }()
	timeOp := t.time

	for _, row := range opt.RowBytes {
		if row <= 0 || total%row != 0 {
			return res, fmt.Errorf("perf: PackUnpack: row %d does not divide %d", row, total)
		}
		rows := total / row
		desc := strided.Desc{Run: int64(row), Count: []int64{int64(rows)}, Stride: []int64{2 * int64(row)}}
		ops := []struct {
			name string
			run  func() error
		}{
			{"copy", func() error { return s.CopyDtoD(other, packed, total) }},
			{"pack", func() error { return cuda.Pack(s, packed, srcBuf, desc) }},
			{"unpack", func() error { return cuda.Unpack(s, srcBuf, desc, packed) }},
			{"memcpy2d", func() error {
				return cuda.Memcpy2DAsync(s, packed, srcBuf, desc)
			}},
		}
		var copyGBps float64
		for _, op := range ops {
			d, err := timeOp(op.run)
			if err != nil {
				return res, fmt.Errorf("perf: PackUnpack: %s, rows of %d B: %w", op.name, row, err)
			}
			r := PackResult{RowBytes: row, Op: op.name, Bytes: int64(total), Median: d,
				GBps: float64(total) / d.Seconds() / 1e9}
			if op.name == "copy" {
				copyGBps = r.GBps
			}
			r.VsCopy = r.GBps / copyGBps
			res = append(res, r)
		}
	}
	return res, nil
}

// FormatPack renders res as a table with a header line and one line per result,
// in the order given: the row width, the op, the bytes moved, the median
// time (to 0.1 µs), the bandwidth in decimal GB/s and the bandwidth as a
// percentage of the plain copy's at the same width.
func FormatPack(res []PackResult) string {
	k := newKernelTable(8, "bytes", "vs copy", 7)
	for _, r := range res {
		k.row(r.RowBytes, r.Op, r.Bytes, r.Median, r.GBps, r.VsCopy)
	}
	return k.String()
}

// kernelTable is the text of a kernel benchmark: per row width and
// operation the bytes, the median time, the rate and the rate against a
// reference, in columns opWidth and vsWidth wide for the operation and the
// ratio.
type kernelTable struct {
	b                strings.Builder
	opWidth, vsWidth int
}

func newKernelTable(opWidth int, bytesHead, vsHead string, vsWidth int) *kernelTable {
	k := &kernelTable{opWidth: opWidth, vsWidth: vsWidth}
	fmt.Fprintf(&k.b, "%8s  %-*s  %10s  %10s  %9s  %*s\n", "row", opWidth, "op", bytesHead, "median", "GB/s", vsWidth, vsHead)
	return k
}

func (k *kernelTable) row(rowBytes int, op string, bytes int64, median time.Duration, gbps, vs float64) {
	fmt.Fprintf(&k.b, "%8d  %-*s  %10d  %10s  %9.1f  %*.1f%%\n",
		rowBytes, k.opWidth, op, bytes, median.Round(time.Microsecond/10), gbps, k.vsWidth-1, 100*vs)
}

func (k *kernelTable) String() string { return k.b.String() }

// eventTimer times operations on a stream with a pair of events: warmup
// times untimed, then iters times, the median returned.
type eventTimer struct {
	s             *cuda.Stream
	start, end    *cuda.Event
	warmup, iters int
}

func newEventTimer(ctx *cuda.Context, s *cuda.Stream, warmup, iters int) (*eventTimer, error) {
	t := &eventTimer{s: s, warmup: warmup, iters: iters}
	var err error
	if t.start, err = ctx.NewEvent(true); err != nil {
		return nil, err
	}
	if t.end, err = ctx.NewEvent(true); err != nil {
		return nil, errors.Join(err, t.start.Destroy())
	}
	return t, nil
}

func (t *eventTimer) close() error { return errors.Join(t.start.Destroy(), t.end.Destroy()) }

// time returns op's median time.
func (t *eventTimer) time(op func() error) (time.Duration, error) {
	var ts []time.Duration
	for i := range t.warmup + t.iters {
		if err := t.start.Record(t.s); err != nil {
			return 0, err
		}
		if err := op(); err != nil {
			return 0, err
		}
		if err := t.end.Record(t.s); err != nil {
			return 0, err
		}
		if err := t.end.Synchronize(); err != nil {
			return 0, err
		}
		d, err := cuda.ElapsedTime(t.start, t.end)
		if err != nil {
			return 0, err
		}
		if i >= t.warmup {
			ts = append(ts, d)
		}
	}
	slices.Sort(ts)
	return ts[len(ts)/2], nil
}
