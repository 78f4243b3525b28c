package cuda_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/cuda"
	"github.com/m2n-dev/m2n/cuda/nvrtc"
	"github.com/m2n-dev/m2n/internal/testutil/gputest"
	"github.com/m2n-dev/m2n/strided"
)

// These tests need a GPU; they skip, saying why, where there is none.

func TestGPUDevice(t *testing.T) {
	ctx := gputest.Context(t)
	v, err := cuda.DriverVersion()
	if err != nil {
		t.Fatal(err)
	}
	n, err := cuda.DeviceCount()
	if err != nil || n < 1 {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	d := ctx.Device()
	name, err := d.Name()
	if err != nil {
		t.Fatal(err)
	}
	major, minor, err := d.ComputeCapability()
	if err != nil {
		t.Fatal(err)
	}
	sms, err := d.MultiprocessorCount()
	if err != nil || sms < 1 {
		t.Fatalf("MultiprocessorCount = %d, %v", sms, err)
	}
	bus, err := d.PCIBusID()
	if err != nil || bus == "" {
		t.Fatalf("PCIBusID = %q, %v", bus, err)
	}
	mem, err := d.TotalMem()
	if err != nil {
		t.Fatal(err)
	}
	free, total, err := ctx.MemGetInfo()
	if err != nil || total != mem || free > total {
		t.Fatalf("MemGetInfo = %d, %d, %v; TotalMem %d", free, total, err, mem)
	}
	var cerr *cuda.Error
	t.Logf("driver CUDA %d, %d device(s); %v: %s, sm_%d%d, %d SMs, PCI %s, %.1f GiB",
		v, n, d, name, major, minor, sms, bus, float64(mem)/(1<<30))
	if _, err := cuda.GetDevice(n); !errors.As(err, &cerr) || cerr.Code != 101 {
		t.Errorf("GetDevice(%d): got %v, want CUDA_ERROR_INVALID_DEVICE", n, err)
	}
	if err := ctx.Synchronize(); err != nil {
		t.Fatal(err)
	}
	unbind, err := ctx.Bind()
	if err != nil {
		t.Fatal(err)
	}
	unbind()
}

func TestGPUErrors(t *testing.T) {
	ctx := gputest.Context(t)
	_, err := ctx.Alloc(1 << 50)
	var e *cuda.Error
	if !errors.As(err, &e) || e.Op != "cuMemAlloc" || !strings.HasPrefix(e.Name, "CUDA_ERROR_") || e.Msg == "" {
		t.Fatalf("Alloc(2^50): %v", err)
	}
	t.Logf("%v", err)
}

func TestGPUMemoryRoundtrip(t *testing.T) {
	ctx := gputest.Context(t)
	const n = 1<<20 + 13
	a := gputest.Alloc(t, ctx, n)
	b := gputest.Alloc(t, ctx, n)
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + i>>8)
	}
	if err := ctx.CopyHtoD(a, want); err != nil {
		t.Fatal(err)
	}
	if err := ctx.CopyHtoD(b, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := ctx.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("sync roundtrip differs")
	}
	if err := ctx.Memset(b+5, 0xab, 100); err != nil {
		t.Fatal(err)
	}
	if err := ctx.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	copy(want[5:105], bytes.Repeat([]byte{0xab}, 100))
	if !bytes.Equal(got, want) {
		t.Fatal("Memset result differs")
	}

	// Async on a stream.
	s := gputest.Stream(t, ctx)
	if err := s.Memset(b, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Query(); !done || err != nil {
		t.Fatalf("Query after Synchronize = %v, %v", done, err)
	}
	if err := ctx.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	inA := make([]byte, n)
	if err := ctx.CopyDtoH(inA, a); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, inA) {
		t.Fatal("async copy differs")
	}
	// Another library's stream, by its handle: work queued on it is done
	// once SynchronizeStream returns; 0 (the legacy stream) and 2 (the
	// thread's per-thread stream) are handles too.
	if err := s.Memset(b, 0x5a, n); err != nil {
		t.Fatal(err)
	}
	if err := ctx.SynchronizeStream(s.Handle()); err != nil {
		t.Fatal(err)
	}
	if done, err := s.Query(); !done || err != nil {
		t.Fatalf("Query after SynchronizeStream = %v, %v", done, err)
	}
	for _, h := range []uintptr{0, 2} {
		if err := ctx.SynchronizeStream(h); err != nil {
			t.Fatalf("SynchronizeStream(%d): %v", h, err)
		}
	}
}

