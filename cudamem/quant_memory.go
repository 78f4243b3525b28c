package cudamem

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/transport"
)

// Memory implements transport.QuantMemory with the FP8 kernels, so that a
// call that converts to FP8 in flight (refit.Spec.Scale) quantizes on the
// GPU while it packs: the partial amaxes with BlockAmax into a device
// window read back to the host (where the ranks combine them), the packing
// with PackQuantize from scales uploaded once per step.
var _ transport.QuantMemory = (*Memory)(nil)

// QuantAmax implements transport.QuantMemory: BlockAmax into a zeroed device
// window of the blocks r touches, read back and folded into w. A
// non-finite amax (a NaN or infinity in r) is reported as the
// *fp8.NonFiniteError of its first element (read back from r).
// It waits for the stream.
func (m *Memory) QuantAmax(g fp8.Grid, w fp8.Window, r transport.QuantRegion) error {
	blocks, err := g.Blocks(r.Box)
	if err != nil {
		return err
	}
	n := blocks.Elems()
	if n == 0 {
		return nil
	}
	buf, err := m.Alloc(4 * n)
	if err != nil {
		return fmt.Errorf("cuda: amax window of %d blocks: %w", n, err)
	}
	defer m.Free(buf)
	host := make([]byte, 4*n)
	if err := m.Upload(buf, host); err != nil { // zeros: the identity of an amax
		return err
	}
	reg := FP8Region{DType: r.DType, Src: r.Buf, At: r.At, Box: r.Box}
	if err := m.BlockAmax(g, FP8Window{Blocks: blocks, Values: buf.(Buffer)}, reg); err != nil {
		return err
	}
	if err := m.Download(host, buf); err != nil {
		return err
	}
	part := fp8.Window{Blocks: blocks, Values: make([]float32, n)}
	for i := range part.Values {
		u := binary.LittleEndian.Uint32(host[4*i:])
		if u&0x7FFFFFFF >= 0x7F800000 {
			if err := m.firstNonFinite(g, reg); err != nil {
				return err
			}
			return fmt.Errorf("cuda: block %d of %v has amax bits %#08x, but the region reads back finite", i, blocks, u)
		}
		part.Values[i] = math.Float32frombits(u)
	}
	return w.MaxWith(part)
}

// LoadScales implements transport.QuantMemory: the scales uploaded into a
// device window (Scales.Dev, a Buffer of 4 bytes per block).
func (m *Memory) LoadScales(w fp8.Window) (transport.Scales, error) {
	s := transport.Scales{Window: w, Dev: Buffer{}}
	if len(w.Values) == 0 {
		return s, nil
	}
	host := make([]byte, 4*len(w.Values))
	for i, v := range w.Values {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(v))
	}
	buf, err := m.Alloc(int64(len(host)))
	if err != nil {
		return s, fmt.Errorf("cuda: scales of %d blocks: %w", len(w.Values), err)
	}
	if err := m.Upload(buf, host); err != nil {
		m.Free(buf)
		return s, err
	}
	s.Dev = buf
	return s, nil
}

// FreeScales implements transport.QuantMemory.
func (m *Memory) FreeScales(s transport.Scales) {
	if s.Dev != nil {
		m.Free(s.Dev)
	}
}

// QuantPack implements transport.QuantMemory: PackQuantize on the stream.
func (m *Memory) QuantPack(g fp8.Grid, dst transport.Buffer, off int64, r transport.QuantRegion, s transport.Scales) error {
	dev, ok := s.Dev.(Buffer)
	if !ok {
		return fmt.Errorf("cuda: scales not loaded by this memory (LoadScales): %T", s.Dev)
	}
	return m.PackQuantize(g, dst, off, FP8Region{DType: r.DType, Src: r.Buf, At: r.At, Box: r.Box}, FP8Window{Blocks: s.Blocks, Values: dev})
}
