package main

import (
	"fmt"

	"github.com/m2n-dev/m2n/internal/pattern"
	"github.com/m2n-dev/m2n/placement"
)

// checkIteration compares every element of this rank's destination with
// the pattern after iteration it (the first warmup iterations are the
// warm-up), and returns the first wrong element's message, "" if every
// element is right. --check checks every iteration, warm-up included, not
// only the last: the destinations are poisoned before each, so a wrong
// byte in any iteration (one flipped on the wire, say) fails the check
// even when a later iteration would have overwritten it.
func (p *pairRun) checkIteration(it, warmup int) (string, error) {
	if err := p.s.Memory().Download(p.dstHost, p.dstBuf); err != nil {
		return "", err
	}
	if b, ok, _ := faultAt("M2N_FAULT_CORRUPT", jobRank); ok && b < len(p.dstHost) {
		p.dstHost[b] ^= 0x40 // test-only: prove that --check catches a wrong byte
	}
	var err error
	if p.scale != 0 { // FP8 in flight: the values within the scales' rounding
		if len(p.scaleHost) > 0 {
			if err := p.s.Memory().Download(p.scaleHost, p.scaleBuf); err != nil {
				return "", err
			}
		}
		err = pattern.CheckFP8(p.src.DType(), p.dst, p.scale, p.s.Rank(), p.seed, p.dstHost, placement.View{}, p.scaleHost)
	} else {
		err = pattern.Check(p.dst, p.s.Rank(), p.seed, p.dstHost, placement.View{})
	}
	if err == nil {
		return "", nil
	}
	// named with the world rank: a pipeline stage's is local to its
	// communicator.
	switch e := err.(type) {
	case *pattern.MismatchError:
		e.Rank = jobRank
	case *pattern.ScaleMismatchError:
		e.Rank = jobRank
	}
	when := fmt.Sprintf("iteration %d", it-warmup)
	if it < warmup {
		when = fmt.Sprintf("warm-up iteration %d", it)
	}
	p.j.log.Error().Err(err).Str("when", when).Msg("check failed")
	return fmt.Sprintf("%v, in %s", err, when), nil
}
