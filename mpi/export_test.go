package mpi

import "github.com/m2n-dev/m2n/strided"

// SetChunkBytes sets the chunk limit to n bytes on the calling rank and
// returns a function that restores it. Every rank of a job must set the same
// value before the operations that depend on it.
func SetChunkBytes(n int) (restore func()) {
	old := chunkBytes
	chunkBytes = n
	return func() { chunkBytes = old }
}

// CachedTypes is how many shapes' datatypes t holds.
func CachedTypes(t *Transport) int { return t.types.len() }

// Pinned reports whether r still pins its buffer.
func Pinned(r *Request) bool { return r.pinned }

// Parts is the number of MPI requests r stands for.
func Parts(r *Request) int { return len(r.h) }

// Held returns the Requests the package holds (pinned, not completed).
func Held() []*Request {
	held.Lock()
	defer held.Unlock()
	var out []*Request
	for r := range held.reqs {
		out = append(out, r)
	}
	return out
}

// The blocking calls the tests synchronise with, built on the nonblocking
// ones this package offers (its users bound every wait).

func (c *Comm) Barrier() error {
	r, err := c.Ibarrier()
	if err != nil {
		return err
	}
	return r.Wait()
}

func (c *Comm) Send(buf []byte, dest, tag int) error {
	r, err := c.Isend(buf, dest, tag)
	if err != nil {
		return err
	}
	return r.Wait()
}

func (c *Comm) Recv(buf []byte, src, tag int) error {
	r, err := c.Irecv(buf, src, tag)
	if err != nil {
		return err
	}
	return r.Wait()
}

func (c *Comm) IsendStrided(buf []byte, at strided.Desc, dest, tag int) (*Request, error) {
	return c.isendStrided(buf, at, dest, tag)
}

func (c *Comm) IrecvStrided(buf []byte, at strided.Desc, src, tag int) (*Request, error) {
	return c.irecvStrided(buf, at, src, tag)
}

// Names only the tests use: the wildcard tag and undefined color, the
// lower thread levels, and accessors of the binding's own state.

const (
	AnyTag           = anyTag
	Undefined        = undefined
	ThreadSingle     = threadSingle
	ThreadFunneled   = threadFunneled
	ThreadSerialized = threadSerialized
)

func Waitall(reqs []*Request) error { return waitall(reqs) }

// Bytes returns how many bytes one element of the datatype moves.
func (d *Datatype) Bytes() int64 { return d.shape.Bytes() }

// Borrowed reports whether c belongs to other code (World, or a
// communicator from FromFortran), so that Free refuses it.
func (c *Comm) Borrowed() bool { return c != nil && c.borrowed }

func (c *Comm) Fortran() (int, error) { return c.fortran() }

func (c *Comm) RemoteSize() (int, error) { return c.remoteSize() }

// Error is MPI's failed call, for the tests that inspect it.
type Error = callError
