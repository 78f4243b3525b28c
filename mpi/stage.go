package mpi

import (
	"fmt"

	"github.com/m2n-dev/m2n/pipeline"
)

// SplitStages builds one communicator per pipeline stage from c (whose
// ranks the layout names): stage s's communicator holds its trainer ranks
// and every generator rank, ranked in pipeline.Layout.Members order. It
// returns, for this rank, the communicator of each stage it belongs to and
// nil for the others. Every rank of c must call it (one collective split
// per stage).
func (c *Comm) SplitStages(l pipeline.Layout) ([]*Comm, error) {
	if err := l.Validate(c.Size()); err != nil {
		return nil, err
	}
	me := c.Rank()
	out := make([]*Comm, l.Stages())
	for s := range out {
		color, key := undefined, 0
		if lr := l.LocalRank(s, me); lr >= 0 {
			color, key = s, lr
		}
		sc, err := c.Split(color, key)
		if err != nil {
			for _, x := range out[:s] {
				if x != nil {
					_ = x.Free()
				}
			}
			return nil, fmt.Errorf("stage %d: %w", s, err)
		}
		out[s] = sc
	}
	return out, nil
}
