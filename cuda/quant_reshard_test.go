package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/cuda/kernels"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

// emuMemory is reshard.QuantMemory over host memory with the FP8 kernels
// run by the CPU emulator, planned exactly as BlockAmax and PackQuantize
// plan them on a GPU (planQuant): what a call that converts to FP8 asks of the kernels, run
// here without a GPU. Its buffers are C memory (kernels.Alloc), whose
// addresses the emulated kernels dereference.
type emuMemory struct {
	transport.HostMemory
	mu    sync.Mutex
	frees map[uintptr]func()
	used  map[string]int
}

// emuLock serialises the emulator, whose thread and block indices are C
// globals.
var emuLock sync.Mutex

func newEmuMemory() *emuMemory {
	return &emuMemory{frees: map[uintptr]func(){}, used: map[string]int{}}
}

func (m *emuMemory) Alloc(n int64) (transport.Buffer, error) {
	b, free := kernels.Alloc(int(n))
	m.mu.Lock()
	m.frees[uintptr(unsafe.Pointer(unsafe.SliceData(b)))] = free
	m.mu.Unlock()
	return transport.HostBuffer(b), nil
}

func (m *emuMemory) Free(b transport.Buffer) {
	h, ok := b.(transport.HostBuffer)
	if !ok {
		return
	}
	k := uintptr(unsafe.Pointer(unsafe.SliceData(h)))
	m.mu.Lock()
	free := m.frees[k]
	delete(m.frees, k)
	m.mu.Unlock()
	if free != nil {
		free()
	}
}

func hostAddr(b transport.Buffer) (DevicePtr, []byte, error) {
	h, ok := b.(transport.HostBuffer)
	if !ok {
		return 0, nil, fmt.Errorf("emu: %T is not host memory", b)
	}
	return addrOf(h), h, nil
}

func (m *emuMemory) run(p quantPlan) error {
	emuLock.Lock()
	defer emuLock.Unlock()
	m.mu.Lock()
	used := m.used
	m.mu.Unlock()
	return emulate(p, 5, used)
}

// QuantAmaxes is cudamem.Memory.QuantAmaxes with the emulated kernel, one
// region at a time.
func (m *emuMemory) QuantAmaxes(jobs []transport.AmaxJob) error {
	for k := range jobs {
		jobs[k].Err = m.quantAmax(jobs[k].Grid, jobs[k].Window, jobs[k].Region)
	}
	return nil
}

func (m *emuMemory) quantAmax(g fp8.Grid, w fp8.Window, r transport.QuantRegion) error {
	blocks, err := g.Blocks(r.Box)
	if err != nil || blocks.Elems() == 0 {
		return err
	}
	src, srcHost, err := hostAddr(r.Buf)
	if err != nil {
		return err
	}
	win, freeWin := kernels.Alloc(int(4 * blocks.Elems()))
	defer freeWin()
	p, err := planQuant(quantRequest{kind: quantAmax, grid: g, dtype: r.DType, src: src, at: r.At, box: r.Box, win: addrOf(win), blocks: blocks})
	if err != nil {
		return err
	}
	if err := m.run(p); err != nil {
		return err
	}
	part := fp8.Window{Blocks: blocks, Values: make([]float32, blocks.Elems())}
	for i := range part.Values {
		u := binary.LittleEndian.Uint32(win[4*i:])
		if u&0x7FFFFFFF >= 0x7F800000 {
			return g.CheckFinite(fp8.Region{DType: r.DType, Data: srcHost, At: r.At, Box: r.Box})
		}
		part.Values[i] = math.Float32frombits(u)
	}
	return w.MaxWith(part)
}

