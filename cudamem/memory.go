package cudamem

import (
	"fmt"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// Buffer is device memory as a transport.Buffer.
type Buffer struct {
	Ptr cuda.DevicePtr
	N   int64
}

// Len returns the size in bytes.
func (b Buffer) Len() int64 { return b.N }

// Memory is transport.Memory over one GPU: buffers are device memory, and
// pack, unpack and copies run as kernels on the Memory's stream. It also
// implements the conformance suite's HostIO (Upload, Download).
type Memory struct {
	Ctx    *cuda.Context
	Stream *cuda.Stream
}

// NewMemory returns a Memory on ctx with a stream of its own.
func NewMemory(ctx *cuda.Context) (*Memory, error) {
	s, err := ctx.NewStream()
	if err != nil {
		return nil, err
	}
	return &Memory{Ctx: ctx, Stream: s}, nil
}

// Close destroys the Memory's stream.
func (m *Memory) Close() error { return m.Stream.Destroy() }

func deviceBuf(b transport.Buffer) (Buffer, error) {
	d, ok := b.(Buffer)
	if !ok {
		return Buffer{}, fmt.Errorf("cuda: %T is not device memory", b)
	}
	return d, nil
}

// deviceBufs returns both buffers as device memory.
func deviceBufs(dst, src transport.Buffer) (Buffer, Buffer, error) {
	d, err := deviceBuf(dst)
	if err != nil {
		return Buffer{}, Buffer{}, err
	}
	s, err := deviceBuf(src)
	return d, s, err
}

// Alloc implements transport.Memory; a 0-byte buffer holds no memory.
func (m *Memory) Alloc(n int64) (transport.Buffer, error) {
	if n == 0 {
		return Buffer{}, nil
	}
	p, err := m.Ctx.Alloc(int(n))
	if err != nil {
		return nil, err
	}
	return Buffer{Ptr: p, N: n}, nil
}

// Free implements transport.Memory.
func (m *Memory) Free(b transport.Buffer) {
	if d, ok := b.(Buffer); ok && d.Ptr != 0 {
		_ = m.Ctx.Free(d.Ptr)
	}
}

// checkRegion makes sure a descriptor stays inside a buffer before a kernel
// touches it: device code cannot report an out-of-range address.
func checkRegion(what string, d strided.Desc, size int64) error {
	if err := d.Fits(size); err != nil {
		return fmt.Errorf("cuda: %s: %w", what, err)
	}
	return nil
}

// Pack implements transport.Memory.
func (m *Memory) Pack(dst transport.Buffer, off int64, src transport.Buffer, desc strided.Desc) error {
	d, s, err := deviceBufs(dst, src)
	if err != nil {
		return err
	}
	sd := desc
	if err := checkRegion("pack source", sd, s.N); err != nil {
		return err
	}
	if err := checkRegion("pack destination", strided.Desc{Offset: off, Run: sd.Bytes()}, d.N); err != nil {
		return err
	}
	if sd.Bytes() == 0 {
		return nil
	}
	return cuda.Pack(m.Stream, d.Ptr+cuda.DevicePtr(off), s.Ptr, sd)
}

// Unpack implements transport.Memory.
func (m *Memory) Unpack(dst transport.Buffer, desc strided.Desc, src transport.Buffer, off int64) error {
	d, s, err := deviceBufs(dst, src)
	if err != nil {
		return err
	}
	dd := desc
	if err := checkRegion("unpack destination", dd, d.N); err != nil {
		return err
	}
	if err := checkRegion("unpack source", strided.Desc{Offset: off, Run: dd.Bytes()}, s.N); err != nil {
		return err
	}
	if dd.Bytes() == 0 {
		return nil
	}
	return cuda.Unpack(m.Stream, d.Ptr, dd, s.Ptr+cuda.DevicePtr(off))
}

// Copy implements transport.Memory.
func (m *Memory) Copy(dst transport.Buffer, dstDesc strided.Desc, src transport.Buffer, srcDesc strided.Desc) error {
	d, s, err := deviceBufs(dst, src)
	if err != nil {
		return err
	}
	dd, sd := dstDesc, srcDesc
	if dd.Bytes() != sd.Bytes() {
		return fmt.Errorf("cuda: copy of %d bytes into %d", sd.Bytes(), dd.Bytes())
	}
	if err := checkRegion("copy source", sd, s.N); err != nil {
		return err
	}
	if err := checkRegion("copy destination", dd, d.N); err != nil {
		return err
	}
	if sd.Bytes() == 0 {
		return nil
	}
	return cuda.StridedCopy(m.Stream, d.Ptr, dd, s.Ptr, sd)
}

// Sync implements transport.Memory: it waits for the stream.
func (m *Memory) Sync() error { return m.Stream.Synchronize() }

// Upload copies host bytes into a device buffer, after the stream's work.
func (m *Memory) Upload(dst transport.Buffer, src []byte) error {
	d, err := deviceBuf(dst)
	if err != nil {
		return err
	}
	if int64(len(src)) > d.N {
		return fmt.Errorf("cuda: upload of %d bytes into %d", len(src), d.N)
	}
	if err := m.Sync(); err != nil {
		return err
	}
	return m.Ctx.CopyHtoD(d.Ptr, src)
}

// Download copies a device buffer into host bytes, after the stream's work.
func (m *Memory) Download(dst []byte, src transport.Buffer) error {
	s, err := deviceBuf(src)
	if err != nil {
		return err
	}
	if int64(len(dst)) > s.N {
		return fmt.Errorf("cuda: download of %d bytes from %d", len(dst), s.N)
	}
	if err := m.Sync(); err != nil {
		return err
	}
	return m.Ctx.CopyDtoH(dst, s.Ptr)
}

// ReadRegion implements transport.RegionReader: it packs the region into a
// temporary device buffer and copies that to dst.
func (m *Memory) ReadRegion(dst []byte, src transport.Buffer, at strided.Desc) error {
	if int64(len(dst)) != at.Bytes() {
		return fmt.Errorf("cuda: reading %d bytes into %d", at.Bytes(), len(dst))
	}
	if len(dst) == 0 {
		return nil
	}
	tmp, err := m.Alloc(int64(len(dst)))
	if err != nil {
		return err
	}
	defer m.Free(tmp)
	if err := m.Pack(tmp, 0, src, at); err != nil {
		return err
	}
	return m.Download(dst, tmp)
}

// AddressRange implements transport.Addresser: the device addresses a
// buffer spans.
func (m *Memory) AddressRange(b transport.Buffer) (lo, hi uintptr, ok bool) {
	d, isDev := b.(Buffer)
	if !isDev || d.N == 0 {
		return 0, 0, false
	}
	return uintptr(d.Ptr), uintptr(d.Ptr) + uintptr(d.N), true
}
