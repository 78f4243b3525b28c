package transport_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// HostMemory is the Memory of host buffers: Pack gathers a strided region
// into contiguous staging (what a send stages), Unpack scatters it back.
func ExampleHostMemory() {
	var mem transport.HostMemory
	part := transport.HostBuffer{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11} // a 3x4 part of bytes
	cols := strided.Desc{Offset: 1, Run: 2, Count: []int64{3}, Stride: []int64{4}}
	staging, _ := mem.Alloc(cols.Bytes())
	if err := mem.Pack(staging, 0, part, cols); err != nil {
		panic(err)
	}
	fmt.Println(staging)
	back, _ := mem.Alloc(12)
	if err := mem.Unpack(back, cols, staging, 0); err != nil {
		panic(err)
	}
	fmt.Println(back)
	// Output:
	// [1 2 5 6 9 10]
	// [0 1 2 0 0 5 6 0 0 9 10 0]
}
