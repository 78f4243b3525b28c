package refit

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
)

// Derived keeps what preparing a call derives on this rank from its
// inputs alone: the tensors' plans, the route's schedule and its
// fingerprint, this rank's compiled program and what its buffers must
// be. Given to Prepare (Options.Derived) across the groups a rank
// prepares calls in, it lets a call prepared again with the same inputs
// (every agreed field of the call, this rank, its views, the transport's
// in-place limit) skip planning, scheduling and compiling: a trainer
// whose generator left and another joined with the same layout, say. The
// agreements on the inputs and on the schedule's fingerprint still run on
// every rank, every time. Plans, schedules and programs are pure functions
// of those inputs and are not changed once built, so calls share them.
// It keeps the last calls' (NewDerived); it is safe for concurrent use.
type Derived struct {
	mu      sync.Mutex
	max     int
	entries map[[sha256.Size]byte]*derivedCall
	order   [][sha256.Size]byte // oldest first
	reused  int
}

type derivedCall struct {
	plans       []*reshard.Plan
	sched       *reshard.Schedule
	fingerprint uint64
	prog        *program.Program
	needs       [][2]partNeed
}

// NewDerived returns a Derived that keeps what the last n calls derived
// (at least 1).
func NewDerived(n int) *Derived {
	return &Derived{max: max(n, 1), entries: map[[sha256.Size]byte]*derivedCall{}}
}

// Reused returns how many preparations reused what an earlier one derived.
func (d *Derived) Reused() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reused
}

// derivedKey names a call's inputs on this rank: every field the ranks
// agree on, the rank, its views, the topology and the transport's
// in-place limit (the compiled program depends on each).
func derivedKey(rank, world int, specs []Spec, route reshard.Route, on Target, opts Options) [sha256.Size]byte {
	h := sha256.New()
	word := func(s string) {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	for _, f := range callFields(specs, world, route, on.Topology, opts) {
		word(f.Name)
		if f.PerTensor == nil {
			word(f.Value)
		}
		for _, v := range f.PerTensor {
			word(v)
		}
	}
	word(fmt.Sprintf("rank %d, topology %+v, in place %d", rank, on.Topology, transport.MaxInPlace(on.Transport)))
	for _, s := range specs {
		word(fmt.Sprintf("%+v", s.Views))
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// lookup returns what an earlier call with these inputs derived, or nil,
// and the inputs' key. A nil d, or a call without a transport, reuses
// nothing.
func (d *Derived) lookup(rank, world int, specs []Spec, route reshard.Route, on Target, opts Options) (*derivedCall, [sha256.Size]byte) {
	if d == nil || on.Transport == nil || route == nil || len(specs) == 0 {
		return nil, [sha256.Size]byte{}
	}
	k := derivedKey(rank, world, specs, route, on, opts)
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entries[k]
	if e != nil {
		d.reused++
	}
	return e, k
}

// compileOrReuse compiles the call (compile), or takes what hit derived;
// a call compiled afresh is kept under key for the next.
func (c *Call) compileOrReuse(route reshard.Route, d *Derived, hit *derivedCall, key [sha256.Size]byte) error {
	if hit == nil {
		err := c.compile(route)
		if err == nil && d != nil && key != ([sha256.Size]byte{}) {
			d.keep(key, &derivedCall{plans: c.plans, sched: c.sched, fingerprint: c.fingerprint, prog: c.prog, needs: c.needs})
		}
		return err
	}
	c.sched, c.fingerprint, c.prog, c.needs = hit.sched, hit.fingerprint, hit.prog, hit.needs
	return c.prepareState()
}

func (d *Derived) keep(k [sha256.Size]byte, e *derivedCall) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.entries[k]; ok {
		return
	}
	if len(d.order) >= d.max {
		delete(d.entries, d.order[0])
		d.order = d.order[1:]
	}
	d.entries[k] = e
	d.order = append(d.order, k)
}
