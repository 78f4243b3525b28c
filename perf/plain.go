package perf

import (
	"context"
	"sort"
	"time"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/transport"
)

// plainExchange is a plain exchange of exactly the bytes a call's schedule
// moves between each pair of ranks, over the same transport: one
// contiguous message per pair, all posted at once (Isend/Irecv over MPI,
// grouped ncclSend/ncclRecv on GPUs), the baseline a reshard is measured
// against.
type plainExchange struct {
	mem            session.Memory
	sendTo, recvFr map[int]int64
	send, recv     transport.Buffer
}

// newPlainExchange sizes rank's side of the exchange from a schedule: the
// bytes of every message between two different ranks, per pair.
func newPlainExchange(mem session.Memory, s *reshard.Schedule, rank int) (*plainExchange, error) {
	px := &plainExchange{mem: mem, sendTo: map[int]int64{}, recvFr: map[int]int64{}}
	for i := range s.Messages {
		m := &s.Messages[i]
		switch {
		case m.Src == m.Dst:
		case m.Src == rank:
			px.sendTo[m.Dst] += m.Bytes
		case m.Dst == rank:
			px.recvFr[m.Src] += m.Bytes
		}
	}
	var sendTotal, recvTotal int64
	for _, n := range px.sendTo {
		sendTotal += n
	}
	for _, n := range px.recvFr {
		recvTotal += n
	}
	var err error
	if px.send, err = mem.Alloc(sendTotal); err != nil {
		return nil, err
	}
	if px.recv, err = mem.Alloc(recvTotal); err != nil {
		mem.Free(px.send)
		return nil, err
	}
	fill := make([]byte, sendTotal)
	for i := range fill {
		fill[i] = byte(i)
	}
	return px, mem.Upload(px.send, fill)
}

// Bytes returns what this rank sends and receives in the exchange.
func (px *plainExchange) Bytes() (sent, recv int64) { return px.send.Len(), px.recv.Len() }

// Run posts the whole exchange on tr and waits for it, at most timeout.
func (px *plainExchange) Run(tr transport.Transport, timeout time.Duration) error {
	var ops []transport.Op
	var off int64
	for _, p := range sortedKeys(px.recvFr) {
		ops = append(ops, transport.Op{Peer: p, Buf: px.recv, Off: off, Len: px.recvFr[p]})
		off += px.recvFr[p]
	}
	off = 0
	for _, p := range sortedKeys(px.sendTo) {
		ops = append(ops, transport.Op{Peer: p, Send: true, Buf: px.send, Off: off, Len: px.sendTo[p]})
		off += px.sendTo[p]
	}
	pend, err := tr.Start(ops)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return pend.Wait(ctx)
}

// Free releases the exchange's buffers.
func (px *plainExchange) Free() {
	px.mem.Free(px.send)
	px.mem.Free(px.recv)
}

func sortedKeys(m map[int]int64) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
