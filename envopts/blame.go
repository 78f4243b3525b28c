package envopts

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// This file names where a setting that the session or the planner
// refuses came from, and which variables every rank of a job must agree
// on.

// CheckOptions resolves o as Join will (session.Options.Resolved: the
// device's defaults filled in) and returns the option that is not valid
// as an *Error naming where it came from through get: a variable Join
// reads itself (M2N_CHUNK_BYTES=1152921504606846976, whose 8 x chunk
// overflows), the chunk-bytes or staging-bytes setting that gave it, or,
// for a chunk larger than the default staging holds, the chunk-bytes
// setting. A *reshard.FieldError that no setting gave comes back as it
// is, and so does any other error.
func CheckOptions(o session.Options, get Lookup) error {
	_, err := o.Resolved()
	var fe *reshard.FieldError
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	chunk, staging := get("chunk-bytes"), get("staging-bytes")
	switch {
	case strings.HasPrefix(fe.Field, "M2N_"): // a variable Join reads itself
		why := fe.Why
		if fe.Want != "" {
			why = "want " + fe.Want
		}
		return Source{Value: fe.Got, Name: fe.Field}.Bad(errors.New(why))
	case fe.Field == "chunk bytes" && chunk.Value != "":
		return chunk.Bad(fe)
	case fe.Field == "staging bytes" && staging.Value != "":
		return staging.Bad(fe)
	case fe.Field == "staging bytes" && chunk.Value != "":
		// the chunk given does not fit the default staging.
		return chunk.Bad(fmt.Errorf("%w (the default staging bytes; set --staging-bytes or M2N_STAGING_BYTES to at least 8 x chunk)", fe))
	}
	return err
}

// ExplainSchedule adds to a schedule a route refused (too many messages,
// too many rounds: the chunks are too small for the tensor) where the
// chunk and staging sizes of opts came from (through get, or the
// defaults) and, for too many messages, the smallest power-of-two chunk
// that brings plan's messages within the cap (suggestChunk).
// Other errors pass unchanged; the result keeps err's chain, so that an
// error every rank agreed on stays one.
func ExplainSchedule(err error, plan *reshard.Plan, opts reshard.ScheduleOptions, get Lookup) error {
	var fe *reshard.FieldError
	if err == nil || !errors.As(err, &fe) || !strings.HasSuffix(fe.Field, " schedule") {
		return err
	}
	from := func(key string) string {
		if s := get(key); s.Value != "" {
			return "from " + s.Name
		}
		return fmt.Sprintf("the default; --%s or %s sets it", key, Var(key))
	}
	msg := fmt.Sprintf("chunk bytes %d (%s), staging bytes %d (%s)", opts.ChunkBytes, from("chunk-bytes"),
		opts.StagingBytes, from("staging-bytes"))
	var n int64
	if _, serr := fmt.Sscanf(fe.Got, "%d messages", &n); serr == nil && plan != nil {
		if c, m, ok := suggestChunk(plan, opts.ChunkBytes, n); ok {
			msg += fmt.Sprintf(": chunks of %d bytes (--chunk-bytes %d --staging-bytes %d) would make about %d", c, c, 8*c, m)
		}
	}
	return fmt.Errorf("%w; %s", err, msg)
}

// Agreed returns the M2N_ variables of the environment that change what a
// job runs or reports, which every rank must set alike, as "NAME=value"
// (the value trimmed) in sorted order: all but the test-only fault
// switches (M2N_FAULT_*), the test harness's (M2N_MPITEST*) and the log
// level (M2N_LOG_LEVEL), which are each rank's own.
func Agreed() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "M2N_") && !strings.HasPrefix(k, "M2N_FAULT_") && k != "M2N_LOG_LEVEL" && !strings.HasPrefix(k, "M2N_MPITEST") {
			env = append(env, k)
		}
	}
	sort.Strings(env)
	for i, k := range env {
		env[i] = k + "=" + strings.TrimSpace(os.Getenv(k))
	}
	return env
}

// suggestChunk is what to suggest when a schedule of chunks too small for
// the tensor is refused: the smallest power-of-two chunk, above the one
// that made routeMsgs messages, with which the route's messages
// (estimated: the flat route's count for the plan, scaled by the route's
// ratio to it at the old chunk) fall within half of reshard.MaxMessages. It
// returns the chunk and the estimated messages, or false where no chunk
// up to 1 TiB does.
func suggestChunk(plan *reshard.Plan, chunk, routeMsgs int64) (int64, int64, bool) {
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
	for c <= chunk && c <= 1<<40 { // bounded: a chunk near MaxInt64 would overflow c
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
