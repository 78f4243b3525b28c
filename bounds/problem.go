package bounds

import (
	"math"

	"github.com/m2n-dev/m2n/reshard"
)

// ProblemOf derives the bounds' problem for a call of several tensors
// over one communicator: each plan's problem (FromPlan) summed, bytes and
// domain loads added, the source paths the most any tensor has, and rho
// the byte-weighted mean of the tensors' replication (rounded), so that
// flat's rho*B counts each tensor's own replicas: a model mixes tensors
// sharded over TP and replicated DP times with norms replicated on every
// rank, and the largest rho would charge every byte with the norms'
// replication (8 times too much for DeepSeek-V3 on TP8 x DP16).
func ProblemOf(plans []*reshard.Plan, topo reshard.Topology, chunk float64) Problem {
	var prob Problem
	var rhoBytes float64
	for i, p := range plans {
		q := FromPlan(p, topo, chunk)
		rhoBytes += float64(q.Rho) * q.Bytes
		if i == 0 {
			prob = q
			continue
		}
		prob.Bytes += q.Bytes
		prob.Sources = max(prob.Sources, q.Sources)
		addDomains(&prob, q)
	}
	prob.Rho = weightedRho(prob.Rho, rhoBytes, prob.Bytes)
	return prob
}

// weightedRho is rhoBytes/bytes rounded, at least 1; fallback when there
// are no bytes.
func weightedRho(fallback int, rhoBytes, bytes float64) int {
	if bytes <= 0 {
		return fallback
	}
	return max(1, int(math.Round(rhoBytes/bytes)))
}

// Combine is the problem of calls that run at once on disjoint source
// ranks into the same destination domains (a model's pipeline stages):
// bytes, source paths and domain loads add; rho is the byte-weighted mean;
// Parts keeps each call's own bytes and sources (Of bounds by the slowest).
func Combine(ps ...Problem) Problem {
	var out Problem
	var rhoBytes float64
	var parts []Part
	for i, q := range ps {
		rhoBytes += float64(q.Rho) * q.Bytes
		if len(q.Parts) > 0 {
			parts = append(parts, q.Parts...)
		} else {
			parts = append(parts, Part{Bytes: q.Bytes, Sources: q.Sources, Rho: q.Rho})
		}
		if i == 0 {
			out = q
			out.Domains = append([]DomainLoad(nil), q.Domains...)
			continue
		}
		out.Bytes += q.Bytes
		out.Sources += q.Sources
		out.Chunk = max(out.Chunk, q.Chunk)
		addDomains(&out, q)
	}
	out.Rho = weightedRho(out.Rho, rhoBytes, out.Bytes)
	if len(parts) > 1 {
		out.Parts = parts
	}
	return out
}

// addDomains adds q's domain loads to prob's, domain by domain in order.
func addDomains(prob *Problem, q Problem) {
	for j := range q.Domains {
		if j >= len(prob.Domains) {
			prob.Domains = append(prob.Domains, q.Domains[j])
			continue
		}
		d := &prob.Domains[j]
		d.Bytes += q.Domains[j].Bytes
		d.Copies += q.Domains[j].Copies
		d.RecvFlat += q.Domains[j].RecvFlat
		d.Ranks = max(d.Ranks, q.Domains[j].Ranks)
	}
}
