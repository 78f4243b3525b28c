package delta

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/strided"
)

// benchElems is the benchmarks' message: 8 Mi bf16 elements, 16 MiB,
// larger than the caches.
const benchElems = 8 << 20

type benchCase struct {
	name      string
	d         strided.Desc
	dens      float64
	clustered bool
}

func benchCases() []benchCase {
	var cs []benchCase
	flat := strided.Desc{Run: 2 * benchElems}
	for _, dens := range densities {
		cs = append(cs, benchCase{fmt.Sprintf("uniform/d=%g", dens), flat, dens, false})
	}
	for _, dens := range []float64{0.01, 0.1} {
		cs = append(cs, benchCase{fmt.Sprintf("clustered/d=%g", dens), flat, dens, true})
	}
	// runs of 1 KiB every 2 KiB in 2 outer dims: a column half of a
	// [8192, 1024] bf16 part.
	col := strided.Desc{Run: 1024, Count: []int64{64, 128}, Stride: []int64{128 * 2048, 2048}}
	cs = append(cs, benchCase{"strided/d=0.01", col, 0.01, false})
	return cs
}

// setup returns prev and cur buffers of the case's extent and an output
// buffer of MaxEncodedLen.
func (c benchCase) setup() (prev, cur, out []byte) {
	if s, ok := setups[c.name]; ok {
		return s[0], s[1], s[2]
	}
	r := rand.New(rand.NewPCG(9, 9))
	prev = randBytes(r, int(c.d.Extent()))
	cur = change(r, prev, c.d, 2, picks(r, c.d.Bytes()/2, c.dens, c.clustered))
	max, _ := MaxEncodedLen(c.d, 2)
	out = make([]byte, max)
	setups[c.name] = [3][]byte{prev, cur, out}
	return prev, cur, out
}

// setups keeps each case's buffers from one benchmark run to the next.
var setups = map[string][3][]byte{}

// cpuMeter reports, beside the wall-clock MB/s, the MB/s of the process's
// CPU time (user and system) over the timed loop: the machine these run on
// is shared, and CPU time is what a loaded core does not inflate.
type cpuMeter struct{ start time.Duration }

func (m *cpuMeter) reset(b *testing.B) {
	b.ResetTimer()
	m.start = cpuTime()
}

func (m *cpuMeter) report(b *testing.B, bytes int64) {
	b.StopTimer()
	if d := cpuTime() - m.start; d > 0 {
		b.ReportMetric(float64(bytes)*float64(b.N)/d.Seconds()/1e6, "cpuMB/s")
	}
}

// BenchmarkEncode encodes a bf16 message at each density; MB/s counts the
// message's dense bytes, and enc% is the encoded share of them.
func BenchmarkEncode(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(c.name, func(b *testing.B) {
			prev, cur, out := c.setup()
			var e Encoder
			b.SetBytes(c.d.Bytes())
			var m cpuMeter
			m.reset(b)
			var n int
			for range b.N {
				n, _ = e.Encode(prev, cur, c.d, 2, out)
			}
			m.report(b, c.d.Bytes())
			b.ReportMetric(100*float64(n)/float64(c.d.Bytes()), "enc%")
		})
	}
}

// BenchmarkEncodeUpdatePrev encodes as the runtime does without Atomic
// (Encoder.UpdatePrev: prev takes the changes as they are encoded), each
// iteration the other way round (cur against a copy of prev, then prev
// against it), so that every iteration encodes the case's density.
func BenchmarkEncodeUpdatePrev(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(c.name, func(b *testing.B) {
			prev, cur, out := c.setup()
			held := bytes.Clone(prev)
			e := Encoder{UpdatePrev: true}
			b.SetBytes(c.d.Bytes())
			var m cpuMeter
			m.reset(b)
			for i := range b.N {
				next := cur
				if i%2 == 1 {
					next = prev
				}
				if _, err := e.Encode(held, next, c.d, 2, out); err != nil {
					b.Fatal(err)
				}
			}
			m.report(b, c.d.Bytes())
			if want := cur; b.N%2 == 0 {
				want = prev
				if !bytes.Equal(held, want) {
					b.Fatal("prev does not hold what was encoded")
				}
			} else if !bytes.Equal(held, want) {
				b.Fatal("prev does not hold what was encoded")
			}
		})
	}
}

// BenchmarkApply applies each message to a destination of the same
// layout holding the previous version (every iteration writes the same
// values); MB/s counts the message's dense bytes.
func BenchmarkApply(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(c.name, func(b *testing.B) {
			prev, cur, out := c.setup()
			var e Encoder
			n, _ := e.Encode(prev, cur, c.d, 2, out)
			dst := bytes.Clone(prev)
			b.SetBytes(c.d.Bytes())
			var m cpuMeter
			m.reset(b)
			for range b.N {
				if err := Apply(dst, c.d, 2, out[:n]); err != nil {
					b.Fatal(err)
				}
			}
			m.report(b, c.d.Bytes())
		})
	}
}

// BenchmarkBaseline: a plain copy of the message's 16 MiB (what a dense
// pack or unpack costs), a compare of prev and cur (the floor of finding
// what changed), and CRC-32C over cur (the scan a per-block digest in
// place of prev's copy would pay each step).
func BenchmarkBaseline(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	src := randBytes(r, 2*benchElems)
	dst := bytes.Clone(src)
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		var m cpuMeter
		m.reset(b)
		for range b.N {
			copy(dst, src)
		}
		m.report(b, int64(len(src)))
	})
	b.Run("compare", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		var m cpuMeter
		m.reset(b)
		for range b.N {
			if !bytes.Equal(dst, src) {
				b.Fatal("differ")
			}
		}
		m.report(b, int64(len(src)))
	})
	tab := crc32.MakeTable(crc32.Castagnoli)
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		var m cpuMeter
		m.reset(b)
		for range b.N {
			for i := 0; i < len(src); i += 4096 {
				_ = crc32.Checksum(src[i:i+4096], tab)
			}
		}
		m.report(b, int64(len(src)))
	})
}
