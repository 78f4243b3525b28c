package transport

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/m2n-dev/m2n/strided"
)

// Buffer is a rank's memory region: host memory (HostBuffer) or device
// memory of a GPU backend. Drivers never look inside a Buffer; they hand
// it to the Memory and Transport that made it.
type Buffer interface {
	// Len returns the size in bytes.
	Len() int64
}

// HostBuffer is host memory as a Buffer.
type HostBuffer []byte

// Len returns len(b).
func (b HostBuffer) Len() int64 { return int64(len(b)) }

// Op is one point-to-point operation of a round: send Len bytes of Buf
// starting at Off to Peer, or receive them from Peer. With InPlace set, the
// bytes are instead the strided region At of Buf, moved without staging by
// a transport that implements InPlaceTransport; Len still holds the count.
//
// Tag is the identity of the call and step the operation belongs to, in
// [0, MaxTag]: a send matches only a receive of the same tag (MPI's tag),
// so that the bytes of one call can never land in another's buffers. A
// transport without tags (NCCL) ignores it: the runtime agrees on the
// call and step with every rank before a byte moves, and runs one step at
// a time.
type Op struct {
	Peer     int
	Send     bool
	Tag      int32
	Buf      Buffer
	Off, Len int64
	InPlace  bool
	At       strided.Desc
}

// MaxTag is the largest Op.Tag: MPI guarantees tags up to 32767.
const MaxTag = 32767

// InPlaceTransport is a Transport that sends from and receives into strided
// regions directly (MPI derived datatypes, say), so that the executor packs
// nothing. A message's sender and receiver may use different forms: the
// bytes on the wire are the region's runs in order either way.
type InPlaceTransport interface {
	Transport
	// MaxInPlaceBytes returns the largest region one in-place Op may move;
	// 0 turns in-place operations off.
	MaxInPlaceBytes() int64
}

// MaxInPlace returns t's MaxInPlaceBytes, or 0 when t moves contiguous
// bytes only. Transports that wrap another forward it with this.
func MaxInPlace(t Transport) int64 {
	if ip, ok := t.(InPlaceTransport); ok {
		return ip.MaxInPlaceBytes()
	}
	return 0
}

// Transport moves bytes between the ranks of one communicator. Operations
// are posted in rounds: Start posts every operation of a round at once and
// returns; Wait on the result completes them. Sends and receives between
// the same pair of ranks match in the order they are posted, across rounds.
// A rank may have at most two rounds in flight.
type Transport interface {
	// Rank returns this rank's index in the communicator.
	Rank() int
	// Size returns the number of ranks.
	Size() int
	// Start posts the operations of one round. The buffers must stay
	// untouched until Wait returns.
	Start(ops []Op) (Pending, error)
	// Abort tears the communicator down after an unrecoverable error,
	// so that no rank waits forever on this one. It does not return on
	// transports where aborting ends the process (MPI_Abort).
	Abort(reason error)
}

// Pending is a posted round.
type Pending interface {
	// Wait blocks until every operation of the round has completed, or ctx
	// is done. After a ctx error the round is abandoned; the caller must
	// Abort the transport.
	Wait(ctx context.Context) error
}

// Memory allocates and copies the buffers a Transport moves. Copies may be
// asynchronous (a GPU stream); Sync waits for all of them.
type Memory interface {
	// Alloc returns a buffer of n bytes; its contents are unspecified.
	Alloc(n int64) (Buffer, error)
	// Free releases a buffer from Alloc.
	Free(b Buffer)
	// Pack copies the bytes desc describes in src, run after run, into
	// dst[off : off+desc.Bytes()].
	Pack(dst Buffer, off int64, src Buffer, desc strided.Desc) error
	// Unpack copies src[off : off+desc.Bytes()] into the bytes desc
	// describes in dst.
	Unpack(dst Buffer, desc strided.Desc, src Buffer, off int64) error
	// Copy copies the bytes srcDesc describes in src to the bytes dstDesc
	// describes in dst, in order; both describe the same number of bytes.
	Copy(dst Buffer, dstDesc strided.Desc, src Buffer, srcDesc strided.Desc) error
	// Sync waits until every copy issued so far has completed.
	Sync() error
}

// HostIO moves bytes between host memory and a Memory's buffers, so that
// programs and tests can fill and read device memory. HostMemory and
// package cudamem's Memory implement it.
type HostIO interface {
	// Upload copies src into the first len(src) bytes of dst.
	Upload(dst Buffer, src []byte) error
	// Download copies the first len(dst) bytes of src into dst.
	Download(dst []byte, src Buffer) error
}

// HostMemory is Memory over HostBuffers, copying with the CPU.
type HostMemory struct{}

// Upload implements HostIO.
func (HostMemory) Upload(dst Buffer, src []byte) error {
	d, ok := dst.(HostBuffer)
	if !ok {
		return fmt.Errorf("transport: HostMemory needs a HostBuffer, got %T", dst)
	}
	if len(src) > len(d) {
		return fmt.Errorf("transport: upload of %d bytes into a buffer of %d", len(src), len(d))
	}
	copy(d, src)
	return nil
}

