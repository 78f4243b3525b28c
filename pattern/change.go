package pattern

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/m2n-dev/m2n/placement"
)

// Change changes the elements of tensor seed that update number step
// (from 1) changes, in rank's part of l in buf (through the view v): a
// fraction frac of the tensor's elements, spread uniformly at random, the
// same ones in every layout and on every rank (they are drawn over the
// tensor's global linear indices from a generator seeded with seed and
// step alone). Each changed element's lowest byte (for bf16 and f32 the
// low mantissa bits) is XORed with a nonzero mask of its index, so that
// finite values stay finite and every drawn element does change. frac 0
// changes nothing, 1 every element. Applied to a source's weights after
// every step and to a copy of a destination's expected part, it gives
// both sides of a delta sync's check: CheckChanged.
func Change(l placement.Layout, rank int, seed, step uint64, frac float64, buf []byte, v placement.View) error {
	if !(frac >= 0 && frac <= 1) {
		return fmt.Errorf("pattern: change fraction %v outside [0, 1]", frac)
	}
	if frac == 0 {
		return nil
	}
	elem := l.ElemSize()
	d := draw{frac: frac, rng: rand.New(rand.NewPCG(seed, step)), next: -1}
	d.advance()
	mix := seed ^ step*0x9E3779B97F4A7C15
	return rows(l, rank, buf, v, func(g, off, n int64) { d.change(mix, elem, g, off, n, buf) })
}

// change changes the drawn elements of a row of n elements from global
// index g at buf[off:] (rows come in increasing g).
func (d *draw) change(mix uint64, elem, g, off, n int64, buf []byte) {
	for d.next >= 0 && d.next < g {
		d.advance()
	}
	for d.next >= 0 && d.next < g+n {
		buf[off+(d.next-g)*elem] ^= Byte(d.next, 0, mix)&0x7f | 1
		d.advance()
	}
}

// changeBox applies update step of Change (tensor seed, fraction frac)
// to data, the elements of box of a tensor of shape, dense and
// row-major.
func changeBox(shape []int64, box placement.Box, elem int64, seed, step uint64, frac float64, data []byte) {
	if frac == 0 || box.Empty() {
		return
	}
	d := draw{frac: frac, rng: rand.New(rand.NewPCG(seed, step)), next: -1}
	d.advance()
	mix := seed ^ step*0x9E3779B97F4A7C15
	nd := len(shape)
	n, pos := box.Hi[nd-1]-box.Lo[nd-1], int64(0)
	eachRow(box, shape, func(g int64, _ []int64) {
		d.change(mix, elem, g, pos, n, data)
		pos += n * elem
	})
}

// draw walks the drawn global indices in increasing order: the gaps
// between them are geometric, so that each index is drawn with
// probability frac, independently.
type draw struct {
	frac float64
	rng  *rand.Rand
	next int64 // the current drawn index; -1 before the first, or once past math.MaxInt64
}

func (d *draw) advance() {
	if d.frac >= 1 {
		d.next++
		return
	}
	gap := math.Floor(math.Log(1-d.rng.Float64()) / math.Log1p(-d.frac))
	if gap >= float64(math.MaxInt64-d.next-1) {
		d.next = -2 // nothing more
		return
	}
	d.next += int64(gap) + 1
}

// CheckChanged compares rank's part of l in buf (through the view v) with
// the pattern of tensor seed after updates 1 to steps of Change, each of
// fraction frac, and returns a *MismatchError naming the first wrong
// element, or nil. Without updates it is Check, which builds the pattern
// a row at a time instead of a copy of the whole part (a 1 GiB part
// checked here took the job past its progress bound: TestCheckBoundedByProgress).
func CheckChanged(l placement.Layout, rank int, seed, steps uint64, frac float64, buf []byte, v placement.View) error {
	if steps == 0 {
		return Check(l, rank, seed, buf, v)
	}
	return checkChanged(l, rank, seed, steps, frac, buf, v, Fill)
}

// CheckFloatsChanged is CheckChanged of a part that FillFloats filled
// (without updates, CheckFloats).
func CheckFloatsChanged(l placement.Layout, rank int, seed, steps uint64, frac float64, buf []byte, v placement.View) error {
	if steps == 0 {
		return CheckFloats(l, rank, seed, buf, v)
	}
	return checkChanged(l, rank, seed, steps, frac, buf, v, FillFloats)
}

func checkChanged(l placement.Layout, rank int, seed, steps uint64, frac float64, buf []byte, v placement.View,
	fill func(placement.Layout, int, uint64, []byte, placement.View) error) error {
	want := bytes.Clone(buf)
	if err := fill(l, rank, seed, want, v); err != nil {
		return err
	}
	for s := uint64(1); s <= steps; s++ {
		if err := Change(l, rank, seed, s, frac, want, v); err != nil {
			return err
		}
	}
	var first *MismatchError
	elem := l.ElemSize()
	err := rows(l, rank, buf, v, func(g, off, n int64) {
		for i := int64(0); i < n; i++ {
			a, b := buf[off+i*elem:off+(i+1)*elem], want[off+i*elem:off+(i+1)*elem]
			if bytes.Equal(a, b) {
				continue
			}
			if first == nil {
				first = &MismatchError{Rank: rank, Index: unravel(l.Shape(), g+i), Want: bytes.Clone(b), Got: bytes.Clone(a)}
			}
			first.Wrong++
		}
	})
	if err != nil || first == nil {
		return err
	}
	return first
}
