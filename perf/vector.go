package perf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/mpi"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// vectorExchange is what a user writes by hand instead of a reshard on
// CPUs (the mpi4py peer of bench/peers/mpi4py_reshard.py, in Go over the
// mpi binding): every transfer of the plan (one per source owner and
// destination rank, the flat route's messages before chunking) goes as one
// message sent in place from the source buffer with an MPI derived
// datatype and received in place into the destination buffer (a
// contiguous region as plain bytes), all posted at once, then completed
// together. Its datatypes are made once; a transfer from a rank to itself
// is a local copy. Over a transport that wraps MPI's (an emulated
// network, netem) the same messages go through that transport as in-place
// operations (which make each datatype per post, about a microsecond), so
// that the emulated rates apply to them as to the reshard.
type vectorExchange struct {
	comm  *mpi.Comm           // the direct path, over MPI's transport
	tr    transport.Transport // else the wrapping transport
	ops   []transport.Op
	mem   transport.Memory
	src   transport.HostBuffer
	dst   transport.HostBuffer
	posts []vectorPost
	self  []reshard.Transfer
	reqs  []*mpi.Request
}

// vectorPost is one message of the exchange on this rank.
type vectorPost struct {
	send bool
	peer int
	off  int64
	n    int64         // bytes, for a contiguous region
	dt   *mpi.Datatype // nil: contiguous (or the transport path)
	at   *strided.Desc // the strided region, on the transport path
}

// vectorTag is the exchange's tag: the calls' own tags (refit's wire tags)
// start at 1, and a call is never running while the exchange is.
const vectorTag = 0

// newVectorExchange makes rank's side of plan's exchange over tr (MPI's
// transport, or one wrapping it), from and into this rank's buffers of
// the pair (nil where it holds none).
func newVectorExchange(tr transport.Transport, mem transport.Memory, plan *reshard.Plan, rank int, src, dst transport.Buffer) (*vectorExchange, error) {
	v := &vectorExchange{mem: mem}
	if mt, ok := tr.(*mpi.Transport); ok {
		v.comm = mt.Comm()
	} else if transport.MaxInPlace(tr) > 0 {
		v.tr = tr
	} else {
		return nil, fmt.Errorf("perf: the vector exchange needs MPI's transport with in-place operations, not %T", tr)
	}
	var ok bool
	if src != nil {
		if v.src, ok = src.(transport.HostBuffer); !ok {
			return nil, fmt.Errorf("perf: the vector exchange needs host memory, got %T", src)
		}
	}
	if dst != nil {
		if v.dst, ok = dst.(transport.HostBuffer); !ok {
			return nil, fmt.Errorf("perf: the vector exchange needs host memory, got %T", dst)
		}
	}
	for i := range plan.Len() {
		t := plan.Transfer(i)
		switch {
		case t.Src == rank && t.Dst == rank:
			v.self = append(v.self, t)
		case t.Dst == rank:
			if err := v.add(false, t.Src, t); err != nil {
				return nil, errors.Join(err, v.Free())
			}
		case t.Src == rank:
			if err := v.add(true, t.Dst, t); err != nil {
				return nil, errors.Join(err, v.Free())
			}
		}
	}
	// receives first, as the reshard posts them
	recvs := make([]vectorPost, 0, len(v.posts))
	for _, p := range v.posts {
		if !p.send {
			recvs = append(recvs, p)
		}
	}
	for _, p := range v.posts {
		if p.send {
			recvs = append(recvs, p)
		}
	}
	v.posts = recvs
	v.reqs = make([]*mpi.Request, 0, len(v.posts))
	if v.tr != nil {
		for _, p := range v.posts {
			buf := v.dst
			if p.send {
				buf = v.src
			}
			o := transport.Op{Peer: p.peer, Send: p.send, Tag: vectorTag, Buf: buf, Off: p.off, Len: p.n}
			if p.at != nil {
				o.InPlace, o.At = true, *p.at
			}
			v.ops = append(v.ops, o)
		}
	}
	return v, nil
}

func (v *vectorExchange) add(send bool, peer int, t reshard.Transfer) error {
	at := t.DstAt
	if send {
		at = t.SrcAt
	}
	p := vectorPost{send: send, peer: peer, off: at.Offset, n: at.Bytes()}
	if !at.Contiguous() && v.tr != nil {
		p.at = &at
	} else if !at.Contiguous() {
		dt, err := mpi.NewDatatype(at)
		if err != nil {
			return err
		}
		p.dt = dt
	}
	v.posts = append(v.posts, p)
	return nil
}

// Run posts every message and completes them together, polling
// MPI_Testall until timeout (a bounded MPI_Waitall: the same progress),
// after the local copies.
func (v *vectorExchange) Run(timeout time.Duration) error {
	for _, t := range v.self {
		if err := v.mem.Copy(v.dst, t.DstAt, v.src, t.SrcAt); err != nil {
			return err
		}
	}
	if v.tr != nil {
		pend, err := v.tr.Start(v.ops)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return pend.Wait(ctx)
	}
	v.reqs = v.reqs[:0]
	for _, p := range v.posts {
		buf := v.dst
		if p.send {
			buf = v.src
		}
		var r *mpi.Request
		var err error
		switch {
		case p.dt != nil && p.send:
			r, err = v.comm.IsendType(buf, p.off, p.dt, p.peer, vectorTag)
		case p.dt != nil:
			r, err = v.comm.IrecvType(buf, p.off, p.dt, p.peer, vectorTag)
		case p.send:
			r, err = v.comm.Isend(buf[p.off:p.off+p.n:p.off+p.n], p.peer, vectorTag)
		default:
			r, err = v.comm.Irecv(buf[p.off:p.off+p.n:p.off+p.n], p.peer, vectorTag)
		}
		if err != nil {
			return fmt.Errorf("perf: vector exchange with rank %d: %w", p.peer, err)
		}
		v.reqs = append(v.reqs, r)
	}
	deadline := time.Now().Add(timeout)
	for {
		done, err := mpi.Testall(v.reqs)
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("perf: the vector exchange did not complete in %v", timeout)
		}
	}
}

// Free releases the exchange's datatypes.
func (v *vectorExchange) Free() error {
	var errs []error
	for i := range v.posts {
		errs = append(errs, v.posts[i].dt.Free())
		v.posts[i].dt = nil
	}
	return errors.Join(errs...)
}

// checkVector runs the vector exchange once into poisoned destinations and
// checks every element, so that the boxes it moves are known to be the
// reshard's: a wrong element anywhere fails every rank with the first
// one's message (Agreed).
func (p *Pair) checkVector(v *vectorExchange) error {
	s := p.s
	if err := inSteps(s, "poison of the destinations", p.poison); err != nil {
		return err
	}
	if err := v.Run(s.Options().Timeout); err != nil {
		return err
	}
	var msg string
	if err := inSteps(s, "check of the vector exchange", func() (err error) {
		msg, err = p.check("the vector exchange")
		return err
	}); err != nil {
		return err
	}
	first, err := firstMessage(s, msg)
	if err != nil {
		return err
	}
	if first != "" {
		return Agreed{fmt.Errorf("perf: the vector exchange moved wrong bytes: %s", first)}
	}
	return nil
}