// Download implements HostIO.
func (HostMemory) Download(dst []byte, src Buffer) error {
	s, ok := src.(HostBuffer)
	if !ok {
		return fmt.Errorf("transport: HostMemory needs a HostBuffer, got %T", src)
	}
	if len(dst) > len(s) {
		return fmt.Errorf("transport: download of %d bytes from a buffer of %d", len(dst), len(s))
	}
	copy(dst, s)
	return nil
}

// Alloc returns a zeroed HostBuffer.
func (HostMemory) Alloc(n int64) (Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("transport: allocate %d bytes", n)
	}
	return HostBuffer(make([]byte, n)), nil
}

// Free does nothing; the garbage collector reclaims host buffers.
func (HostMemory) Free(Buffer) {}

// Pack implements Memory.
func (HostMemory) Pack(dst Buffer, off int64, src Buffer, desc strided.Desc) error {
	d, s, err := hostPair(dst, src)
	if err != nil {
		return err
	}
	if err := checkRange("pack destination", off, desc.Bytes(), int64(len(d))); err != nil {
		return err
	}
	if err := checkStrided("pack source", desc, int64(len(s))); err != nil {
		return err
	}
	run := desc.Run
	desc.ForEachRun(func(at int64) {
		copy(d[off:off+run], s[at:at+run])
		off += run
	})
	return nil
}

// Unpack implements Memory.
func (HostMemory) Unpack(dst Buffer, desc strided.Desc, src Buffer, off int64) error {
	d, s, err := hostPair(dst, src)
	if err != nil {
		return err
	}
	if err := checkRange("unpack source", off, desc.Bytes(), int64(len(s))); err != nil {
		return err
	}
	if err := checkStrided("unpack destination", desc, int64(len(d))); err != nil {
		return err
	}
	run := desc.Run
	desc.ForEachRun(func(at int64) {
		copy(d[at:at+run], s[off:off+run])
		off += run
	})
	return nil
}

// Copy implements Memory. The two descriptors may cut the bytes into runs
// of different lengths.
func (HostMemory) Copy(dst Buffer, dstDesc strided.Desc, src Buffer, srcDesc strided.Desc) error {
	d, s, err := hostPair(dst, src)
	if err != nil {
		return err
	}
	if srcDesc.Bytes() != dstDesc.Bytes() {
		return fmt.Errorf("transport: copy of %d bytes into %d", srcDesc.Bytes(), dstDesc.Bytes())
	}
	if err := checkStrided("copy source", srcDesc, int64(len(s))); err != nil {
		return err
	}
	if err := checkStrided("copy destination", dstDesc, int64(len(d))); err != nil {
		return err
	}
	if srcDesc.Run == dstDesc.Run {
		runs := make([]int64, 0, srcDesc.Rows())
		srcDesc.ForEachRun(func(at int64) { runs = append(runs, at) })
		i := 0
		run := srcDesc.Run
		dstDesc.ForEachRun(func(at int64) {
			copy(d[at:at+run], s[runs[i]:runs[i]+run])
			i++
		})
		return nil
	}
	tmp := make([]byte, srcDesc.Bytes())
	off := int64(0)
	srcDesc.ForEachRun(func(at int64) {
		off += int64(copy(tmp[off:], s[at:at+srcDesc.Run]))
	})
	off = 0
	dstDesc.ForEachRun(func(at int64) {
		off += int64(copy(d[at:at+dstDesc.Run], tmp[off:]))
	})
	return nil
}

// Sync does nothing: host copies are synchronous.
func (HostMemory) Sync() error { return nil }

func hostPair(dst, src Buffer) (HostBuffer, HostBuffer, error) {
	d, ok1 := dst.(HostBuffer)
	s, ok2 := src.(HostBuffer)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("transport: HostMemory needs HostBuffers, got %T and %T", dst, src)
	}
	return d, s, nil
}

func checkRange(what string, off, n, size int64) error {
	if off < 0 || n < 0 || off+n > size {
		return fmt.Errorf("transport: %s [%d, %d) outside a buffer of %d bytes", what, off, off+n, size)
	}
	return nil
}

// checkStrided checks that every run of desc lies inside a buffer of size
// bytes.
func checkStrided(what string, desc strided.Desc, size int64) error {
	if err := desc.Fits(size); err != nil {
		return fmt.Errorf("transport: %s: %w", what, err)
	}
	return nil
}

// Addresser is a Memory that can say which addresses a buffer spans, so
// that aliasing buffers are caught before any data moves.
type Addresser interface {
	AddressRange(b Buffer) (lo, hi uintptr, ok bool)
}

// AddressRange implements Addresser for HostBuffers.
func (HostMemory) AddressRange(b Buffer) (lo, hi uintptr, ok bool) {
	h, isHost := b.(HostBuffer)
	if !isHost || len(h) == 0 {
		return 0, 0, false
	}
	lo = uintptr(unsafe.Pointer(&h[0]))
	return lo, lo + uintptr(len(h)), true
}
