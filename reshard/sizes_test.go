package reshard

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// TestValidateOverflow is issue 17 case 9: ChunkBytes 1<<61 with 1 byte of
// staging passed because 8 x chunk wrapped to 0.
func TestValidateOverflow(t *testing.T) {
	tests := []struct {
		o    ScheduleOptions
		want string
	}{
		{ScheduleOptions{ChunkBytes: 1 << 61, StagingBytes: 1}, "chunk bytes 2305843009213693952, want at most 1152921504606846975: staging must hold 8 chunks"},
		{ScheduleOptions{ChunkBytes: 1152921504606846976, StagingBytes: 1 << 62}, "chunk bytes 1152921504606846976, want at most 1152921504606846975"},
		{ScheduleOptions{ChunkBytes: 1 << 62, StagingBytes: -8}, "want at most"},
		{ScheduleOptions{ChunkBytes: 0, StagingBytes: 8}, "chunk bytes 0: must be positive"},
		{ScheduleOptions{ChunkBytes: 16, StagingBytes: 127}, "staging bytes 127, want >= 8 x chunk = 128"},
		{ScheduleOptions{ChunkBytes: 1152921504606846975, StagingBytes: 9223372036854775800}, ""},
	}
	for _, tc := range tests {
		err := tc.o.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.o, err)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want a FieldError containing %q", tc.o, err, tc.want)
		}
	}
}

// TestSplitBoxRejects is issue 17 case 12: SplitBox(box, 0, -1) divided by
// zero. Bad arguments are errors; so is a box cut into an absurd number of
// chunks (case 11), counted before any is made.
func TestSplitBoxRejects(t *testing.T) {
	box := placement.Box{Lo: []int64{0, 0}, Hi: []int64{4, 8}}
	tests := []struct {
		b         placement.Box
		elem, max int64
		want      string
	}{
		{box, 0, -1, "element size 0 bytes, want at least 1"},
		{box, 4, 0, "chunk bytes 0, want at least 1"},
		{box, 4, -1, "chunk bytes -1, want at least 1"},
		{placement.Box{Lo: []int64{0, 3}, Hi: []int64{4, 3}}, 4, 16, "is empty"},
		{placement.Box{Lo: []int64{0}, Hi: []int64{4, 3}}, 4, 16, "box with 1 lower and 2 upper bounds"},
		{placement.Box{Lo: []int64{0}, Hi: []int64{1 << 58}}, 8, 16 << 20, "make 137438953472 parts"},
		{placement.Box{Lo: []int64{0, 0}, Hi: []int64{1 << 40, 1 << 40}}, 1, 1, "holds more elements than an int64 counts"},
	}
	for _, tc := range tests {
		_, err := SplitBox(tc.b, tc.elem, tc.max)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SplitBox(%v, %d, %d) = %v, want an error containing %q", tc.b, tc.elem, tc.max, err, tc.want)
		}

	}
	if n, err := CountChunks(placement.Box{Lo: []int64{0}, Hi: []int64{1 << 58}}, 8, 16<<20); err != nil || n != 1<<37 {
		t.Errorf("CountChunks of 2^58 f64 in 16 MiB = %d, %v", n, err)
	}
}

// TestSplitBoxCount: CountChunks agrees with SplitBox, and the parts tile
// the box in order, never over the chunk unless one element is.
func TestSplitBoxCount(t *testing.T) {
	boxes := []placement.Box{
		{Lo: []int64{}, Hi: []int64{}},
		{Lo: []int64{3}, Hi: []int64{20}},
		{Lo: []int64{0, 1}, Hi: []int64{5, 9}},
		{Lo: []int64{1, 0, 2}, Hi: []int64{4, 6, 7}},
		{Lo: []int64{0, 0, 0, 0}, Hi: []int64{2, 3, 1, 5}},
	}
	for _, b := range boxes {
		for _, elem := range []int64{1, 2, 8} {
			for _, chunk := range []int64{1, 3, 7, 16, 40, 1 << 20} {
				parts, err := SplitBox(b, elem, chunk)
				if err != nil {
					t.Fatal(err)
				}
				n, err := CountChunks(b, elem, chunk)
				if err != nil || n != int64(len(parts)) {
					t.Fatalf("%v elem %d chunk %d: CountChunks %d, %v; SplitBox made %d", b, elem, chunk, n, err, len(parts))
				}
				var total int64
				for _, p := range parts {
					if e := p.Elems() * elem; e > chunk && p.Elems() > 1 {
						t.Fatalf("%v elem %d chunk %d: part %v of %d bytes", b, elem, chunk, p, e)
					}
					total += p.Elems()
				}
				if total != b.Elems() {
					t.Fatalf("%v elem %d chunk %d: parts hold %d elements", b, elem, chunk, total)
				}
			}
		}
	}
}

