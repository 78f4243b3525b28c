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
		if c, m, ok := reshard.SuggestChunk(plan, opts.ChunkBytes, n); ok {
			msg += fmt.Sprintf(": chunks of %d bytes (--chunk-bytes %d --staging-bytes %d) would make about %d", c, c, 8*c, m)
		}
	}
	return fmt.Errorf("%w; %s", err, msg)
}

// schedOf returns a session's chunk and staging sizes.
func schedOf(o session.Options) reshard.ScheduleOptions {
	return reshard.ScheduleOptions{ChunkBytes: o.ChunkBytes, StagingBytes: o.StagingBytes}
}
