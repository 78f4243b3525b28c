package modelspec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
)

// TestPairLayouts: the destination follows the source's ranks unless it
// names its own, and the world is the highest rank plus one unless given.
func TestPairLayouts(t *testing.T) {
	p := Pair{Shape: "8x4", DType: "bf16", Src: Side{"4", "S0", ""}, Dst: Side{"2x2", "R,S0", ""}}
	src, dst, world, err := p.Layouts()
	if err != nil {
		t.Fatal(err)
	}
	if got := dst.Mesh().Ranks(); world != 8 || !slices.Equal(got, []int{4, 5, 6, 7}) || src.Mesh().RankAt(0) != 0 {
		t.Errorf("world %d, destination ranks %v", world, got)
	}
	if src.String() != "8x4 bf16 on 4[0-3] S0" || dst.String() != "8x4 bf16 on 2x2[4-7] R,S0" {
		t.Errorf("layouts %v and %v", src, dst)
	}
	p.Src.Ranks, p.Dst.Ranks, p.World = "4-7", "3,2,1,0", 12
	src, dst, world, err = p.Layouts()
	if err != nil || world != 12 || src.Mesh().RankAt(0) != 4 || !slices.Equal(dst.Mesh().Ranks(), []int{3, 2, 1, 0}) {
		t.Errorf("explicit ranks: %v %v world %d, %v", src, dst, world, err)
	}
}

// TestPairBlame: each error names the first part to blame, with its text
// (or ErrRequired for a missing one), in the order the parts are read.
func TestPairBlame(t *testing.T) {
	ok := Pair{Shape: "8x4", DType: "f32", Src: Side{"4", "S0", ""}, Dst: Side{"2x2", "R,S0", ""}}
	for _, c := range []struct {
		edit         func(*Pair)
		field, value string
		want         string // in the cause; "" for ErrRequired
	}{
		{func(p *Pair) { p.Shape = "" }, "shape", "", ""},
		{func(p *Pair) { p.Shape, p.DType = "8xq", "zz" }, "shape", "8xq", `dim "q" is not an integer`},
		{func(p *Pair) { p.DType, p.Src.Mesh = "zz", "" }, "dtype", "zz", "unknown dtype"},
		{func(p *Pair) { p.Src.Mesh = "" }, "src-mesh", "", ""},
		{func(p *Pair) { p.Src.Placements, p.Dst.Mesh = "", "" }, "src-placements", "", ""},
		{func(p *Pair) { p.Dst.Mesh = "" }, "dst-mesh", "", ""},
		{func(p *Pair) { p.Dst.Placements = "" }, "dst-placements", "", ""},
		{func(p *Pair) { p.Shape, p.DType = "99999999999x99999999999", "f64" }, "shape", "99999999999x99999999999", "too large"},
		{func(p *Pair) { p.Src.Mesh = "4x" }, "src-mesh", "4x", "not an integer"},
		{func(p *Pair) { p.Src.Mesh = "4x0" }, "src-mesh", "4x0", "axis length 0"},
		{func(p *Pair) { p.Src.Placements = "S5" }, "src-placements", "S5", "out of range"},
		{func(p *Pair) { p.Src.Placements = "Q" }, "src-placements", "Q", "unknown placement"},
		{func(p *Pair) { p.Src.Ranks = "4-6" }, "src-ranks", "4-6", "got a list of 3"},
		{func(p *Pair) { p.Dst.Ranks = "a" }, "dst-ranks", "a", "not a non-negative rank"},
		{func(p *Pair) { p.Dst.Placements = "R" }, "dst-placements", "R", "want one per mesh axis"},
		{func(p *Pair) { p.World = 3 }, "world", "3", "the meshes reach rank 7"},
	} {
		p := ok
		c.edit(&p)
		_, _, _, err := p.Layouts()
		var e *Error
		if !errors.As(err, &e) || e.Field != c.field || e.Value != c.value {
			t.Errorf("%+v: got %v, want field %s value %q", p, err, c.field, c.value)
			continue
		}
		if c.want == "" && !errors.Is(err, ErrRequired) || c.want != "" && !strings.Contains(e.Err.Error(), c.want) {
			t.Errorf("%+v: cause %v, want %q", p, e.Err, c.want)
		}
	}
}

