package hier

import "github.com/m2n-dev/m2n/reshard"

// ProblemOf derives the model's problem for a call of several tensors
// over one communicator: each plan's problem (FromPlan) summed, bytes and
// domain loads added, the source paths and replication the largest of any
// tensor.
func ProblemOf(plans []*reshard.Plan, topo reshard.Topology, chunk float64) Problem {
	var prob Problem
	for i, p := range plans {
		q := FromPlan(p, topo, chunk)
		if i == 0 {
			prob = q
			continue
		}
		prob.Bytes += q.Bytes
		prob.Sources = max(prob.Sources, q.Sources)
		prob.Rho = max(prob.Rho, q.Rho)
		addDomains(&prob, q)
	}
	return prob
}

// Combine is the problem of calls that run at once on disjoint source
// ranks into the same destination domains (a model's pipeline stages):
// bytes, source paths and domain loads add; replication is the largest.
func Combine(ps ...Problem) Problem {
	var out Problem
	for i, q := range ps {
		if i == 0 {
			out = q
			out.Domains = append([]DomainLoad(nil), q.Domains...)
			continue
		}
		out.Bytes += q.Bytes
		out.Sources += q.Sources
		out.Rho = max(out.Rho, q.Rho)
		out.Chunk = max(out.Chunk, q.Chunk)
		addDomains(&out, q)
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
