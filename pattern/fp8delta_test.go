package pattern

import (
	"testing"

	"github.com/m2n-dev/m2n/delta"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestFP8DeltaBytes counts, deterministically, what a delta sync into
// FP8 (128x128 block scales) sends of the tensor `refit run --delta
// --dst-dtype e4m3` moves (8192x4096 bf16, Change at 1% per step, seed 0):
// per step, the blocks whose scale moved, the codes that changed in the
// blocks whose scale did not and in those whose did, and the encoded
// bytes of the whole tensor's codes (one message) three ways: against the
// old codes, against the old codes with the moved blocks' changes left
// out (what the rest costs), and against the old codes rescaled for the
// new scales (fp8.Grid.Rescale: what delta mode sends). go test -run
// TestFP8DeltaBytes -v ./pattern/ prints the table; the test fails unless
// rescaling sends less than the old codes wherever a scale moved.
func TestFP8DeltaBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("quantizes a 32 Mi-element tensor eight times")
	}
	shape := []int64{8192, 4096}
	cols := shape[1]
	box := placement.Box{Lo: []int64{0, 0}, Hi: shape}
	data := floatsBox(dtype.BF16, shape, box, 0)
	g, err := fp8.NewGrid(shape, fp8.Block)
	if err != nil {
		t.Fatal(err)
	}
	all := strided.Desc{Run: box.Elems()}
	out := make([]byte, box.Elems()+1<<20)
	var enc delta.Encoder
	size := func(prev, cur []byte) int64 {
		n, err := enc.Encode(prev, cur, all, 1, out)
		if err != nil {
			t.Fatal(err)
		}
		return int64(n)
	}
	var prev fp8.Quantized
	for st := uint64(1); st <= 8; st++ {
		changeBox(shape, box, 2, 0, st, 0.01, data)
		q, err := fp8.Quantize(dtype.BF16, shape, fp8.Block, data)
		if err != nil {
			t.Fatal(err)
		}
		if st > 1 {
			moved, same, inMoved := 0, 0, 0
			for i := range q.Scales {
				if q.Scales[i] != prev.Scales[i] {
					moved++
				}
			}
			rest := append([]byte(nil), q.Data...) // the codes, with the moved blocks' left as they were
			for i := range q.Data {
				b := int64(i)/cols/fp8.BlockSize*(cols/fp8.BlockSize) + int64(i)%cols/fp8.BlockSize
				if q.Data[i] == prev.Data[i] {
					continue
				}
				if q.Scales[b] != prev.Scales[b] {
					inMoved++
					rest[i] = prev.Data[i]
				} else {
					same++
				}
			}
			rescaled := append([]byte(nil), prev.Data...)
			w := func(v []float32) fp8.Window {
				return fp8.Window{Blocks: placement.Box{Lo: []int64{0, 0}, Hi: g.ScaleShape()}, Values: v}
			}
			if _, err := g.Rescale(rescaled, all, box, w(prev.Scales), w(q.Scales)); err != nil {
				t.Fatal(err)
			}
			missed := 0 // codes of moved blocks the rescaled ones got wrong
			for i := range q.Data {
				if rescaled[i] != q.Data[i] {
					missed++
				}
			}
			old, without, now := size(prev.Data, q.Data), size(prev.Data, rest), size(rescaled, q.Data)
			pct := func(n int64) float64 { return 100 * float64(n) / float64(box.Elems()) }
			t.Logf("step %d: %d of %d blocks' scale moved; codes changed: %d in unmoved blocks, %d of %d in moved ones (%d differ from the rescaled codes); encoded: old codes %d B (%.2f%%), moved blocks left out %d B (%.2f%%), rescaled %d B (%.2f%%)",
				st, moved, len(q.Scales), same, inMoved, moved*fp8.BlockSize*fp8.BlockSize, missed-same, old, pct(old), without, pct(without), now, pct(now))
			if moved > 0 && now >= old {
				t.Errorf("step %d: rescaling sends %d bytes, the old codes %d", st, now, old)
			}
		}
		prev = q
	}
}
