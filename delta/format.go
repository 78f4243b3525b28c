package delta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/strided"
)

// BlockElems is the number of elements in a block: the unit an encoding
// chooses skip, list, bitmap or dense for. Blocks cut the message's
// elements in the order of its descriptor's runs (row-major order of the
// box), whatever the runs, so the source's and the destination's
// descriptors may differ. The last block may be shorter.
const BlockElems = 256

// HeaderLen is the size of an encoding's header.
const HeaderLen = 24

// opLen is the size of a skip or dense op: its tag and a uint32 count of
// blocks.
const opLen = 5

// maxOpBlocks is the most blocks one skip or dense op covers (a variable
// so that tests can lower it).
var maxOpBlocks int64 = math.MaxUint32

const (
	magic   = "M2ND"
	version = 1
	logBE   = 8 // log2(BlockElems)
)

// Op tags. 0 is not a tag, so that a zeroed buffer is not an encoding.
const (
	tagSkip   = 1 // uint32 k: the next k blocks are unchanged
	tagDense  = 2 // uint32 k: the next k blocks, every element, in order
	tagList   = 3 // uint8 c-1, c uint8 indices (increasing), c values: one block
	tagBitmap = 4 // ceil(n/8) bytes of bitmap (bit i of byte i/8: element i), one value per set bit: one block
)

// ErrInvalid is wrapped by every error about an argument: an element size
// other than 1, 2 or 4, a descriptor that is malformed, does not fit its
// buffer or cuts an element, or an output buffer shorter than
// MaxEncodedLen.
var ErrInvalid = errors.New("delta: invalid argument")

// ErrCorrupt is wrapped by every *CorruptError.
var ErrCorrupt = errors.New("delta: corrupt encoding")

// CorruptError says where an encoding is malformed or truncated: the byte
// of the encoding and the block being decoded (-1 for the header).
type CorruptError struct {
	At     int64 // byte offset in the encoding
	Block  int64 // block index, -1 for the header
	Blocks int64 // blocks in the message
	Reason string
}

func (e *CorruptError) Error() string {
	if e.Block < 0 {
		return fmt.Sprintf("delta: corrupt encoding: header: %s", e.Reason)
	}
	return fmt.Sprintf("delta: corrupt encoding at byte %d, block %d of %d: %s", e.At, e.Block, e.Blocks, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// message is what both sides derive from a descriptor and an element size.
type message struct {
	r      strided.Desc
	elem   int
	elems  int64 // elements in the message
	total  int64 // bytes in the message
	blocks int64
	maxLen int64 // MaxEncodedLen
}

// newMessage validates r and elem against a buffer of size bytes and
// derives the message's sizes with checked arithmetic.
func newMessage(r strided.Desc, elem int, size int) (message, error) {
	if elem != 1 && elem != 2 && elem != 4 {
		return message{}, fmt.Errorf("%w: element size %d: must be 1, 2 or 4", ErrInvalid, elem)
	}
	if err := r.Validate(); err != nil {
		return message{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	total, err := r.CheckedBytes()
	if err != nil {
		return message{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if total > 0 && r.Run%int64(elem) != 0 {
		return message{}, fmt.Errorf("%w: descriptor %v: run of %d bytes cuts a %d-byte element", ErrInvalid, r, r.Run, elem)
	}
	if size >= 0 {
		if err := r.Fits(int64(size)); err != nil {
			return message{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	m := message{r: r, elem: elem, elems: total / int64(elem), total: total}
	m.blocks = m.elems/BlockElems + min(m.elems%BlockElems, 1)
	ops := m.blocks/maxOpBlocks + min(m.blocks%maxOpBlocks, 1)
	l, ok := checked.Mul(ops, opLen)
	if ok {
		l, ok = checked.Add(l, HeaderLen)
	}
	if ok {
		l, ok = checked.Add(l, total)
	}
	if !ok || l > math.MaxInt {
		return message{}, fmt.Errorf("%w: descriptor %v: encoding bound overflows", ErrInvalid, r)
	}
	m.maxLen = l
	return m, nil
}

// MaxEncodedLen returns the most bytes Encode writes for region r of
// elements of elem bytes: the region's bytes, HeaderLen, and opLen (5)
// per 2^32-1 blocks, the size of a dense encoding. A receiver that does
// not know a message's size posts a receive of this bound; EncodedLen
// then reads the size from the header.
func MaxEncodedLen(r strided.Desc, elem int) (int64, error) {
	m, err := newMessage(r, elem, -1)
	if err != nil {
		return 0, err
	}
	return m.maxLen, nil
}

// putHeader writes the header of an encoding of n bytes.
func putHeader(out []byte, m *message, n int) {
	copy(out, magic)
	out[4] = version
	out[5] = byte(m.elem)
	out[6] = logBE
	out[7] = 0
	binary.LittleEndian.PutUint64(out[8:], uint64(m.elems))
	binary.LittleEndian.PutUint64(out[16:], uint64(n))
}

// EncodedLen returns the length of the encoding that starts enc, read from
// its header, and checks that enc holds that many bytes: a receiver that
// posted MaxEncodedLen bytes learns what arrived. It checks the header
// only; Apply and Check check the rest.
func EncodedLen(enc []byte) (int, error) {
	bad := func(format string, a ...any) (int, error) {
		return 0, &CorruptError{Block: -1, Reason: fmt.Sprintf(format, a...)}
	}
	if len(enc) < HeaderLen {
		return bad("%d bytes, a header is %d", len(enc), HeaderLen)
	}
	if string(enc[:4]) != magic {
		return bad("magic %q, want %q", enc[:4], magic)
	}
	if enc[4] != version || enc[6] != logBE || enc[7] != 0 {
		return bad("version %d, block log %d, flags %d: want %d, %d, 0", enc[4], enc[6], enc[7], version, logBE)
	}
	n := binary.LittleEndian.Uint64(enc[16:])
	if n < HeaderLen || n > uint64(len(enc)) {
		return bad("encoding of %d bytes in a buffer of %d", n, len(enc))
	}
	return int(n), nil
}

// readHeader checks enc's header against the message the receiver expects
// and returns the encoding's length.
func readHeader(enc []byte, m *message) (int, error) {
	n, err := EncodedLen(enc)
	if err != nil {
		return 0, err
	}
	if int(enc[5]) != m.elem {
		return 0, &CorruptError{Block: -1, Reason: fmt.Sprintf("%d-byte elements, the region holds %d-byte elements", enc[5], m.elem)}
	}
	if e := binary.LittleEndian.Uint64(enc[8:]); e != uint64(m.elems) {
		return 0, &CorruptError{Block: -1, Reason: fmt.Sprintf("%d elements, the region holds %d", e, m.elems)}
	}
	return n, nil
}
