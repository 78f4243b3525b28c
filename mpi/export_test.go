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
