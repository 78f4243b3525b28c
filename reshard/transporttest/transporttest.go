// Package transporttest is the conformance suite every reshard transport
// runs: the same reshard cases, on every route, checked element by element,
// over the in-process transport, over MPI across processes, and over NCCL on
// GPUs. Cases come from the conformance pairs file (testdata/
// reshard_pairs.txt) in three rank arrangements: the paper's disjoint
// intervals, permuted rank lists, and meshes that share ranks.
package transporttest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/m2n-dev/m2n/internal/pattern"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// Pair is one line of the conformance pairs file.
type Pair struct {
	Line                                         int
	Shape, DType, SrcMesh, SrcPl, DstMesh, DstPl string
}

func (p Pair) String() string {
	return fmt.Sprintf("%s %s %s %s -> %s %s", p.Shape, p.DType, p.SrcMesh, p.SrcPl, p.DstMesh, p.DstPl)
}

// ReadPairs reads a pairs file: one case a line, fields "shape | dtype |
// source mesh | source placements | destination mesh | destination
// placements", '#' comments.
func ReadPairs(path string) ([]Pair, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParsePairs(f, path)
}

// ParsePairs reads pairs in the format of ReadPairs from r; name is used in
// errors.
func ParsePairs(r io.Reader, path string) ([]Pair, error) {
	var out []Pair
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Split(line, "|")
		if len(fs) != 6 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 6", path, n, len(fs))
		}
		for i := range fs {
			fs[i] = strings.TrimSpace(fs[i])
		}
		out = append(out, Pair{Line: n, Shape: fs[0], DType: fs[1], SrcMesh: fs[2], SrcPl: fs[3], DstMesh: fs[4], DstPl: fs[5]})
	}
	return out, sc.Err()
}

// Arrangement places a pair's meshes on communicator ranks.
type Arrangement string

const (
	// Disjoint puts the source on [0, M) and the destination on [M, M+N).
	Disjoint Arrangement = "disjoint"
	// Permuted draws both rank lists from a fixed shuffle of [0, M+N).
	Permuted Arrangement = "permuted"
	// Overlapping starts the destination mesh inside the source mesh, so
	// some ranks hold both a source and a destination buffer.
	Overlapping Arrangement = "overlapping"
	// Colocated puts both meshes on the same ranks from 0, the destination
	// in reverse order (colocated training and generation): every rank
	// holds both buffers and most data still crosses ranks. It is not in
	// Arrangements; small jobs (two GPUs) use it.
	Colocated Arrangement = "colocated"
)

// Arrangements lists every arrangement.
var Arrangements = []Arrangement{Disjoint, Permuted, Overlapping}

// Case is a pair in one arrangement.
type Case struct {
	Pair
	Arrangement Arrangement
	Src, Dst    placement.Layout
}

// World returns the ranks the case needs.
func (c Case) World() int {
	w := 0
	for _, m := range []mesh.Mesh{c.Src.Mesh(), c.Dst.Mesh()} {
		for i := 0; i < m.Size(); i++ {
			w = max(w, m.RankAt(i)+1)
		}
	}
	return w
}

func (c Case) String() string {
	return fmt.Sprintf("line %d %s [%s: src %s, dst %s]", c.Line, c.Pair, c.Arrangement,
		mesh.FormatRanks(c.Src.Mesh().Ranks()), mesh.FormatRanks(c.Dst.Mesh().Ranks()))
}

// Layouts builds the pair's layouts in an arrangement.
func (p Pair) Layouts(a Arrangement) (Case, error) {
	shape, err := placement.ParseShape(p.Shape)
	if err != nil {
		return Case{}, err
	}
	dt, err := placement.ParseDType(p.DType)
	if err != nil {
		return Case{}, err
	}
	sm, err := mesh.ParseShape(p.SrcMesh)
	if err != nil {
		return Case{}, err
	}
	dm, err := mesh.ParseShape(p.DstMesh)
	if err != nil {
		return Case{}, err
	}
	m, n := prod(sm), prod(dm)
	var srcRanks, dstRanks []int
	switch a {
	case Disjoint:
		srcRanks, dstRanks = seq(0, m), seq(m, n)
	case Permuted:
		perm := rand.New(rand.NewPCG(uint64(p.Line), 7)).Perm(m + n)
		srcRanks, dstRanks = perm[:m], perm[m:]
	case Overlapping:
		start := m / 2
		srcRanks, dstRanks = seq(0, m), seq(start, n)
	case Colocated:
		srcRanks, dstRanks = seq(0, m), seq(0, n)
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			dstRanks[i], dstRanks[j] = dstRanks[j], dstRanks[i]
		}
	default:
		return Case{}, fmt.Errorf("unknown arrangement %q", a)
	}
	build := func(ms []int, ranks []int, pl string) (placement.Layout, error) {
		mm, err := mesh.New(ms, ranks)
		if err != nil {
			return placement.Layout{}, err
		}
		ps, err := placement.Parse(pl)
		if err != nil {
			return placement.Layout{}, err
		}
		return placement.NewLayout(shape, dt, mm, ps)
	}
	c := Case{Pair: p, Arrangement: a}
	if c.Src, err = build(sm, srcRanks, p.SrcPl); err != nil {
		return Case{}, err
	}
	if c.Dst, err = build(dm, dstRanks, p.DstPl); err != nil {
		return Case{}, err
	}
	return c, nil
}

