package session_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/bounds"
	"github.com/m2n-dev/m2n/hier"
	"github.com/m2n-dev/m2n/internal/testutil/mpitest"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/modelspec"
	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/session"
)

// TestModelMethods moves a scaled Llama from a 2-stage trainer to a TP2
// generator through the Model's methods alone (no field of it read):
// EachPart fills the sources and checks every destination part through
// their views, Routes and StageCall say what each stage runs, Memory stays
// within the staging bound, Bounds gives every route's bound on every
// rank, and ModelFootprint counts the rank's buffers.
func TestModelMethods(t *testing.T) {
	mpitest.Run(t, 4, func(t mpitest.T, c *mpi.Comm) {
		l, err := modelspec.Spec{Model: "llama-3.1-70b", Scale: 32, Layers: 2, Train: "tp=1,pp=2", Gen: "tp=2"}.Layouts()
		if err != nil {
			t.Fatal(err)
		}
		s := join(t, c, session.Options{Timeout: 30 * time.Second, StagingBytes: 16 << 20, ChunkBytes: 1 << 20})
		defer s.Close()
		fp := s.ModelFootprint(l, false)
		if src, dst := l.RankBytes(s.Rank()); fp.Buffers != src+dst || fp.Staging == 0 || fp.Plan == 0 {
			t.Errorf("footprint %+v for %d + %d bytes of buffers", fp, src, dst)
		}
		m, err := s.PrepareModel(context.Background(), l, hier.Hier{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		b, err := m.Alloc()
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free(b)
		if err := m.EachPart(b, model.Src, true, func(p session.ModelPart) error {
			return pattern.Fill(p.Tensor.Src, p.Rank, uint64(p.Index), p.Bytes, p.Part.View)
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Run(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		parts := 0
		if err := m.EachPart(b, model.Dst, false, func(p session.ModelPart) error {
			parts++
			return pattern.Check(p.Tensor.Dst, p.Rank, uint64(p.Index), p.Bytes, p.Part.View)
		}); err != nil {
			t.Fatal(err)
		}
		if gen := s.Rank() >= 2; gen != (parts > 0) {
			t.Errorf("rank %d checked %d destination parts", s.Rank(), parts)
		}
		if m.StageCount() != 2 {
			t.Fatalf("%d stages", m.StageCount())
		}
		routes := m.Routes()
		for si := range m.StageCount() {
			in := m.Session(si) != nil
			if in != (m.StageCall(si) != nil) || in != (routes[si] == "hier") || in != (len(m.StageSpecs(si)) > 0) {
				t.Errorf("stage %d: session %v, call %v, route %q, %d specs", si, m.Session(si) != nil, m.StageCall(si) != nil, routes[si], len(m.StageSpecs(si)))
			}
		}
		if mm := m.Memory(); mm.Staging > mm.Bound || mm.Bound == 0 {
			t.Errorf("memory %+v: staging over its bound", mm)
		}
		if bs := m.Bounds(bounds.Fabric{NetBW: 50e9, LocalBW: 900e9}, 1<<20); len(bs) != 3 || !(bs[0].Seconds > 0) {
			t.Errorf("bounds %v", bs)
		} else {
			t.Log(fmt.Sprint(bs[0].Seconds))
		}
	})
}
