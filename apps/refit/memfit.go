package main

import (
	"context"
	"math"

	"github.com/m2n-dev/m2n/refit"
)

// checkMemory makes every rank compare what it is about to allocate for
// the pair with the memory it has, before anything is allocated
// (session.CheckMemory): its source and destination buffers and their host
// copies, the atomic shadow, the staging bound, the pair's plan and each
// call's (reshard.PlanSize) and the schedule's estimate. A 1 TiB tensor
// on a few ranks fails here on every rank with the numbers, naming the
// rank and the tensor, instead of dying in makeslice or being killed by
// the kernel. It is the CLI's buffer set-up that checks, not Prepare: the
// buffers come first (a program allocates its buffers, then prepares
// calls on them), and this is the first point where the whole job's
// footprint is known. Prepare then checks what the library allocates
// itself, exactly (the compiled program's staging and scratch).
func (p *pairRun) checkMemory() error {
	s, rank := p.s, p.s.Rank()
	fp := s.CallFootprint(p.specs())
	fp.Plan = addSat(fp.Plan, fp.Plan) // the pair's own plan, beside the call's
	if p.src.Mesh().Contains(rank) {
		n := p.src.LocalBytes(rank)
		fp.Buffers, fp.HostCopies = addSat(fp.Buffers, n), addSat(fp.HostCopies, n)
	}
	if p.dst.Mesh().Contains(rank) {
		n := p.dst.LocalBytes(rank)
		fp.Buffers, fp.HostCopies = addSat(fp.Buffers, n), addSat(fp.HostCopies, n)
		if s.Options().Atomic {
			fp.Staging = addSat(fp.Staging, n)
		}
	}
	if p.j.set.measure {
		fp.Buffers = addSat(fp.Buffers, 16<<20) // localBandwidth's two buffers
	}
	return s.CheckMemory(refit.WithPhase(context.Background(), "memory check before the buffers"), fp)
}

// addSat adds sizes of at least 0, saturating.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
