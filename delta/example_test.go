package delta_test

import (
	"encoding/binary"
	"fmt"

	"github.com/m2n-dev/m2n/delta"
	"github.com/m2n-dev/m2n/strided"
)

// A source holds a 4x1024 bf16 part and sends its columns [512, 1024) to
// a destination that holds them dense. Step 1 is the full sync (no prev);
// step 2 changes 3 elements and sends only them.
func Example() {
	const rows, cols, half = 4, 1024, 512
	src := strided.DescribeInto([]int64{rows, cols}, []int64{0, half}, []int64{rows, half}, 2, nil)
	dst := strided.Desc{Run: rows * half * 2} // the destination's whole buffer
	fmt.Println("source region", src, "destination region", dst)

	cur := make([]byte, rows*cols*2)
	prev := make([]byte, len(cur)) // what the destination holds: 1x the part's bytes
	gen := make([]byte, rows*half*2)
	max, _ := delta.MaxEncodedLen(src, 2)
	msg := make([]byte, max) // the receive a destination posts, too
	var e delta.Encoder

	// Step 1: full sync, then prev becomes what was sent.
	n, _ := e.Encode(nil, cur, src, 2, msg)
	_ = delta.Apply(gen, dst, 2, msg[:n])
	_ = delta.Commit(prev, cur, src, 2)
	fmt.Printf("step 1: %d bytes for %d of data\n", n, rows*half*2)

	// Step 2: three bf16 weights change (one outside the region).
	for _, at := range [][2]int{{0, 600}, {3, 1023}, {1, 5}} {
		binary.LittleEndian.PutUint16(cur[2*(at[0]*cols+at[1]):], 0x3F80) // 1.0
	}
	n, _ = e.Encode(prev, cur, src, 2, msg)
	st := e.Stats()
	fmt.Printf("step 2: %d bytes: %d blocks, %d skipped, %d lists, %d values\n", n, st.Blocks, st.Skipped, st.Lists, st.Values)
	l, _ := delta.EncodedLen(msg) // what the receiver learns from the header
	if err := delta.Apply(gen, dst, 2, msg[:l]); err != nil {
		fmt.Println(err)
	}
	_ = delta.Apply(prev, src, 2, msg[:n]) // commit: prev follows the destination
	fmt.Printf("destination (0, 600) = %#x, (3, 1023) = %#x\n",
		binary.LittleEndian.Uint16(gen[2*(0*half+88):]), binary.LittleEndian.Uint16(gen[2*(3*half+511):]))

	// A damaged message is refused whole, naming the block.
	msg[delta.HeaderLen] = 9 // the first op's tag
	fmt.Println(delta.Apply(gen, dst, 2, msg[:n]))
	// Output:
	// source region @1024 run 1024 x [4/2048] destination region @0 run 4096
	// step 1: 4125 bytes for 4096 of data
	// step 2: 39 bytes: 8 blocks, 6 skipped, 2 lists, 2 values
	// destination (0, 600) = 0x3f80, (3, 1023) = 0x3f80
	// delta: corrupt encoding at byte 24, block 0 of 8: unknown op 9
}
