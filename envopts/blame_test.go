package envopts

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// TestCheckOptions: an option Join would refuse is blamed on the setting
// that gave it, or on the chunk where the default staging cannot hold it.
func TestCheckOptions(t *testing.T) {
	for _, c := range []struct {
		flags          map[string]string
		chunk, staging int64
		want           string // the error's start; "" for none
	}{
		{map[string]string{}, 0, 0, ""},
		{map[string]string{"chunk-bytes": "1GiB"}, 1 << 30, 0, `--chunk-bytes "1GiB": staging bytes 268435456, want >= 8 x chunk = 8589934592: ` +
			"staging holds two rounds of sends and receives over two link classes, each at least one chunk (the default staging bytes; set --staging-bytes or M2N_STAGING_BYTES to at least 8 x chunk)"},
		{map[string]string{"chunk-bytes": "1GiB", "staging-bytes": "2GiB"}, 1 << 30, 2 << 30, `--staging-bytes "2GiB": staging bytes 2147483648`},
		{map[string]string{"chunk-bytes": "1152921504606846976"}, 1 << 60, 0, `--chunk-bytes "1152921504606846976": chunk bytes 1152921504606846976, want at most 1152921504606846975`},
		{map[string]string{}, 0, 1024, "staging bytes 1024, want >= 8 x chunk"}, // no setting gave it: as it is
	} {
		err := CheckOptions(session.Options{ChunkBytes: c.chunk, StagingBytes: c.staging}, lookup(c.flags))
		var e *Error
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.flags, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", c.flags, err, c.want)
		case len(c.flags) == 0 && errors.As(err, &e):
			t.Errorf("%v: blamed on %s", c.flags, e.Name)
		}
	}
	t.Setenv("M2N_GPU_DRIVER", "fast")
	if err := CheckOptions(session.Options{}, lookup(nil)); err == nil || err.Error() != `M2N_GPU_DRIVER "fast": want host, replay or graph` {
		t.Errorf("a variable Join reads itself: %v", err)
	}
}

// TestExplainSchedule: a schedule refused for its chunks says where the
// chunk and staging sizes came from and suggests a chunk; other errors
// pass as they are.
func TestExplainSchedule(t *testing.T) {
	lay := func(pl string, start int) placement.Layout {
		m, err := mesh.Interval([]int{2}, start)
		if err != nil {
			t.Fatal(err)
		}
		ps, _ := placement.Parse(pl)
		l, err := placement.NewLayout([]int64{4096, 4096}, dtype.F32, m, ps)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	p, err := reshard.NewPlan(lay("S0", 0), lay("S1", 2), 4, reshard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.ScheduleOptions{ChunkBytes: 1, StagingBytes: 8}
	_, serr := reshard.Flat.Schedule([]*reshard.Plan{p}, reshard.Topology{}, opts)
	got := ExplainSchedule(serr, p, opts, lookup(map[string]string{"chunk-bytes": "1"})).Error()
	want := serr.Error() + "; chunk bytes 1 (from --chunk-bytes), staging bytes 8 (the default; --staging-bytes or M2N_STAGING_BYTES sets it)" +
		": chunks of 16 bytes (--chunk-bytes 16 --staging-bytes 128) would make about 4194304"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if e := ExplainSchedule(serr, p, opts, lookup(nil)); !errors.Is(e, serr) {
		t.Errorf("the cause is lost: %v", e)
	}
	other := errors.New("other")
	if ExplainSchedule(other, p, opts, lookup(nil)) != other || ExplainSchedule(nil, p, opts, lookup(nil)) != nil {
		t.Errorf("other errors changed")
	}
	// 64 MiB in 1-byte chunks made 2^24 messages; 16-byte chunks make
	// 2^22, half of MaxMessages.
	if c, n, ok := suggestChunk(p, 1, 16777216); !ok || c != 16 || n != 4194304 {
		t.Errorf("suggestChunk = %d, %d, %v; want 16, 4194304, true", c, n, ok)
	}
	for _, chunk := range []int64{1 << 40, math.MaxInt64} {
		if _, _, ok := suggestChunk(p, chunk, 16777216); ok {
			t.Errorf("suggestChunk from %d found a chunk past 1 TiB", chunk)
		}
	}
}

// TestAgreed: every M2N_ variable but each rank's own, sorted, values
// trimmed.
func TestAgreed(t *testing.T) {
	t.Setenv("M2N_ZZ_TEST", " 2 ")
	t.Setenv("M2N_AA_TEST", "1")
	t.Setenv("M2N_FAULT_WIRE", "3")
	t.Setenv("M2N_LOG_LEVEL", "debug")
	t.Setenv("M2N_MPITEST_MARK", "y")
	got := strings.Join(Agreed(), " ")
	if !strings.Contains(got, "M2N_AA_TEST=1") || !strings.Contains(got, "M2N_ZZ_TEST=2") || strings.Index(got, "M2N_AA") > strings.Index(got, "M2N_ZZ") {
		t.Errorf("agreed %q", got)
	}
	for _, own := range []string{"M2N_FAULT_WIRE", "M2N_LOG_LEVEL", "M2N_MPITEST_MARK"} {
		if strings.Contains(got, own) {
			t.Errorf("%s is agreed: %q", own, got)
		}
	}
}
