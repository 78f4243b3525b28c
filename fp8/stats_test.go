package fp8

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestStatsAndScaleBytes: Stats counts the saturated (+-448: 0x7E, 0xFE)
// and zero (+-0) bytes and spans the scales; ScaleBytes is the scales as
// little-endian float32.
func TestStatsAndScaleBytes(t *testing.T) {
	q := Quantized{Data: []byte{0x7E, 0xFE, 0x00, 0x80, 0x38, 0x7E}, Scales: []float32{0.5, 2, 0.25}}
	sat, zeros, lo, hi := q.Stats()
	if sat != 3 || zeros != 2 || lo != 0.25 || hi != 2 {
		t.Errorf("Stats = %d saturated, %d zeros, scales %g to %g; want 3, 2, 0.25 to 2", sat, zeros, lo, hi)
	}
	b := q.ScaleBytes()
	if len(b) != 12 {
		t.Fatalf("%d scale bytes, want 12", len(b))
	}
	for i, s := range q.Scales {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != s {
			t.Errorf("scale %d reads back %g, want %g", i, got, s)
		}
	}
	if sat, zeros, lo, hi := (Quantized{}).Stats(); sat != 0 || zeros != 0 || lo != 0 || hi != 0 {
		t.Errorf("an empty tensor has stats %d %d %g %g", sat, zeros, lo, hi)
	}
}
