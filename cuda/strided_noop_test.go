package cuda

import (
	"testing"

	"github.com/m2n-dev/m2n/strided"
)

// TestEmptyIsNoOp: describing no bytes returns before touching the stream or
// the driver, so it works with a nil stream and no GPU.
func TestEmptyIsNoOp(t *testing.T) {
	empty := strided.Desc{Offset: 12, Run: 8, Count: []int64{3, 0}, Stride: []int64{100, 8}}
	if err := Pack(nil, 0, 0, empty); err != nil {
		t.Error(err)
	}
	if err := Unpack(nil, 0, empty, 0); err != nil {
		t.Error(err)
	}
	if err := StridedCopy(nil, 0, strided.Desc{}, 0, empty); err != nil {
		t.Error(err)
	}
	if err := Pack(nil, 0, 0, strided.Desc{Run: -1}); err == nil {
		t.Error("bad descriptor accepted")
	}
}
