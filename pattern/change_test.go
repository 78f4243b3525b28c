package pattern_test

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
)

// TestChange checks Change against its contract: a whole tensor and its
// shards (in another layout, through a view with a gap) change the same
// elements to the same bytes; about frac of the elements change, each to
// another value; frac 0 and 1 change none and all; CheckChanged accepts
// the result and names a wrong element.
func TestChange(t *testing.T) {
	one, _ := mesh.Interval([]int{1}, 0)
	four, _ := mesh.Interval([]int{2, 2}, 0)
	whole, err := placement.ParseLayout("300x257", dtype.BF16, one, "R")
	if err != nil {
		t.Fatal(err)
	}
	shards, err := placement.ParseLayout("300x257", dtype.BF16, four, "S1,S0")
	if err != nil {
		t.Fatal(err)
	}
	n := int64(300 * 257)
	for _, frac := range []float64{0, 0.001, 0.01, 0.5, 1} {
		w := make([]byte, whole.LocalBytes(0))
		if err := pattern.Fill(whole, 0, 3, w, placement.View{}); err != nil {
			t.Fatal(err)
		}
		orig := bytes.Clone(w)
		if err := pattern.Change(whole, 0, 3, 1, frac, w, placement.View{}); err != nil {
			t.Fatal(err)
		}
		changed := int64(0)
		for i := 0; i < len(w); i += 2 {
			if w[i] != orig[i] || w[i+1] != orig[i+1] {
				changed++
			}
		}
		want := float64(n) * frac
		if math.Abs(float64(changed)-want) > 5*math.Sqrt(want)+1 || frac == 1 && changed != n {
			t.Errorf("frac %v: %d of %d elements changed, want about %.0f", frac, changed, n, want)
		}
		if err := pattern.Change(whole, 0, 3, 2, frac, w, placement.View{}); err != nil {
			t.Fatal(err)
		}
		if err := pattern.CheckChanged(whole, 0, 3, 2, frac, w, placement.View{}); err != nil {
			t.Errorf("frac %v: the whole tensor: %v", frac, err)
		}
		view := placement.View{Offset: 5}
		for r := 0; r < 4; r++ {
			box, _ := shards.RankBox(r)
			ext, _ := view.Extent(box.Shape())
			part := make([]byte, ext*2)
			if err := pattern.Fill(shards, r, 3, part, view); err != nil {
				t.Fatal(err)
			}
			for step := uint64(1); step <= 2; step++ {
				if err := pattern.Change(shards, r, 3, step, frac, part, view); err != nil {
					t.Fatal(err)
				}
			}
			if err := pattern.CheckChanged(shards, r, 3, 2, frac, part, view); err != nil {
				t.Errorf("frac %v: shard %d: %v", frac, r, err)
			}
			part[len(part)-1] ^= 0x40
			var me *pattern.MismatchError
			if err := pattern.CheckChanged(shards, r, 3, 2, frac, part, view); !errors.As(err, &me) || me.Wrong != 1 {
				t.Errorf("frac %v: shard %d with a flipped byte: %v", frac, r, err)
			}
		}
	}
	if err := pattern.Change(whole, 0, 3, 1, 1.5, make([]byte, whole.LocalBytes(0)), placement.View{}); err == nil {
		t.Error("a fraction of 1.5 was accepted")
	}
}