func TestGPUEvents(t *testing.T) {
	ctx := gputest.Context(t)
	s := gputest.Stream(t, ctx)
	s2 := gputest.Stream(t, ctx)
	const n = 256 << 20
	a := gputest.Alloc(t, ctx, n)
	b := gputest.Alloc(t, ctx, n)
	start, err := ctx.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	end, err := ctx.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	defer end.Destroy()
	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := s.CopyDtoD(b, a, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	// s2 waits for s's copies, then sets b; the copy must not overwrite it.
	if err := s2.WaitEvent(end); err != nil {
		t.Fatal(err)
	}
	if err := s2.Memset(b, 7, 1); err != nil {
		t.Fatal(err)
	}
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := end.Query(); !done || err != nil {
		t.Fatalf("Query = %v, %v", done, err)
	}
	d, err := cuda.ElapsedTime(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || d > 10*time.Second {
		t.Fatalf("ElapsedTime = %v", d)
	}
	t.Logf("4 copies of %d MiB: %v, %.0f GB/s", n>>20, d, 4*n/d.Seconds()/1e9)
	if err := s2.Synchronize(); err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if err := ctx.CopyDtoH(one, b); err != nil || one[0] != 7 {
		t.Fatalf("after WaitEvent: %v, %v", one, err)
	}
	noTiming, err := ctx.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer noTiming.Destroy()
	if err := noTiming.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := noTiming.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if _, err := cuda.ElapsedTime(start, noTiming); err == nil {
		t.Error("ElapsedTime accepted an event without timing")
	}
}

func TestGPUKernelsCompile(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	major, minor, err := nvrtc.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NVRTC %d.%d from %s", major, minor, nvrtc.Path())
	s := gputest.Stream(t, ctx)
	p := gputest.Alloc(t, ctx, 64)
	if err := cuda.Pack(s, p, p+32, strided.Desc{Run: 16}); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if _, err := nvrtc.Compile("this is not CUDA", "bad.cu", nil, nil, nvrtc.PTX); err == nil {
		t.Error("compiling garbage succeeded")
	} else {
		var e *nvrtc.Error
		if !errors.As(err, &e) || e.Log == "" {
			t.Errorf("compile error without a log: %v", err)
		}
	}
}

// stridedCase runs one device op on random buffers and compares the whole
// destination buffer with the host oracle applied to the same start.
func stridedCase(t *testing.T, ctx *cuda.Context, s *cuda.Stream, r *rand.Rand, name string,
	srcLen, dstLen int64, op func(dst, src cuda.DevicePtr) error, oracle func(dst, src []byte) error) {
	t.Helper()
	src := make([]byte, srcLen)
	dst := make([]byte, dstLen)
	fillRandom(r, src)
	fillRandom(r, dst)
	dSrc, err := ctx.Alloc(int(max(srcLen, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(dSrc)
	dDst, err := ctx.Alloc(int(max(dstLen, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(dDst)
	if err := ctx.CopyHtoD(dSrc, src); err != nil {
		t.Fatal(err)
	}
	if err := ctx.CopyHtoD(dDst, dst); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(dst)
	if err := oracle(want, src); err != nil {
		t.Fatalf("%s: oracle: %v", name, err)
	}
	if err := op(dDst, dSrc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got := make([]byte, dstLen)
	if err := ctx.CopyDtoH(got, dDst); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: first difference at byte %d of %d", name, i, dstLen)
	}
}

func TestGPUStridedRandom(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	s := gputest.Stream(t, ctx)
	r := rand.New(rand.NewPCG(3, 4))
	n := 300
	if testing.Short() {
		n = 50
	}
	for i := range n {
		sd, sLen := cuda.RandomBox(r)
		total := sd.Bytes()
		dd, dLen := cuda.RandomDisjoint(r, total)
		name := func(op string) string { return op + " " + caseName(i, sd, dd) }
		stridedCase(t, ctx, s, r, name("Pack"), sLen, total,
			func(dst, src cuda.DevicePtr) error { return cuda.Pack(s, dst, src, sd) },
			func(dst, src []byte) error { return cuda.HostPack(dst, src, sd) })
		stridedCase(t, ctx, s, r, name("Unpack"), total, dLen,
			func(dst, src cuda.DevicePtr) error { return cuda.Unpack(s, dst, dd, src) },
			func(dst, src []byte) error { return cuda.HostUnpack(dst, dd, src) })
		stridedCase(t, ctx, s, r, name("StridedCopy"), sLen, dLen,
			func(dst, src cuda.DevicePtr) error { return cuda.StridedCopy(s, dst, dd, src, sd) },
			func(dst, src []byte) error { return cuda.HostStridedCopy(dst, dd, src, sd) })
	}
}

// TestGPUStridedLarge covers the benchmark's shapes at 64 MiB, odd offsets,
// and a single long run that the kernels split over the whole device.
func TestGPUStridedLarge(t *testing.T) {
	ctx := gputest.Context(t)
	gputest.SkipIfNotAvailable(t, nvrtc.Load(), nvrtc.ErrNotAvailable)
	s := gputest.Stream(t, ctx)
	r := rand.New(rand.NewPCG(5, 6))
	const total = 64 << 20
	for _, row := range []int64{256, 4096, 65536, total} {
		for _, off := range []int64{0, 16, 8, 4, 1} {
			d := strided.Desc{Offset: off, Run: row, Count: []int64{total / row}, Stride: []int64{2 * row}}
			name := caseName(int(row), d, d)
			stridedCase(t, ctx, s, r, "Pack "+name, d.Extent(), total,
				func(dst, src cuda.DevicePtr) error { return cuda.Pack(s, dst, src, d) },
				func(dst, src []byte) error { return cuda.HostPack(dst, src, d) })
			stridedCase(t, ctx, s, r, "Unpack "+name, total, d.Extent(),
				func(dst, src cuda.DevicePtr) error { return cuda.Unpack(s, dst, d, src) },
				func(dst, src []byte) error { return cuda.HostUnpack(dst, d, src) })
		}
	}
}

func fillRandom(r *rand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, r.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func caseName(i int, sd, dd strided.Desc) string {
	return "case " + itoa(int64(i)) + " src " + descString(sd) + " dst " + descString(dd)
}

func descString(d strided.Desc) string {
	s := "{off " + itoa(d.Offset) + " run " + itoa(d.Run)
	for k := range d.Count {
		s += " " + itoa(d.Count[k]) + "x" + itoa(d.Stride[k])
	}
	return s + "}"
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

func TestGPUMemcpy2D(t *testing.T) {
	ctx := gputest.Context(t)
	s := gputest.Stream(t, ctx)
	r := rand.New(rand.NewPCG(7, 8))
	// 2-D: 5 rows of 24 bytes at pitch 40 -> pitch 24.
	d2 := strided.Desc{Offset: 3, Run: 24, Count: []int64{5}, Stride: []int64{40}}
	stridedCase(t, ctx, s, r, "Memcpy2DAsync", d2.Extent(), d2.Bytes(),
		func(dst, src cuda.DevicePtr) error {
			return cuda.Memcpy2DAsync(s, dst, src, d2)
		},
		func(dst, src []byte) error { return cuda.HostPack(dst, src, d2) })
}
