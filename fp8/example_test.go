package fp8_test

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// A 4x300 bf16 tensor quantized per 128x128 block by two source ranks that
// hold columns [0, 200) and [200, 300): the cut at column 200 splits the
// second block column, so both ranks hold part of it and combine their
// partial amaxes. A destination holding columns [100, 300) then gets
// bytes and scales equal to quantizing the whole tensor.
func Example() {
	shape := []int64{4, 300}
	whole := make([]byte, 2*4*300)
	for i := range 4 * 300 {
		v := float32(i%300) / 16 // column c holds about c/16 (bf16 keeps 8 bits): a block's amax is in its last column
		binary.LittleEndian.PutUint16(whole[2*i:], uint16(math.Float32bits(v)>>16))
	}
	g, _ := fp8.NewGrid(shape, fp8.Block)
	fmt.Println("scale tensor", g.ScaleShape())

	// Each source rank holds its columns dense and row-major.
	boxes := []placement.Box{{Lo: []int64{0, 0}, Hi: []int64{4, 200}}, {Lo: []int64{0, 200}, Hi: []int64{4, 300}}}
	local := make([][]byte, 2)
	windows := make([]fp8.Window, 2)
	for r, box := range boxes {
		local[r] = columns(whole, 300, box.Lo[1], box.Hi[1])
		windows[r], _ = g.WindowFor(box)
		_ = g.Amax(windows[r], fp8.Dense(dtype.BF16, local[r], box))
		fmt.Printf("rank %d holds blocks %v, partial amaxes %v\n", r, windows[r].Blocks, windows[r].Values)
	}
	// The exchange: rank 0 and rank 1 both touch block (0, 1).
	_ = windows[0].MaxWith(windows[1])
	_ = windows[1].MaxWith(windows[0])
	for r := range windows {
		_ = windows[r].ToScales()
	}
	fmt.Println("scales", windows[0].Values)

	// A destination wants columns [100, 300): rank 0 sends [100, 200) from
	// its buffer (rows of 100 elements at a pitch of 200), rank 1 all of its.
	send := placement.Box{Lo: []int64{0, 100}, Hi: []int64{4, 200}}
	at := strided.Desc{Offset: 2 * 100, Run: 2 * 100, Count: []int64{4}, Stride: []int64{2 * 200}}
	part0 := make([]byte, send.Elems())
	_ = g.Pack(part0, fp8.Region{DType: dtype.BF16, Data: local[0], At: at, Box: send}, windows[0])
	part1 := make([]byte, boxes[1].Elems())
	_ = g.Pack(part1, fp8.Dense(dtype.BF16, local[1], boxes[1]), windows[1])

	q, _ := fp8.Quantize(dtype.BF16, shape, fp8.Block, whole)
	same := true
	for row := range 4 {
		same = same && string(part0[row*100:(row+1)*100]) == string(q.Data[row*300+100:row*300+200])
		same = same && string(part1[row*100:(row+1)*100]) == string(q.Data[row*300+200:row*300+300])
	}
	fmt.Println("equal to the whole tensor's:", same, q.Scales)
	fmt.Printf("column 299 (18.625) is %#02x: %v * %v\n", q.Data[299], fp8.Decode(q.Data[299]), q.Scales[2])
	// Output:
	// scale tensor [1 3]
	// rank 0 holds blocks [0:1, 0:2), partial amaxes [7.9375 12.4375]
	// rank 1 holds blocks [0:1, 1:3), partial amaxes [15.9375 18.625]
	// scales [0.017717635 0.03557478]
	// equal to the whole tensor's: true [0.017717635 0.03557478 0.041573662]
	// column 299 (18.625) is 0x7e: 448 * 0.041573662
}

// columns returns columns [lo, hi) of a row-major bf16 matrix with k
// columns, dense.
func columns(m []byte, k, lo, hi int64) []byte {
	var out []byte
	for r := int64(0); r < int64(len(m))/(2*k); r++ {
		out = append(out, m[2*(r*k+lo):2*(r*k+hi)]...)
	}
	return out
}
