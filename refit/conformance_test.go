package refit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
	"github.com/m2n-dev/m2n/transport/inproc"
	"github.com/m2n-dev/m2n/transport/transporttest"
)

var routes = []reshard.Route{reshard.Flat, reshard.AllGatherBroadcast}

// TestConformanceInproc runs the transport conformance suite over the
// in-process transport: every pair of internal/conformance/reshard_pairs.txt, in every
// rank arrangement, on every route, plus one idle rank, in three set-ups:
// default staging with strided regions packed; tiny chunks that force many
// rounds, moving strided regions in place (as MPI does) from parts that sit
// in padded buffers through views, which must pack nothing; and tiny chunks
// with small messages coalesced through staging.
func TestConformanceInproc(t *testing.T) {
	cases, err := transporttest.DefaultCases(13)
	if err != nil {
		t.Fatal(err)
	}
	tiny := reshard.ScheduleOptions{ChunkBytes: 24, StagingBytes: 8 * 24}
	setups := []inprocSetup{
		{"default", reshard.DefaultScheduleOptions, false, false, 0},
		{"tiny chunks, in place, views", tiny, true, true, 0},
		{"tiny chunks, coalesced", tiny, false, false, 64},
	}
	for _, c := range cases {
		for _, r := range routes {
			for _, su := range setups {
				if su.opts.ChunkBytes < 1024 && c.Src.Bytes() > 64<<10 {
					continue // tiny chunks of a large tensor only slow the test
				}
				errs := su.world(c.World() + 1).Run(func(tr transport.Transport) error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Opts: su.opts,
						Coalesce: su.coalesce, Padded: su.padded}
					st, err := transporttest.RunCase(ctx, env, c, r)
					if err != nil {
						tr.Abort(err)
					}
					if err == nil && su.inPlace && st.Packed != 0 {
						err = fmt.Errorf("rank %d packed %d bytes on an in-place transport", tr.Rank(), st.Packed)
					}
					return err
				})
				if err := errors.Join(errs...); err != nil {
					t.Errorf("%v, %s, %s: %v", c, r.Name(), su.name, err)
				}
			}
		}
	}
}

// inprocSetup is one set-up of the in-process suites: schedule options,
// whether the transport moves strided regions in place, whether parts sit
// in padded buffers through views, and up to how many bytes small messages
// coalesce.
type inprocSetup struct {
	name     string
	opts     reshard.ScheduleOptions
	inPlace  bool
	padded   bool
	coalesce int64
}

// world returns an in-process world of n ranks, in place if su says so.
func (su inprocSetup) world(n int) *inproc.World {
	if su.inPlace {
		return inproc.NewWorldInPlace(n)
	}
	return inproc.NewWorld(n)
}

// TestExchangeInproc runs the transport-contract suite over the in-process
// transport.
func TestExchangeInproc(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		errs := inproc.NewWorld(n).Run(func(tr transport.Transport) error {
			env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}}
			return transporttest.Exchange(context.Background(), env, 6)
		})
		if err := errors.Join(errs...); err != nil {
			t.Errorf("%d ranks: %v", n, err)
		}
	}
}

// TestColocatedInproc runs every pair with both meshes on the same ranks
// (the arrangement two-GPU runs use) on flat and agbcast.
func TestColocatedInproc(t *testing.T) {
	cases, err := transporttest.ColocatedCases(transporttest.DefaultPairs())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, r := range routes {
			errs := inproc.NewWorld(c.World()).Run(func(tr transport.Transport) error {
				env := transporttest.Env{T: tr, Mem: transport.HostMemory{}, IO: transport.HostMemory{}, Opts: reshard.DefaultScheduleOptions}
				_, err := transporttest.RunCase(context.Background(), env, c, r)
				if err != nil {
					tr.Abort(err)
				}
				return err
			})
			if err := errors.Join(errs...); err != nil {
				t.Errorf("%v, %s: %v", c, r.Name(), err)
			}
		}
	}
}
