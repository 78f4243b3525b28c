package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/m2n-dev/m2n/envopts"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// explainSchedule adds to a schedule the route refused (too many messages,
// too many rounds: the chunks are too small for the tensor) where the
// chunk and staging sizes came from (the flags or the variables, or the
// defaults) and, for too many messages, the smallest power-of-two chunk
// that brings the messages within the cap. Other errors pass unchanged;
// the result keeps err's chain, so an agreed error stays agreed.
func (f *runFlags) explainSchedule(err error, plan *reshard.Plan, opts reshard.ScheduleOptions) error {
	var fe *reshard.FieldError
	if err == nil || !errors.As(err, &fe) || !strings.HasSuffix(fe.Field, " schedule") {
		return err
	}
	chunk := f.lookup("chunk-bytes")
	staging := f.lookup("staging-bytes")
	from := func(s envopts.Source, flag string) string {
		if s.Value == "" {
			return fmt.Sprintf("the default; --%s or %s sets it", flag, s.Name)
		}
		return "from " + s.Name
	}
	msg := fmt.Sprintf("chunk bytes %d (%s), staging bytes %d (%s)", opts.ChunkBytes, from(chunk, "chunk-bytes"),
		opts.StagingBytes, from(staging, "staging-bytes"))
	var n int64
	if _, serr := fmt.Sscanf(fe.Got, "%d messages", &n); serr == nil && plan != nil {
		if c, m, ok := chunkFor(plan, opts.ChunkBytes, n); ok {
			msg += fmt.Sprintf(": chunks of %d bytes (--chunk-bytes %d --staging-bytes %d) would make about %d", c, c, 8*c, m)
		}
	}
	return fmt.Errorf("%w; %s", err, msg)
}

// chunkFor finds the smallest power-of-two chunk, above the one that made
// routeMsgs messages, with which the route's messages (estimated: the
// flat route's count for the plan, scaled by the route's ratio to it at
// the old chunk) fall within half of reshard.MaxMessages.
func chunkFor(plan *reshard.Plan, chunk, routeMsgs int64) (int64, int64, bool) {
	count := func(c int64) (int64, bool) {
		var n int64
		elem := plan.Src().ElemSize()
		for i := 0; i < plan.Len(); i++ {
			k, err := reshard.CountChunks(plan.Transfer(i).Box, elem, c)
			if err != nil {
				return 0, false
			}
			n += k
		}
		return n, n > 0
	}
	base, ok := count(chunk)
	if !ok {
		return 0, 0, false
	}
	ratio := float64(routeMsgs) / float64(base)
	c := int64(1)
	for c <= chunk {
		c *= 2
	}
	for ; c > 0 && c <= 1<<40; c *= 2 {
		n, ok := count(c)
		if !ok {
			return 0, 0, false
		}
		if est := int64(float64(n) * ratio); est <= reshard.MaxMessages/2 {
			return c, est, true
		}
	}
	return 0, 0, false
}

// schedOf returns a session's chunk and staging sizes.
func schedOf(o session.Options) reshard.ScheduleOptions {
	return reshard.ScheduleOptions{ChunkBytes: o.ChunkBytes, StagingBytes: o.StagingBytes}
}
