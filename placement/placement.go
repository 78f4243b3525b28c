package placement

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// kind says how a mesh axis places a tensor.
type kind uint8

const (
	// kindReplicate places a full copy on every coordinate of the axis.
	kindReplicate kind = iota
	// kindShard splits one tensor dim over the axis with torch.chunk.
	kindShard
)

// Placement is what one mesh axis does to the tensor: Shard(d) or
// Replicate(). The zero Placement is Replicate(); Placements compare with
// ==.
type Placement struct {
	kind kind
	dim  int // the tensor dim a Shard splits; 0 for Replicate
}

// Shard returns the placement that splits tensor dim d.
func Shard(d int) Placement { return Placement{kind: kindShard, dim: d} }

// Replicate returns the placement that copies the tensor along the axis.
func Replicate() Placement { return Placement{kind: kindReplicate} }

// ShardDim returns d and true for Shard(d), and 0 and false for
// Replicate().
func (p Placement) ShardDim() (int, bool) { return p.dim, p.kind == kindShard }

// String renders the short form: "S0" or "R".
func (p Placement) String() string {
	if p.kind == kindShard {
		return "S" + strconv.Itoa(p.dim)
	}
	return "R"
}

// ErrUnsupported marks placements that exist in DTensor but that m2n does
// not move: Partial (pending reductions) and _StridedShard (non-contiguous
// index sets). Callers can test for it with errors.Is.
var ErrUnsupported = errors.New("unsupported placement")

// Parse parses a comma-separated placement list, one entry per mesh axis.
// Entries are S<d>, R, or DTensor's spelling Shard(d) and Replicate().
// Partial and strided shards return an error wrapping ErrUnsupported.
func Parse(s string) ([]Placement, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty placements: want one per mesh axis, like S0,R")
	}
	items := splitTop(s)
	out := make([]Placement, 0, len(items))
	for _, item := range items {
		p, err := parseOne(strings.TrimSpace(item))
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// splitTop splits on commas that are not inside parentheses, so that
// "_StridedShard(0, split_factor=2)" stays one entry.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseOne(item string) (Placement, error) {
	low := strings.ToLower(item)
	switch {
	case low == "r" || low == "replicate()" || low == "replicate":
		return Replicate(), nil
	case strings.HasPrefix(low, "partial"), low == "p":
		return Placement{}, fmt.Errorf("placement %q: Partial placements (pending reductions) are not supported: %w", item, ErrUnsupported)
	case strings.HasPrefix(low, "_stridedshard") || strings.HasPrefix(low, "stridedshard"):
		return Placement{}, fmt.Errorf("placement %q: strided shards (_StridedShard) are not supported: %w", item, ErrUnsupported)
	case strings.HasPrefix(low, "shard(") && strings.HasSuffix(low, ")"):
		return parseDim(item, low[len("shard("):len(low)-1])
	case strings.HasPrefix(low, "s") && len(low) > 1:
		return parseDim(item, low[1:])
	}
	return Placement{}, fmt.Errorf("unknown placement %q: want S<dim>, R, Shard(<dim>) or Replicate()", item)
}

func parseDim(item, num string) (Placement, error) {
	d, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil {
		return Placement{}, fmt.Errorf("unknown placement %q: the shard dim %q is not an integer", item, num)
	}
	if d < 0 {
		return Placement{}, fmt.Errorf("placement %q: shard dim %d is negative", item, d)
	}
	return Shard(d), nil
}

// Format renders a placement list in the short form, "S0,R".
func Format(ps []Placement) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}
