package transport

import "github.com/m2n-dev/m2n/strided"

// RegionReader is a Memory that can read a strided region of one of its
// buffers into host memory (for checksums).
type RegionReader interface {
	ReadRegion(dst []byte, src Buffer, at strided.Desc) error
}

// ReadRegion implements RegionReader.
func (HostMemory) ReadRegion(dst []byte, src Buffer, at strided.Desc) error {
	return HostMemory{}.Pack(HostBuffer(dst), 0, src, at)
}

// Incompleter is a Pending that can say which peers' operations have not
// completed yet.
type Incompleter interface {
	Incomplete() []int
}
