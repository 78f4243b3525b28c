package perf

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
)

// small times n 64x64 bf16 tensors in one call.
func (b *replay) small(n int) ([]replayRow, error) {
	l, err := b.layout("64x64")
	if err != nil {
		return nil, err
	}
	// the host driver makes a launch per tensor: a tenth of the calls for
	// a call of 1000.
	c := &benchCase{name: fmt.Sprintf("%d x 64x64 bf16", n), launch: true, iters: max(b.opt.Iters/n, min(b.opt.Iters, 10), b.opt.Iters/10)}
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
	if c.boundAt, err = b.timeCopy(bd, bs, c.bytes, b.opt.Iters, true); err != nil {
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
func (b *replay) expert() ([]replayRow, error) {
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
	copySec, err := b.timeCopy(dst, src, n, b.opt.BigIters, true)
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
	dense := &benchCase{name: "expert " + shape + " bf16", iters: b.opt.BigIters, bytes: n, bound: bound, boundAt: copySec, goal: goal,
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
	strided := &benchCase{name: "expert, padded destination rows", iters: b.opt.BigIters, bytes: n, bound: bound, boundAt: copySec,
		goal:  func(refit.DriverKind, float64) (string, string) { return "", "" },
		specs: []refit.Spec{{Name: "experts.gate_up_proj", Src: l, Dst: l, Views: program.TensorViews{Dst: v}}},
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
func (b *replay) fillBig(l placement.Layout, buf transport.Buffer) error {
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
			defer recovered()
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
func (b *replay) checkBig(l placement.Layout, buf transport.Buffer, v placement.View) error {
	if b.opt.Check {
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