// TestSideLayout: a side alone, its parts named with the prefix.
func TestSideLayout(t *testing.T) {
	l, err := Side{"4x2", "S0,S0", "8-15"}.Layout([]int64{13, 2}, dtype.F32, 0, "")
	if err != nil || l.Mesh().RankAt(0) != 8 {
		t.Fatalf("%v, %v", l, err)
	}
	_, err = Side{"4x2", "S0,S0", "8-14"}.Layout([]int64{13, 2}, dtype.F32, 0, "")
	if e := (*Error)(nil); !errors.As(err, &e) || e.Field != "ranks" || e.Value != "8-14" {
		t.Errorf("short rank list: %v", err)
	}
}

// TestPairStages: every stage's trainers are ranks [0, M) of its
// communicator and the generator follows them; Src.Ranks is not used, and
// a layout the world cannot hold is blamed on the stages.
func TestPairStages(t *testing.T) {
	p := Pair{Shape: "8x4", DType: "f32", Src: Side{"2", "S0", "5-6"}, Dst: Side{"2", "S1", ""}}
	l, stage, err := p.Stages(2, 6)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.Members(1), []int{2, 3, 4, 5}) {
		t.Errorf("stage 1's members %v", l.Members(1))
	}
	src, dst, err := stage(1)
	if err != nil || src.String() != "8x4 f32 on 2[0,1] S0" || dst.String() != "8x4 f32 on 2[2,3] S1" {
		t.Errorf("stage 1: %v, %v, %v", src, dst, err)
	}
	p.Dst.Ranks = "0,1"
	if _, stage, err = p.Stages(2, 6); err != nil {
		t.Fatal(err)
	}
	if _, dst, err = stage(0); err != nil || !slices.Equal(dst.Mesh().Ranks(), []int{0, 1}) {
		t.Errorf("the generator colocated with stage 0: %v, %v", dst, err)
	}
	for _, c := range []struct {
		edit         func(*Pair)
		world        int
		field, value string
		want         string
	}{
		{func(p *Pair) {}, 5, "pp-stages", "2", "with a 2-rank trainer stage and 2 generator ranks on 5 ranks: stage: generator rank 5 outside a world of 5"},
		{func(p *Pair) { p.Dst.Placements = "" }, 6, "dst-placements", "", ""},
		{func(p *Pair) { p.Shape = "8xq" }, 6, "shape", "8xq", "not an integer"},
		{func(p *Pair) { p.Dst.Mesh = "2y" }, 6, "dst-mesh", "2y", "not an integer"},
		{func(p *Pair) { p.Dst.Ranks = "q" }, 6, "dst-ranks", "q", "not a non-negative rank"},
	} {
		q := p
		q.Dst.Ranks = ""
		c.edit(&q)
		_, _, err := q.Stages(2, c.world)
		var e *Error
		if !errors.As(err, &e) || e.Field != c.field || e.Value != c.value {
			t.Errorf("%+v: got %v, want field %s value %q", q, err, c.field, c.value)
			continue
		}
		if c.want == "" && !errors.Is(err, ErrRequired) || c.want != "" && e.Err.Error() != c.want && !strings.Contains(e.Err.Error(), c.want) {
			t.Errorf("%+v: cause %v, want %q", q, e.Err, c.want)
		}
	}
	q := p
	q.Dst.Ranks, q.Src.Placements = "", "S9"
	_, stage, err = q.Stages(2, 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := stage(0); err == nil || !strings.HasPrefix(err.Error(), `src-placements "S9"`) {
		t.Errorf("a stage's bad placements: %v", err)
	}
}
