package cudamem

import (
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/transport"
)

// Memory implements transport.QuantMemory with the FP8 kernels, so that a
// call that converts to FP8 in flight (refit.Spec.Scale) quantizes on the
// GPU while it packs: the partial amaxes of every tensor with BlockAmax into
// one device window read back to the host (where the ranks combine them),
// the packing with PackQuantize from scales uploaded once per step, a step
// a few round trips to the device however many tensors convert.
var _ transport.QuantMemory = (*Memory)(nil)

// QuantAmaxes implements transport.QuantMemory: for all jobs at once, one
// device window holding every job's blocks, zeroed on the stream, one
// BlockAmax per job queued into its part, one download, then each part
// folded into its job's window. A non-finite amax (a NaN or infinity in a
// region) sets that job's Err to the *fp8.NonFiniteError of its first
// element (read back from the region). It waits for the stream once.
func (m *Memory) QuantAmaxes(jobs []transport.AmaxJob) error {
	blocks := make([]placement.Box, len(jobs))
	offs := make([]int64, len(jobs)+1)
	for k := range jobs {
		b, err := jobs[k].Grid.Blocks(jobs[k].Region.Box)
		if err != nil {
			jobs[k].Err = err
		}
		blocks[k] = b
		n := int64(0)
		if err == nil {
			n = b.Elems()
		}
		var ok bool
		if offs[k+1], ok = checked.Add(offs[k], 4*n); !ok {
			return fmt.Errorf("cuda: amax windows of %d regions overflow int64 bytes", len(jobs))
		}
	}
	total := offs[len(jobs)]
	if total == 0 {
		return nil
	}
	arena, err := m.Alloc(total)
	if err != nil {
		return fmt.Errorf("cuda: amax windows of %d regions (%d bytes): %w", len(jobs), total, err)
	}
	defer m.Free(arena)
	base := arena.(Buffer)
	if err := m.Stream.Memset(base.Ptr, 0, int(total)); err != nil { // zeros: the identity of an amax
		return err
	}
	regs := make([]FP8Region, len(jobs))
	for k, j := range jobs {
		if j.Err != nil || offs[k+1] == offs[k] {
			continue
		}
		regs[k] = FP8Region{DType: j.Region.DType, Src: j.Region.Buf, At: j.Region.At, Box: j.Region.Box}
		win := FP8Window{Blocks: blocks[k], Values: Buffer{Ptr: base.Ptr + cuda.DevicePtr(offs[k]), N: offs[k+1] - offs[k]}}
		if err := m.BlockAmax(j.Grid, win, regs[k]); err != nil {
			jobs[k].Err = err
		}
	}
	host := make([]byte, total)
	if err := m.Download(host, arena); err != nil {
		return err
	}
	for k := range jobs {
		if jobs[k].Err == nil && offs[k+1] > offs[k] {
			jobs[k].Err = m.foldAmax(&jobs[k], blocks[k], regs[k], host[offs[k]:offs[k+1]])
		}
	}
	return nil
}

// foldAmax folds one job's downloaded partial amaxes (float32 bits) into
// its window, or returns the *fp8.NonFiniteError of its region's first
// NaN or infinity when one shows.
func (m *Memory) foldAmax(j *transport.AmaxJob, blocks placement.Box, reg FP8Region, bits []byte) error {
	part := fp8.Window{Blocks: blocks, Values: make([]float32, blocks.Elems())}
	if err := part.ReadBits(bits); err != nil {
		return err
	}
	for i, v := range part.Values {
		if math.Float32bits(v)&0x7FFFFFFF >= 0x7F800000 { // an infinity or a NaN
			if err := m.firstNonFinite(j.Grid, reg); err != nil {
				return err
			}
			return fmt.Errorf("cuda: block %d of %v has amax bits %#08x, but the region reads back finite", i, blocks, math.Float32bits(v))
		}
	}
	return j.Window.MaxWith(part)
}

// LoadScales implements transport.QuantMemory: every window's scales in
// one device buffer (Scales.Dev, 4 bytes per block, a part of it each),
// uploaded at once; release frees it.
func (m *Memory) LoadScales(ws []fp8.Window) ([]transport.Scales, func(), error) {
	out := make([]transport.Scales, len(ws))
	var total int64
	for _, w := range ws {
		var ok bool
		if total, ok = checked.Add(total, 4*int64(len(w.Values))); !ok {
			return nil, nil, fmt.Errorf("cuda: scales of %d windows overflow int64 bytes", len(ws))
		}
	}
	host := make([]byte, 0, total)
	var arena transport.Buffer = Buffer{}
	if total > 0 {
		var err error
		if arena, err = m.Alloc(total); err != nil {
			return nil, nil, fmt.Errorf("cuda: scales of %d windows (%d bytes): %w", len(ws), total, err)
		}
	}
	base, off := arena.(Buffer), int64(0)
	for i, w := range ws {
		n := 4 * int64(len(w.Values))
		host = w.AppendBits(host)
		out[i] = transport.Scales{Window: w, Dev: Buffer{Ptr: base.Ptr + cuda.DevicePtr(off), N: n}}
		off += n
	}
	release := func() { m.Free(arena) }
	if total > 0 {
		if err := m.Upload(arena, host); err != nil {
			release()
			return nil, nil, err
		}
	}
	return out, release, nil
}

// WriteScales implements transport.QuantMemory: the scale tensors staged in
// one device buffer with one upload, then copied on the stream into their
// buffers, one wait for it all.
func (m *Memory) WriteScales(dst []transport.Buffer, src [][]byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("cuda: %d scale buffers for %d scale tensors", len(dst), len(src))
	}
	var total int64
	for i, b := range src {
		d, err := deviceBuf(dst[i])
		if err != nil {
			return err
		}
		if int64(len(b)) > d.N {
			return fmt.Errorf("cuda: %d bytes of scales into a buffer of %d", len(b), d.N)
		}
		var ok bool
		if total, ok = checked.Add(total, int64(len(b))); !ok {
			return fmt.Errorf("cuda: %d scale tensors overflow int64 bytes", len(src))
		}
	}
	if total == 0 {
		return nil
	}
	stage, err := m.Alloc(total)
	if err != nil {
		return fmt.Errorf("cuda: staging %d bytes of scales: %w", total, err)
	}
	defer m.Free(stage)
	host := make([]byte, 0, total)
	for _, b := range src {
		host = append(host, b...)
	}
	if err := m.Upload(stage, host); err != nil {
		return err
	}
	base, off := stage.(Buffer), int64(0)
	for i, b := range src {
		if len(b) > 0 {
			if err := m.Stream.CopyDtoD(dst[i].(Buffer).Ptr, base.Ptr+cuda.DevicePtr(off), len(b)); err != nil {
				return err
			}
		}
		off += int64(len(b))
	}
	return m.Sync()
}

// QuantPack implements transport.QuantMemory: PackQuantize on the stream.
func (m *Memory) QuantPack(g fp8.Grid, dst transport.Buffer, off int64, r transport.QuantRegion, s transport.Scales) error {
	dev, ok := s.Dev.(Buffer)
	if !ok {
		return fmt.Errorf("cuda: scales not loaded by this memory (LoadScales): %T", s.Dev)
	}
	return m.PackQuantize(g, dst, off, FP8Region{DType: r.DType, Src: r.Buf, At: r.At, Box: r.Box}, FP8Window{Blocks: s.Blocks, Values: dev})
}
