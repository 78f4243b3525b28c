// Package layouttest builds the layouts that tests name by their
// spellings ("8x4", "bf16", "2x2", "R,S0"), failing the test where one does
// not parse or does not fit.
package layouttest

import (
	"testing"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
)

// Layout returns the layout of a tensor shaped shape ("8x4", "scalar") of
// dtype dt on mesh m, placed by placements ("R,S0").
func Layout(t testing.TB, shape string, dt dtype.DType, m mesh.Mesh, placements string) placement.Layout {
	t.Helper()
	l, err := placement.ParseLayout(shape, dt, m, placements)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Interval returns the mesh shaped shape of the ranks first, first+1, ...
// in row-major order.
func Interval(t testing.TB, shape []int, first int) mesh.Mesh {
	t.Helper()
	m, err := mesh.Interval(shape, first)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Ranks returns the mesh shaped shape of ranks, in row-major order.
func Ranks(t testing.TB, shape []int, ranks []int) mesh.Mesh {
	t.Helper()
	m, err := mesh.New(shape, ranks)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// MeshShape parses a mesh shape ("2x2").
func MeshShape(t testing.TB, s string) []int {
	t.Helper()
	ms, err := mesh.ParseShape(s)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// DType parses a dtype ("bf16").
func DType(t testing.TB, s string) dtype.DType {
	t.Helper()
	dt, err := dtype.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return dt
}
