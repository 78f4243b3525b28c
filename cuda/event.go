package cuda

// #include "shim.h"
import "C"

import "time"

// Event marks a point in a stream's work, for ordering between streams and
// for timing.
type Event struct {
	ctx *Context
	h   C.CUevent
}

// cuEventCreate flags (cuda.h).
const eventDisableTiming = 0x2

// NewEvent creates an event (cuEventCreate). Events made without timing are
// cheaper to record and wait on, but ElapsedTime refuses them.
func (c *Context) NewEvent(timing bool) (*Event, error) {
	flags := C.uint(0)
	if !timing {
		flags = eventDisableTiming
	}
	var h C.CUevent
	if err := check("cuEventCreate", C.m2n_cuEventCreate(c.h, &h, flags)); err != nil {
		return nil, err
	}
	return &Event{ctx: c, h: h}, nil
}

// Record captures the work queued on s so far (cuEventRecord).
func (e *Event) Record(s *Stream) error {
	return check("cuEventRecord", C.m2n_cuEventRecord(e.ctx.h, e.h, s.h))
}

// Synchronize waits until the recorded work has completed
// (cuEventSynchronize).
func (e *Event) Synchronize() error {
	return check("cuEventSynchronize", C.m2n_cuEventSynchronize(e.ctx.h, e.h))
}

// Query reports whether the recorded work has completed (cuEventQuery).
func (e *Event) Query() (bool, error) {
	r := C.m2n_cuEventQuery(e.ctx.h, e.h)
	if r == codeNotReady {
		return false, nil
	}
	return true, check("cuEventQuery", r)
}

// Destroy destroys the event (cuEventDestroy). A second call is a no-op.
func (e *Event) Destroy() error {
	if e.h == nil {
		return nil
	}
	h := e.h
	e.h = nil
	return check("cuEventDestroy", C.m2n_cuEventDestroy(e.ctx.h, h))
}

// ElapsedTime returns the time between two recorded, completed timing
// events (cuEventElapsedTime; resolution about half a microsecond).
func ElapsedTime(start, end *Event) (time.Duration, error) {
	var ms C.float
	if err := check("cuEventElapsedTime", C.m2n_cuEventElapsedTime(start.ctx.h, &ms, start.h, end.h)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
