package bounds_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
)

// TestAutoBuckets moves a call of small and large tensors with auto in
// buckets: the model picks flat for the buckets of small tensors (their
// latency dominates) and hier for the large replicated ones, every bucket
// fills one joint schedule, and every element of every tensor arrives.
func TestAutoBuckets(t *testing.T) {
	const world = 2 + 4
	src, _ := mesh.Interval([]int{2}, 0)
	dst, _ := mesh.Interval([]int{2, 2}, 2)
	var specs []refit.Spec
	for i := 0; i < 12; i++ {
		shape := "8x4" // small: a bucket of its own kind
		if i%4 == 3 {
			shape = "2048x256" // large
		}
		s, err := placement.ParseLayout(shape, dtype.BF16, src, "S0")
		if err != nil {
			t.Fatal(err)
		}
		d, err := placement.ParseLayout(shape, dtype.BF16, dst, "R,S1")
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, refit.Spec{Name: fmt.Sprintf("t%d", i), Src: s, Dst: d})
	}
	plans := make([]*reshard.Plan, len(specs))
	for i, sp := range specs {
		var err error
		if plans[i], err = reshard.NewPlan(sp.Src, sp.Dst, world, reshard.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	topo, err := hier.Domains(make([]int, world), specs[0].Src, specs[0].Dst, hier.DomainSizes{Dst: 2})
	if err != nil {
		t.Fatal(err)
	}
	opts := reshard.ScheduleOptions{ChunkBytes: 16 << 10, StagingBytes: 1 << 20}
	auto := bounds.Auto{Fabric: bounds.Fabric{NetBW: 1e9, LocalBW: 1e10, Latency: 10e-6}, Buckets: 4 << 10}
	buckets := auto.BucketsOf(plans, topo, opts)
	routes := map[string]int{}
	for _, b := range buckets {
		routes[b.Choice.Route] += len(b.Tensors)
	}
	if routes["flat"] == 0 || routes["hier"] == 0 {
		t.Fatalf("buckets chose %v, want flat for the small tensors and hier for the large", routes)
	}
	s, err := auto.Schedule(plans, topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	if s.Route != "auto:mixed" || !strings.Contains(s.Note, "buckets") {
		t.Fatalf("route %q, note %q", s.Route, s.Note)
	}
	errs := inproc.NewWorld(world).Run(func(tr transport.Transport) error {
		r := tr.Rank()
		bufs := make([]refit.TensorBuffers, len(specs))
		for i, sp := range specs {
			if sp.Src.Mesh().Contains(r) {
				b := make([]byte, sp.Src.LocalBytes(r))
				if err := pattern.Fill(sp.Src, r, uint64(i), b, placement.View{}); err != nil {
					return err
				}
				bufs[i].Src = transport.HostBuffer(b)
			}
			if sp.Dst.Mesh().Contains(r) {
				bufs[i].Dst = transport.HostBuffer(bytes.Repeat([]byte{pattern.Poison}, int(sp.Dst.LocalBytes(r))))
			}
		}
		// one move of the joint schedule with the host driver
		move := func() error {
			prog, err := program.Compile(s, r, program.CompileOptions{MaxInPlace: transport.MaxInPlace(tr)})
			if err != nil {
				return err
			}
			d, err := refit.NewHostDriver(prog, tr, transport.HostMemory{}, 0)
			if err != nil {
				return err
			}
			defer d.Close()
			_, err = d.Move(context.Background(), refit.StepInput{Bufs: bufs})
			return err
		}
		if err := move(); err != nil {
			tr.Abort(err)
			return err
		}
		for i, sp := range specs {
			if bufs[i].Dst != nil {
				if err := pattern.Check(sp.Dst, r, uint64(i), bufs[i].Dst.(transport.HostBuffer), placement.View{}); err != nil {
					return fmt.Errorf("%s: %w", sp.Name, err)
				}
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
