package cuda

// #include "shim.h"
import "C"

import (
	"errors"
	"runtime"
)

// errNoGraphs is returned by the graph functions on a driver without the
// graph entry points this package uses (CUDA 11.4 and later have them);
// callers ask HasGraphs first.
var errNoGraphs = errors.New("cuda: this driver has no CUDA graph entry points (cuStreamBeginCapture_v2, cuGraphInstantiateWithFlags, ...)")

// HasGraphs reports whether the driver can capture and launch graphs.
func HasGraphs() bool { return C.m2n_cu_has_graphs() != 0 }

// CU_STREAM_CAPTURE_MODE_RELAXED (cuda.h): the capture does not forbid other
// threads' driver calls, which a Go program, whose goroutines move between
// threads, cannot promise.
const captureModeRelaxed = 2

// CU_EVENT_RECORD_EXTERNAL (cuda.h).
const eventRecordExternal = 0x1

// capture is a stream capture in progress (cuStreamBeginCapture): work
// queued on the stream, and on every stream that waits on an event
// recorded on a captured stream, goes into a graph instead of running. The
// OS thread stays locked to the goroutine from Stream.Capture's begin until
// end or abandon, so that everything captured is queued from one thread.
type capture struct {
	s    *Stream
	done bool
}

// Capture captures the work that queue puts on s (relaxed mode) and
// instantiates it as a graph (cuStreamBeginCapture, cuStreamEndCapture,
// cuGraphInstantiateWithFlags). Every stream the capture forks into must
// join back into s (s waits on an event recorded on it after its last
// captured work) before queue returns. If queue fails, the capture is
// abandoned, dropping what it captured so that the stream runs work
// again, and Capture returns queue's error (joined with abandoning's). A
// capture that an illegal call invalidated fails at its end.
func (s *Stream) Capture(queue func() error) (*Graph, error) {
	c, err := s.beginCapture()
	if err != nil {
		return nil, err
	}
	if err := queue(); err != nil {
		return nil, errors.Join(err, c.abandon())
	}
	return c.end()
}

func (s *Stream) beginCapture() (*capture, error) {
	if !HasGraphs() {
		return nil, errNoGraphs
	}
	runtime.LockOSThread()
	if err := check("cuStreamBeginCapture", C.m2n_cuStreamBeginCapture(s.ctx.h, s.h, captureModeRelaxed)); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return &capture{s: s}, nil
}

// end ends the capture and instantiates the captured graph.
func (c *capture) end() (*Graph, error) {
	if c.done {
		return nil, errors.New("cuda: capture already ended")
	}
	c.done = true
	defer runtime.UnlockOSThread()
	ctx := c.s.ctx
	var g C.CUgraph
	if err := check("cuStreamEndCapture", C.m2n_cuStreamEndCapture(ctx.h, c.s.h, &g)); err != nil {
		if g != nil {
			C.m2n_cuGraphDestroy(ctx.h, g)
		}
		return nil, err
	}
	if g == nil {
		return nil, errors.New("cuda: cuStreamEndCapture: the capture was invalidated")
	}
	defer C.m2n_cuGraphDestroy(ctx.h, g) // the executable graph keeps what it needs
	var e C.CUgraphExec
	if err := check("cuGraphInstantiateWithFlags", C.m2n_cuGraphInstantiate(ctx.h, &e, g)); err != nil {
		return nil, err
	}
	return &Graph{ctx: ctx, h: e}, nil
}

// abandon ends a capture whose building failed, dropping what it captured,
// so that the stream runs work again. It returns the first error of ending
// it, if any; a capture already ended is a no-op.
func (c *capture) abandon() error {
	if c.done {
		return nil
	}
	_, err := c.end()
	if err != nil && (isCode(err, codeCaptureUnsupported) || isCode(err, codeCaptureInvalidated)) {
		// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED / _INVALIDATED: ended all
		// the same.
		return nil
	}
	return err
}

// Graph is an instantiated CUDA graph (cuGraphExec), launched as a whole on
// a stream.
type Graph struct {
	ctx *Context
	h   C.CUgraphExec
}

// Launch queues the graph on s (cuGraphLaunch). A graph runs one launch at a
// time: a second launch on another stream waits for the first.
func (g *Graph) Launch(s *Stream) error {
	if g.h == nil {
		return errors.New("cuda: graph destroyed")
	}
	return check("cuGraphLaunch", C.m2n_cuGraphLaunch(g.ctx.h, g.h, s.h))
}

// Destroy frees the graph (cuGraphExecDestroy). A second call is a no-op.
func (g *Graph) Destroy() error {
	if g == nil || g.h == nil {
		return nil
	}
	h := g.h
	g.h = nil
	return check("cuGraphExecDestroy", C.m2n_cuGraphExecDestroy(g.ctx.h, h))
}

// RecordExternal records e on s like Record, but inside a capture the
// record becomes a node of the graph (CU_EVENT_RECORD_EXTERNAL) instead of
// only ordering captured work, so that the host can query how far a
// launched graph has run.
func (e *Event) RecordExternal(s *Stream) error {
	if !HasGraphs() {
		return errNoGraphs
	}
	return check("cuEventRecordWithFlags", C.m2n_cuEventRecordWithFlags(e.ctx.h, e.h, s.h, eventRecordExternal))
}
