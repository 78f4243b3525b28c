package pipeline

import (
	"slices"
	"strings"
	"testing"
)

// The paper's Example B: stage comm 0 = global {0,1,4}, stage comm 1 =
// {2,3,4}; rank 4 is local rank 2 in both.
func TestExampleB(t *testing.T) {
	l := Contiguous(2, 2, 1)
	if err := l.Validate(5); err != nil {
		t.Fatal(err)
	}
	if got := l.Members(0); !slices.Equal(got, []int{0, 1, 4}) {
		t.Errorf("stage 0: %v", got)
	}
	if got := l.Members(1); !slices.Equal(got, []int{2, 3, 4}) {
		t.Errorf("stage 1: %v", got)
	}
	if l.LocalRank(0, 4) != 2 || l.LocalRank(1, 4) != 2 || l.LocalRank(1, 2) != 0 || l.LocalRank(0, 3) != -1 {
		t.Error("local ranks wrong")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		want string
	}{
		{Layout{}, "no stages"},
		{Layout{Trainers: [][]int{{0}}}, "no generator"},
		{Layout{Trainers: [][]int{{0, 1}, {1, 2}}, Generators: []int{3}}, "rank 1 is both"},
		{Layout{Trainers: [][]int{{0}}, Generators: []int{1, 1}}, "generator rank 1 listed twice"},
		{Contiguous(2, 2, 2), "outside a world of 5"},
		{Layout{Trainers: [][]int{{}}, Generators: []int{0}}, "no trainer ranks"},
	} {
		err := tc.l.Validate(5)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.l, err, tc.want)
		}
	}
}

// A colocated rank trains and generates: one member, both meshes on it.
func TestColocated(t *testing.T) {
	l := Layout{Trainers: [][]int{{0}}, Generators: []int{0}}
	if err := l.Validate(1); err != nil {
		t.Fatal(err)
	}
	if got := l.Members(0); !slices.Equal(got, []int{0}) {
		t.Errorf("members %v", got)
	}
	if !slices.Equal(l.SrcRanks(0), []int{0}) || !slices.Equal(l.DstRanks(0), []int{0}) {
		t.Errorf("src %v dst %v", l.SrcRanks(0), l.DstRanks(0))
	}
	ex := Contiguous(2, 2, 1)
	if !slices.Equal(ex.DstRanks(1), []int{2}) {
		t.Errorf("example B destination %v", ex.DstRanks(1))
	}
}
