package placement

import (
	"fmt"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
)

// ParseLayout builds a layout from the spellings refit's flags use: a shape
// like "7168x2048", a dtype, a mesh, and placements like "R,S1" or
// "Replicate(),Shard(1)" (one per mesh axis). Errors name the part that
// does not parse.
func ParseLayout(shape string, dt dtype.DType, m mesh.Mesh, placements string) (Layout, error) {
	s, err := ParseShape(shape)
	if err != nil {
		return Layout{}, fmt.Errorf("shape %q: %w", shape, err)
	}
	ps, err := Parse(placements)
	if err != nil {
		return Layout{}, fmt.Errorf("placements %q: %w", placements, err)
	}
	return NewLayout(s, dt, m, ps)
}
