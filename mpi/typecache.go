package mpi

import (
	"encoding/binary"
	"errors"
	"sync"

	"github.com/m2n-dev/m2n/strided"
)

// typeCache keeps the committed datatypes of the strided shapes a Transport
// has moved in place. A prepared call moves the same regions every step,
// so each shape's datatype is built once instead of per message and step
// (three or more MPI calls to build, one to free). It holds at most
// maxCachedTypes shapes; a shape past that is built and freed per message,
// as before. close frees them all.
type typeCache struct {
	mu  sync.Mutex
	m   map[string]*Datatype
	key []byte // scratch for the lookup key
}

// maxCachedTypes bounds a transport's cached datatypes (a few hundred bytes
// of MPI's each): far above the distinct shapes of any prepared call.
const maxCachedTypes = 1 << 14

// get returns the cached datatype of at's shape, building and caching it
// on first use; nil (and no error) when the cache is full and the shape is
// not in it.
func (c *typeCache) get(at strided.Desc) (*Datatype, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := binary.AppendVarint(c.key[:0], at.Run)
	for i := range at.Count {
		k = binary.AppendVarint(k, at.Count[i])
		k = binary.AppendVarint(k, at.Stride[i])
	}
	c.key = k
	if d, ok := c.m[string(k)]; ok {
		return d, nil
	}
	if len(c.m) >= maxCachedTypes {
		return nil, nil
	}
	d, err := NewDatatype(at)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*Datatype{}
	}
	c.m[string(k)] = d
	return d, nil
}

// len returns how many shapes the cache holds.
func (c *typeCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// close frees every cached datatype (operations posted with them complete
// normally) and empties the cache.
func (c *typeCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, d := range c.m {
		errs = append(errs, d.Free())
	}
	c.m = nil
	return errors.Join(errs...)
}
