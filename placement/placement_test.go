package placement

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want []Placement
		err  string
	}{
		{in: "S0,R", want: []Placement{Shard(0), Replicate()}},
		{in: "Shard(0),Replicate()", want: []Placement{Shard(0), Replicate()}},
		{in: "s2, r", want: []Placement{Shard(2), Replicate()}},
		{in: "R", want: []Placement{Replicate()}},
		{in: "Shard( 1 )", want: []Placement{Shard(1)}},
		{in: "", err: "empty placements"},
		{in: "S", err: `unknown placement "S"`},
		{in: "Sx", err: `shard dim "x" is not an integer`},
		{in: "S-1", err: "shard dim -1 is negative"},
		{in: "X0", err: `unknown placement "X0"`},
		{in: "S0,Partial()", err: "Partial placements"},
		{in: "_StridedShard(dim=0, sf=2),R", err: "strided shards"},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"Partial(sum)", "_StridedShard(0, split_factor=2)"} {
		if _, err := Parse(in); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Parse(%q) = %v, want ErrUnsupported", in, err)
		}
	}
}

// TestChunk checks torch.chunk's unbalanced split, which a balanced
// "base+1" split gets wrong.
func TestChunk(t *testing.T) {
	tests := []struct {
		n, k int64
		want []int64
	}{
		{10, 4, []int64{3, 3, 3, 1}},
		{5, 4, []int64{2, 2, 1, 0}},
		{2, 8, []int64{1, 1, 0, 0, 0, 0, 0, 0}},
		{8, 4, []int64{2, 2, 2, 2}},
		{0, 3, []int64{0, 0, 0}},
		{7, 1, []int64{7}},
	}
	for _, tc := range tests {
		var got []int64
		lo := int64(0)
		for r := int64(0); r < tc.k; r++ {
			iv, err := Chunk(Interval{0, tc.n}, tc.k, r)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, iv.Len())
			if iv.Len() > 0 && iv.Lo != lo {
				t.Errorf("%d over %d part %d starts at %d, want %d", tc.n, tc.k, r, iv.Lo, lo)
			}
			lo = iv.Hi
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d over %d: %v, want %v", tc.n, tc.k, got, tc.want)
		}
	}
}

func TestParseShape(t *testing.T) {
	for in, want := range map[string][]int64{"7168x2048": {7168, 2048}, "0x4": {0, 4}, "scalar": {}, "5": {5}} {
		got, err := ParseShape(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseShape(%q) = %v, %v", in, got, err)
		}
	}
	for in, msg := range map[string]string{"": "empty shape", "8x-4": "dim -4 is negative", "8xa": `dim "a"`,
		"1x1x1x1x1x1x1x1x1": "9 dims"} {
		if _, err := ParseShape(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseShape(%q) = %v, want %q", in, err, msg)
		}
	}
}

func TestNewLayoutRejects(t *testing.T) {
	m, _ := mesh.Interval([]int{2, 2}, 0)
	tests := []struct {
		name  string
		shape []int64
		dt    dtype.DType
		ps    []Placement
		err   string
	}{
		{"count", []int64{4}, dtype.F32, []Placement{Shard(0)}, "1 placements [S0] for a 2-axis mesh 2x2"},
		{"dim", []int64{4}, dtype.F32, []Placement{Shard(0), Shard(1)}, "shard dim 1 is out of range for a 1-dim tensor 4"},
		{"scalar shard", []int64{}, dtype.F32, []Placement{Shard(0), Replicate()}, "out of range for a 0-dim tensor scalar"},
		{"dtype", []int64{4}, dtype.DType(0), []Placement{Replicate(), Replicate()}, "invalid dtype"},
		{"negative", []int64{4, -1}, dtype.F32, []Placement{Replicate(), Replicate()}, "negative dim -1"},
		{"huge", []int64{1 << 40, 1 << 40}, dtype.F32, []Placement{Replicate(), Replicate()}, "1099511627776x1099511627776 of f32 is too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewLayout(tc.shape, tc.dt, m, tc.ps)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// FuzzParse checks that the placement, dtype and shape parsers never panic
// and that accepted placements format back to themselves.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"S0,R", "Shard(0),Replicate()", "Partial()", "_StridedShard(0, sf=2)", "bf16", "7168x2048", "scalar", "S99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ps, err := Parse(s); err == nil {
			back, err := Parse(Format(ps))
			if err != nil || !slices.Equal(back, ps) {
				t.Fatalf("%q: %v formats to %q, parses to %v, %v", s, ps, Format(ps), back, err)
			}
		}
		if sh, err := ParseShape(s); err == nil {
			back, err := ParseShape(FormatShape(sh))
			if err != nil || !slices.Equal(back, sh) {
				t.Fatalf("%q: shape %v round-trips to %v, %v", s, sh, back, err)
			}
		}
		_, _ = dtype.Parse(s)
	})
}

func TestBoxNext(t *testing.T) {
	b := Box{Lo: []int64{1, 2, 0}, Hi: []int64{3, 4, 9}}
	idx := []int64{1, 2}
	var got [][2]int64
	for {
		got = append(got, [2]int64{idx[0], idx[1]})
		if !b.Next(idx) {
			break
		}
	}
	want := [][2]int64{{1, 2}, {1, 3}, {2, 2}, {2, 3}}
	if !slices.Equal(got, want) || idx[0] != 1 || idx[1] != 2 {
		t.Errorf("Next walked %v, ended at %v; want %v, back at [1 2]", got, idx, want)
	}
	if b.Next(nil) {
		t.Error("Next(nil) = true")
	}
}