// LoadCases reads a pairs file and expands every pair into every
// arrangement; a file with fewer than min pairs is an error (a truncated
// conformance file must not pass quietly).
func LoadCases(path string, min int) ([]Case, error) {
	pairs, err := ReadPairs(path)
	if err != nil {
		return nil, err
	}
	if len(pairs) < min {
		return nil, fmt.Errorf("%s holds %d pairs, want at least %d", path, len(pairs), min)
	}
	return Cases(pairs)
}

// Cases expands every pair into every arrangement.
func Cases(pairs []Pair) ([]Case, error) {
	var out []Case
	for _, p := range pairs {
		for _, a := range Arrangements {
			c, err := p.Layouts(a)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", p.Line, err)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// Env is one rank's view of a transport under test.
type Env struct {
	T    reshard.Transport
	Mem  reshard.Memory
	IO   reshard.HostIO
	Topo reshard.Topology
	Opts reshard.ScheduleOptions
	// Coalesce is the CompileOptions.CoalesceBytes the case runs with.
	Coalesce int64
	// Padded places every part inside a larger buffer through a view (a
	// few elements before it, and every row padded), as fused weights
	// sit, instead of a dense buffer of its own.
	Padded bool
}

// paddedView returns the view Env.Padded uses for a part of shape: 3
// elements before the part, and 5 after every innermost row.
func paddedView(shape []int64) placement.View {
	nd := len(shape)
	st := make([]int64, nd)
	acc := int64(1)
	for d := nd - 1; d >= 0; d-- {
		st[d] = acc
		n := max(shape[d], 1)
		if d == nd-1 {
			n += 5
		}
		acc *= n
	}
	return placement.View{Offset: 3, Strides: st}
}

// RunCase runs one case on the calling rank (every rank of the transport
// calls it with the same arguments): it plans on the transport's world,
// fills the source buffers with the pattern and poisons the destination
// buffers, runs the route's schedule, and checks every destination element.
// Ranks outside both meshes take part with no buffers.
func RunCase(ctx context.Context, env Env, c Case, route reshard.Route) (reshard.Stats, error) {
	rank, world := env.T.Rank(), env.T.Size()
	var st reshard.Stats
	if c.World() > world {
		return st, fmt.Errorf("%v needs %d ranks, the transport has %d", c, c.World(), world)
	}
	plan, err := reshard.NewPlan(c.Src, c.Dst, world, reshard.Options{})
	if err != nil {
		return st, err
	}
	sched, err := route.Schedule([]*reshard.Plan{plan}, env.Topo, env.Opts)
	if err != nil {
		return st, err
	}
	var bufs reshard.TensorBuffers
	var views reshard.TensorViews
	var free []reshard.Buffer
	defer func() {
		for _, b := range free {
			env.Mem.Free(b)
		}
	}()
	// part returns a side's view and buffer size on this rank.
	part := func(l placement.Layout) (placement.View, int64, error) {
		box, _ := l.RankBox(rank)
		if !env.Padded || box.Empty() {
			return placement.View{}, l.LocalBytes(rank), nil
		}
		v := paddedView(box.Shape())
		ext, err := v.Extent(box.Shape())
		return v, (ext + 4) * l.ElemSize(), err
	}
	if c.Src.Mesh().Contains(rank) {
		v, n, err := part(c.Src)
		if err != nil {
			return st, err
		}
		views.Src = v
		host := make([]byte, n)
		if err := pattern.Fill(c.Src, rank, 0, host, v); err != nil {
			return st, err
		}
		if bufs.Src, err = env.Mem.Alloc(n); err != nil {
			return st, err
		}
		free = append(free, bufs.Src)
		if err := env.IO.Upload(bufs.Src, host); err != nil {
			return st, err
		}
	}
	var got []byte
	if c.Dst.Mesh().Contains(rank) {
		v, n, err := part(c.Dst)
		if err != nil {
			return st, err
		}
		views.Dst = v
		got = make([]byte, n)
		for i := range got {
			got[i] = pattern.Poison
		}
		if bufs.Dst, err = env.Mem.Alloc(n); err != nil {
			return st, err
		}
		free = append(free, bufs.Dst)
		if err := env.IO.Upload(bufs.Dst, got); err != nil {
			return st, err
		}
	}
	prog, err := reshard.Compile(sched, rank, reshard.CompileOptions{Views: []reshard.TensorViews{views},
		MaxInPlace: reshard.MaxInPlace(env.T), CoalesceBytes: env.Coalesce})
	if err != nil {
		return st, err
	}
	ex := &reshard.Executor{T: env.T, Mem: env.Mem}
	defer ex.Close()
	st, err = ex.Run(ctx, prog, []reshard.TensorBuffers{bufs})
	if err != nil {
		return st, err
	}
	if got != nil {
		if err := env.IO.Download(got, bufs.Dst); err != nil {
			return st, err
		}
		if err := pattern.Check(c.Dst, rank, 0, got, views.Dst); err != nil {
			return st, fmt.Errorf("%s: %w", sched.Route, err)
		}
		if env.Padded {
			// bytes outside the part keep their poison.
			keep := make([]byte, len(got))
			copy(keep, got)
			if err := pattern.PoisonPart(c.Dst, rank, keep, views.Dst); err != nil {
				return st, err
			}
			for i, b := range keep {
				if b != pattern.Poison {
					return st, fmt.Errorf("%s: rank %d: byte %d outside the destination view changed", sched.Route, rank, i)
				}
			}
		}
	}
	return st, nil
}

func prod(s []int) int {
	n := 1
	for _, v := range s {
		n *= v
	}
	return n
}

func seq(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}
