package strided_test

import (
	"fmt"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// Rows 1 and 2, columns 1 to 3, of a rank's dense 4x5 float32 part: two
// runs of 12 bytes, a row (20 bytes) apart.
func ExampleDescribe() {
	local := placement.Box{Lo: []int64{0, 0}, Hi: []int64{4, 5}}
	sub := placement.Box{Lo: []int64{1, 1}, Hi: []int64{3, 4}}
	d := strided.Describe(local, sub, 4)
	fmt.Println(d, d.Bytes(), "bytes")
	d.ForEachRun(func(off int64) { fmt.Println("run at byte", off) })
	// Output:
	// @24 run 12 x [2/20] 24 bytes
	// run at byte 24
	// run at byte 44
}