// LoadScales is cudamem.Memory.LoadScales into C memory, a buffer per
// window.
func (m *emuMemory) LoadScales(ws []fp8.Window) ([]transport.Scales, func(), error) {
	out := make([]transport.Scales, len(ws))
	for k, w := range ws {
		b, _ := m.Alloc(int64(4 * len(w.Values)))
		h := b.(transport.HostBuffer)
		for i, v := range w.Values {
			binary.LittleEndian.PutUint32(h[4*i:], math.Float32bits(v))
		}
		out[k] = transport.Scales{Window: w, Dev: b}
	}
	return out, func() {
		for _, s := range out {
			m.Free(s.Dev)
		}
	}, nil
}

// WriteScales copies the scale tensors into their buffers.
func (m *emuMemory) WriteScales(dst []transport.Buffer, src [][]byte) error {
	return transport.HostMemory{}.WriteScales(dst, src)
}

// QuantPack is cudamem.Memory.QuantPack with the emulated kernel.
func (m *emuMemory) QuantPack(g fp8.Grid, dst transport.Buffer, off int64, r transport.QuantRegion, s transport.Scales) error {
	src, _, err := hostAddr(r.Buf)
	if err != nil {
		return err
	}
	d, dh, err := hostAddr(dst)
	if err != nil {
		return err
	}
	if off < 0 || off+r.Box.Elems() > int64(len(dh)) {
		return fmt.Errorf("emu: quantize-pack of %d bytes at %d into %d", r.Box.Elems(), off, len(dh))
	}
	win, _, err := hostAddr(s.Dev)
	if err != nil {
		return err
	}
	p, err := planQuant(quantRequest{kind: quantPack, grid: g, dtype: r.DType, src: src, at: r.At, box: r.Box,
		win: win, blocks: s.Blocks, dst: d + DevicePtr(off)})
	if err != nil {
		return err
	}
	return m.run(p)
}

// TestFP8CallKernelsOnCPU runs calls that convert to FP8 in flight with
// the FP8 kernels doing the partial amaxes and the quantize-packing (the
// CPU emulator standing in for the GPU, planned as BlockAmax and
// PackQuantize plan them): every FP8 pair of at most 64 KiB in every arrangement, on flat and on
// hier over two destination domains, tiny chunks so that boxes cut rows
// and blocks, from padded views on flat; every byte and scale is compared
// with quantizing the whole tensor at once. TestGPUFP8 (package cudamem)
// runs the same on the GPU.
func TestFP8CallKernelsOnCPU(t *testing.T) {
	cases, err := transporttest.FP8Cases()
	if err != nil {
		t.Fatal(err)
	}
	mem := newEmuMemory()
	runs := 0
	for ci, c := range cases {
		if c.Src.Bytes() > 64<<10 {
			continue
		}
		world := c.World()
		for ri, route := range []reshard.Route{reshard.Flat, hier.Hier{}} {
			topo, err := hier.Domains(make([]int, world), c.Src, c.Dst, hier.DomainSizes{Dst: (c.Dst.Mesh().Size() + 1) / 2})
			if err != nil {
				t.Fatal(err)
			}
			chunk := max(c.Dst.Bytes()/16, 16)
			mode := fp8.Mode(1 + (ci+ri)%3)
			w := inproc.NewWorld(world).WithMemory(mem)
			errs := w.Run(func(tr transport.Transport) error {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				env := transporttest.Env{T: tr, Mem: mem, IO: mem, Topo: topo, Opts: reshard.ScheduleOptions{ChunkBytes: chunk, StagingBytes: 8 * chunk},
					Padded: ri == 0}
				_, err := transporttest.RunFP8Case(ctx, env, control.Plain(w.Collective(tr.Rank())), c, route, mode, refit.Options{Verify: ci%2 == 0}, 2)
				if err != nil {
					tr.Abort(err)
				}
				return err
			})
			if err := errors.Join(errs...); err != nil {
				t.Errorf("%v, %s, %v: %v", c, route.Name(), mode, err)
			}
			runs++
		}
	}
	t.Logf("%d FP8 calls through the emulated kernels; kernels used: %v", runs, mem.used)
}