// TestHugePlans is issue 17 case 11: a plan of 2^30 transfers (32768 ranks
// S1 to 32768 ranks S0 of a 32768x32768 bf16 tensor) ran NewPlan out of
// memory; now it is refused at once, naming the count and the bytes, and
// PlanSize gives both without planning. A 2^58-element f64 tensor plans,
// but no route cuts it into chunks: the count is refused first.
func TestHugePlans(t *testing.T) {
	src := layout(t, "32768x32768", "bf16", "32768", "S1", nil)
	dst := layout(t, "32768x32768", "bf16", "32768", "S0", seq(32768, 32768))
	n, bytes, err := PlanSize(src, dst, 65536)
	if err != nil || n != 1<<30 || bytes != planBytes(1<<30, 65536) || bytes < 48<<30 {
		t.Fatalf("PlanSize = %d, %d, %v", n, bytes, err)
	}
	_, err = NewPlan(src, dst, 65536, Options{})
	var fe *FieldError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "plan 1073741824 transfers (about 51540131848 bytes of plan), want at most 67108864 transfers") {
		t.Fatalf("NewPlan = %v", err)
	}

	if got := int64(transferBytes); got != int64(unsafe.Sizeof(piece{}))+4 {
		t.Errorf("transferBytes %d, a piece takes %d", got, unsafe.Sizeof(piece{}))
	}

	big := layout(t, "288230376151711744", "f64", "2", "S0", nil)
	bigDst := layout(t, "288230376151711744", "f64", "2", "S0", seq(2, 2))
	p, err := NewPlan(big, bigDst, 4, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range []Route{Flat, AllGatherBroadcast} {
		name := route.Name()
		_, err := route.Schedule([]*Plan{p}, Topology{}, DefaultScheduleOptions)
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "want at most 8388608 messages") {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err = Flat.Schedule([]*Plan{p}, Topology{}, DefaultScheduleOptions)
	if !strings.Contains(err.Error(), "flat schedule 137438953472 messages (about 70368744177664 bytes)") {
		t.Errorf("flat: %v", err)
	}
}

// TestTinyChunks is issue 17 case 5: 1-byte chunks and 8 bytes of staging
// on a 256x256 f32 tensor took 5.9 s for 32,768 rounds; now the schedule
// builds in well under a second, and a tensor too large for such chunks is
// refused at once with the count.
func TestTinyChunks(t *testing.T) {
	src := layout(t, "256x256", "f32", "2", "S0", nil)
	dst := layout(t, "256x256", "f32", "2", "S1", seq(2, 2))
	p, err := NewPlan(src, dst, 4, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Flat.Schedule([]*Plan{p}, Topology{}, ScheduleOptions{ChunkBytes: 1, StagingBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	if s.Rounds != 32768 || len(s.Messages) != 65536 {
		t.Errorf("%d messages in %d rounds, want 65536 in 32768", len(s.Messages), s.Rounds)
	}
	src = layout(t, "4096x4096", "f32", "2", "S0", nil)
	dst = layout(t, "4096x4096", "f32", "2", "S1", seq(2, 2))
	if p, err = NewPlan(src, dst, 4, Options{}); err != nil {
		t.Fatal(err)
	}
	_, err = Flat.Schedule([]*Plan{p}, Topology{}, ScheduleOptions{ChunkBytes: 1, StagingBytes: 8})
	if err == nil || !strings.Contains(err.Error(), "flat schedule 16777216 messages") {
		t.Errorf("4096x4096 with 1-byte chunks: %v", err)
	}
}

// TestBuilderRoundLimit: a schedule that would pass maxRounds fails with
// a reason and a staging that would fit.
func TestBuilderRoundLimit(t *testing.T) {
	b, err := NewBuilder("flat", []*Plan{worldPlan(t, 2)}, Topology{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	b.Add(Message{Src: 0, Dst: 1, Bytes: 1 << 30}, maxRounds-1) // lands in the last round
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	b.Add(Message{Src: 0, Dst: 1, Bytes: 1 << 30}, maxRounds-1)
	err = b.Err()
	if err == nil || !strings.Contains(err.Error(), "in round 16777216, want rounds below 16777216") ||
		!strings.Contains(err.Error(), "staging bytes of at least") {
		t.Errorf("Err() = %v", err)
	}
}

// TestStridedBytesChecked: descriptor sizes saturate or report overflow,
// never wrap.
func TestStridedBytesChecked(t *testing.T) {
	s := strided.Desc{Run: 1 << 40, Count: []int64{1 << 20, 1 << 10}, Stride: []int64{1, 1}}
	if s.Bytes() != math.MaxInt64 {
		t.Errorf("Bytes = %d, want saturation", s.Bytes())
	}
	if _, err := s.CheckedBytes(); err == nil {
		t.Error("overflow not reported")
	}
	if n, err := (strided.Desc{Run: 32, Count: []int64{4, 2}}).CheckedBytes(); err != nil || n != 256 {
		t.Errorf("CheckedBytes = %d, %v", n, err)
	}
	if _, err := (strided.Desc{Run: 32, Count: []int64{-4}}).CheckedBytes(); err == nil {
		t.Error("negative count accepted")
	}
}
