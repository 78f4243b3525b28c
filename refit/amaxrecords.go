package refit

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
)

// The records of the amax exchange (Prepared.Run): every source rank sends,
// per converting tensor, the window of the partial amaxes of its replica's
// share of its part, or the first non-finite element it found there, or a
// failure of its quantizer.
const (
	recWindow    = 1
	recNonFinite = 2
	recFailure   = 3
)

// amaxRecord is one record of the exchange as a receiver reads it.
type amaxRecord struct {
	kind   byte
	tensor int
	rank   int
	window fp8.Window // recWindow
	flat   int64      // recNonFinite
	value  float64    // recNonFinite
	msg    string     // recFailure
}

func appendWindowRecord(b []byte, tensor int, w fp8.Window) []byte {
	b = append(b, recWindow)
	b = binary.LittleEndian.AppendUint32(b, uint32(tensor))
	b = append(b, byte(len(w.Blocks.Lo)))
	for d := range w.Blocks.Lo {
		b = binary.LittleEndian.AppendUint64(b, uint64(w.Blocks.Lo[d]))
		b = binary.LittleEndian.AppendUint64(b, uint64(w.Blocks.Hi[d]))
	}
	return w.AppendBits(b)
}

func appendNonFiniteRecord(b []byte, tensor int, flat int64, v float64) []byte {
	b = append(b, recNonFinite)
	b = binary.LittleEndian.AppendUint32(b, uint32(tensor))
	b = binary.LittleEndian.AppendUint64(b, uint64(flat))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func appendFailureRecord(b []byte, tensor int, msg string) []byte {
	b = append(b, recFailure)
	b = binary.LittleEndian.AppendUint32(b, uint32(tensor))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(msg)))
	return append(b, msg...)
}

// parseRecords reads one rank's blob of records; tensors is the call's
// tensor count and nd(t) tensor t's dims, to check what a peer sent.
func parseRecords(rank int, b []byte, tensors int, nd func(int) int) ([]amaxRecord, error) {
	var out []amaxRecord
	bad := func(what string) error {
		return fmt.Errorf("refit: rank %d sent a malformed FP8 amax record (%s)", rank, what)
	}
	for len(b) > 0 {
		if len(b) < 5 {
			return nil, bad("truncated header")
		}
		r := amaxRecord{kind: b[0], tensor: int(binary.LittleEndian.Uint32(b[1:])), rank: rank}
		b = b[5:]
		if r.tensor < 0 || r.tensor >= tensors {
			return nil, bad(fmt.Sprintf("tensor %d of %d", r.tensor, tensors))
		}
		switch r.kind {
		case recWindow:
			if len(b) < 1 {
				return nil, bad("truncated window")
			}
			n := int(b[0])
			b = b[1:]
			if n != nd(r.tensor) || len(b) < 16*n {
				return nil, bad("window dims")
			}
			r.window.Blocks = placement.Box{Lo: make([]int64, n), Hi: make([]int64, n)}
			count := int64(1)
			for d := range n {
				lo, hi := int64(binary.LittleEndian.Uint64(b[16*d:])), int64(binary.LittleEndian.Uint64(b[16*d+8:]))
				if lo < 0 || hi < lo || hi-lo > 1<<40 {
					return nil, bad("window box")
				}
				r.window.Blocks.Lo[d], r.window.Blocks.Hi[d] = lo, hi
				count *= hi - lo
				if count > 1<<34 {
					return nil, bad("window size")
				}
			}
			b = b[16*n:]
			if int64(len(b)) < 4*count {
				return nil, bad("truncated window values")
			}
			r.window.Values = make([]float32, count)
			if err := r.window.ReadBits(b[:4*count]); err != nil {
				return nil, bad(err.Error())
			}
			b = b[4*count:]
		case recNonFinite:
			if len(b) < 16 {
				return nil, bad("truncated non-finite element")
			}
			r.flat = int64(binary.LittleEndian.Uint64(b))
			r.value = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
			b = b[16:]
		case recFailure:
			if len(b) < 4 {
				return nil, bad("truncated failure")
			}
			n := int(binary.LittleEndian.Uint32(b))
			if n < 0 || len(b) < 4+n {
				return nil, bad("truncated failure text")
			}
			r.msg = string(b[4 : 4+n])
			b = b[4+n:]
		default:
			return nil, bad(fmt.Sprintf("kind %d", r.kind))
		}
		out = append(out, r)
	}
	return out, nil
}
