package fp8

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// A window's values travel (the amax exchange) and land in device memory
// (scales) as little-endian float32 bits, 4 bytes a block. A step of a
// model with row scales moves millions of them, so on a little-endian
// host these copy the values' memory as it is.

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// AppendBits appends w's values to b as little-endian float32 bits.
func (w Window) AppendBits(b []byte) []byte {
	if len(w.Values) == 0 {
		return b
	}
	if littleEndian {
		return append(b, unsafe.Slice((*byte)(unsafe.Pointer(&w.Values[0])), 4*len(w.Values))...)
	}
	for _, v := range w.Values {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// ReadBits sets w's values from b, little-endian float32 bits, 4 bytes
// for each of w's values.
func (w Window) ReadBits(b []byte) error {
	if len(b) != 4*len(w.Values) {
		return fmt.Errorf("fp8: %d bytes of values for a window of %d blocks", len(b), len(w.Values))
	}
	if len(w.Values) == 0 {
		return nil
	}
	if littleEndian {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&w.Values[0])), len(b)), b)
		return nil
	}
	for i := range w.Values {
		w.Values[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}
