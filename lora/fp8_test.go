package lora_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/lora"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// layoutOn is a rows x cols matrix of dtype dt on ranks 0..n-1 with pl.
func layoutOn(t *testing.T, rows, cols int64, dt dtype.DType, n int, pl placement.Placement) placement.Layout {
	t.Helper()
	m, err := mesh.Interval([]int{n}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := placement.NewLayout([]int64{rows, cols}, dt, m, []placement.Placement{pl})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestMergeFP8MatchesDenseReference merges three steps of adapters into an
// FP8 weight [256, 384] (block scales: 2 x 3 blocks; row scales) split by
// rows over two generator ranks, each holding whole blocks, and checks
// every E4M3 byte and every scale after each step against a dense
// reference written out here element by element: the base dequantized
// (Decode(q) x scale), plus the step's s x (B @ A) in float32 (k in
// order), then each block's amax, ScaleOf, QuantizeValue. The base is the
// first merge's: every step's weight depends only on it and the latest
// adapters. A part that cuts a block is refused, writing nothing.
func TestMergeFP8MatchesDenseReference(t *testing.T) {
	const rows, cols, rank, ranks = 256, 384, 4, 2
	const scale = 2.0
	for _, mode := range []fp8.Mode{fp8.Block, fp8.Row} {
		src := make([]byte, 2*rows*cols)
		for g := range int64(rows * cols) {
			binary.LittleEndian.PutUint16(src[2*g:], value("w", g, 0))
		}
		q0, err := fp8.Quantize(dtype.BF16, []int64{rows, cols}, mode, src)
		if err != nil {
			t.Fatal(err)
		}
		g := q0.Grid
		br, bc := g.BlockShape()
		sc := g.ScaleShape()
		wl := layoutOn(t, rows, cols, dtype.FP8E4M3, ranks, placement.Shard(0))
		al := layoutOn(t, rank, cols, dtype.BF16, ranks, placement.Replicate())
		bl := layoutOn(t, rows, rank, dtype.BF16, ranks, placement.Shard(0))
		// each rank's buffers: its rows of W (and their scales), all of A,
		// its rows of B
		wbuf, sbuf := make([][]byte, ranks), make([][]byte, ranks)
		for r := range ranks {
			box, _ := wl.RankBox(r)
			wbuf[r] = append([]byte(nil), q0.Data[box.Lo[0]*cols:box.Hi[0]*cols]...)
			blocks, _ := g.Blocks(box)
			for i := blocks.Lo[0]; i < blocks.Hi[0]; i++ {
				for j := blocks.Lo[1]; j < blocks.Hi[1]; j++ {
					sbuf[r] = binary.LittleEndian.AppendUint32(sbuf[r], math.Float32bits(q0.Scales[i*sc[1]+j]))
				}
			}
		}
		mgs := []*lora.Merger{lora.NewMerger(), lora.NewMerger()}
		for step := 1; step <= 3; step++ {
			A := func(k, j int64) uint16 { return value("a", k*cols+j, step) }
			B := func(i, k int64) uint16 { return value("b", i*rank+k, step) }
			for r := range ranks {
				box, _ := wl.RankBox(r)
				abuf := make([]byte, 2*rank*cols)
				for k := range int64(rank) {
					for j := range int64(cols) {
						binary.LittleEndian.PutUint16(abuf[2*(k*cols+j):], A(k, j))
					}
				}
				bbuf := make([]byte, 0, 2*box.Elems()/cols*rank)
				for i := box.Lo[0]; i < box.Hi[0]; i++ {
					for k := range int64(rank) {
						bbuf = binary.LittleEndian.AppendUint16(bbuf, B(i, k))
					}
				}
				w := lora.Matrix{Layout: wl, Rank: r, Buf: wbuf[r], Scales: sbuf[r], Mode: mode}
				if err := mgs[r].Merge("w", w, lora.Matrix{Layout: al, Rank: r, Buf: abuf}, lora.Matrix{Layout: bl, Rank: r, Buf: bbuf}, scale); err != nil {
					t.Fatal(err)
				}
			}
			// the dense reference over the whole matrix, from the base
			acc := make([]float32, rows*cols)
			for i := range int64(rows) {
				for j := range int64(cols) {
					x := fp8.Decode(q0.Data[i*cols+j]) * q0.Scales[(i/br)*sc[1]+j/bc]
					for k := range int64(rank) {
						x += float32(float32(scale*bf16(B(i, k))) * bf16(A(k, j)))
					}
					acc[i*cols+j] = x
				}
			}
			amax := make([]float32, sc[0]*sc[1])
			for i := range int64(rows) {
				for j := range int64(cols) {
					b := (i/br)*sc[1] + j/bc
					amax[b] = max(amax[b], float32(math.Abs(float64(acc[i*cols+j]))))
				}
			}
			for r := range ranks {
				box, _ := wl.RankBox(r)
				for i := box.Lo[0]; i < box.Hi[0]; i++ {
					for j := range int64(cols) {
						s := fp8.ScaleOf(amax[(i/br)*sc[1]+j/bc])
						want, got := fp8.QuantizeValue(acc[i*cols+j], s), wbuf[r][(i-box.Lo[0])*cols+j]
						if want != got {
							t.Fatalf("%v, step %d, rank %d: element [%d %d] is %#02x, want %#02x", mode, step, r, i, j, got, want)
						}
					}
				}
				blocks, _ := g.Blocks(box)
				n := 0
				for i := blocks.Lo[0]; i < blocks.Hi[0]; i++ {
					for j := blocks.Lo[1]; j < blocks.Hi[1]; j++ {
						got := math.Float32frombits(binary.LittleEndian.Uint32(sbuf[r][4*n:]))
						if want := fp8.ScaleOf(amax[i*sc[1]+j]); got != want {
							t.Fatalf("%v, step %d, rank %d: scale of block [%d %d] is %v, want %v", mode, step, r, i, j, got, want)
						}
						n++
					}
				}
			}
		}
	}
	// four ranks of 64 rows each cut the 128-row blocks: refused, nothing written
	wl := layoutOn(t, 256, 384, dtype.FP8E4M3, 4, placement.Shard(0))
	al := layoutOn(t, 4, 384, dtype.BF16, 4, placement.Replicate())
	bl := layoutOn(t, 256, 4, dtype.BF16, 4, placement.Shard(0))
	w := make([]byte, 64*384)
	err := lora.NewMerger().Merge("w", lora.Matrix{Layout: wl, Rank: 1, Buf: w, Scales: make([]byte, 4*3), Mode: fp8.Block},
		lora.Matrix{Layout: al, Rank: 1, Buf: make([]byte, 2*4*384)}, lora.Matrix{Layout: bl, Rank: 1, Buf: make([]byte, 2*64*4)}, 1)
	if err == nil || !strings.Contains(err.Error(), "cuts scale blocks") {
		t.Errorf("a part cutting FP8 blocks: %v", err)
	}
}
