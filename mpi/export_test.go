package mpi

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
