package refit

import (
	"context"
	"hash/crc32"

	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/transport"
)

// TensorBuffers are one rank's buffers for one tensor of a schedule: Src in
// the source layout (nil when the rank is not in the source mesh) and Dst in
// the destination layout (nil when not in the destination mesh). Each must be
// exactly the rank's local size, and they must not overlap.
//
// Scale is, for a tensor converted to FP8 in flight (Spec.Scale) on a rank
// of its destination mesh, the buffer that receives the rank's scale tensor
// every step: exactly Spec.ScaleBytes(rank) bytes, one little-endian
// float32 (weight_scale_inv) per block of Spec.ScaleBlocks(rank),
// row-major. It is nil everywhere else (and may be nil or empty for a
// destination part that is empty). The runtime writes it every step; a
// Driver does not touch it.
type TensorBuffers struct {
	Src, Dst transport.Buffer
	Scale    transport.Buffer
}

// Stats counts what one rank moved in one step.
type Stats struct {
	// Sent and Recv count bytes by link class; LinkSelf counts local copies.
	Sent, Recv [reshard.LinkClasses]int64
	// Packed counts bytes that went through staging (packed before a send
	// or unpacked after a receive) rather than straight from or into a
	// tensor buffer.
	Packed int64
	// DenseSent counts, in a step of a call in delta mode that was not a
	// full sync, the bytes the sends (and copies) would have moved dense,
	// by link class; Sent counts their encodings. It is zero in a full
	// sync, and Sent in a delta step that every rank found changed
	// throughout (moved dense, as a full sync moves it).
	DenseSent [reshard.LinkClasses]int64
	Messages  int
	Rounds    int
	// NonFinite lists, in call order, the tensors whose FP8 scales the
	// driver computed itself (TensorQuant.Self) and found NaN or infinite
	// after moving every byte: their sources held a NaN or an infinity.
	// The runtime fails them on every rank with a *NonFiniteError naming
	// the first such element, and the group stays usable; their
	// destinations hold what the step wrote (a driver scales a tensor
	// itself only on a call that is not atomic: with Options.Atomic the
	// previous version stays).
	NonFinite []int
	// sentSums and recvSums hold, with StepInput.Verify, the CRC-32C of
	// every message this rank sent (or copied) and received, by the
	// message's index in the schedule.
	sentSums, recvSums []checksum
}

// checksum is the CRC-32C (Castagnoli) of one message's bytes.
type checksum struct {
	Message int32
	CRC     uint32
}

// castagnoli is the CRC-32C table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Add accumulates o into s.
func (s *Stats) Add(o Stats) {
	for c := range s.Sent {
		s.Sent[c] += o.Sent[c]
		s.Recv[c] += o.Recv[c]
		s.DenseSent[c] += o.DenseSent[c]
	}
	s.Packed += o.Packed
	s.Messages += o.Messages
	s.Rounds += o.Rounds
	s.NonFinite = append(s.NonFinite, o.NonFinite...)
}

// DriverKind names what moves a call's steps.
type DriverKind string

const (
	// DriverHost drives each step round by round from the host
	// (NewHostDriver): every call on CPUs, and on GPUs the calls with Verify
	// or in delta mode.
	DriverHost DriverKind = "host"
	// DriverReplay queues a whole step on a GPU's streams (batched copies,
	// NCCL groups and the events that order them) and waits once, at the
	// end: the default on GPUs (package refit/gpu).
	DriverReplay DriverKind = "replay"
	// DriverGraph is DriverReplay with the step captured once per set of
	// buffers as a CUDA graph and launched as one.
	DriverGraph DriverKind = "graph"
)

// ParseDriver reads a driver name: host, replay or graph.
func ParseDriver(s string) (DriverKind, error) {
	switch d := DriverKind(s); d {
	case DriverHost, DriverReplay, DriverGraph:
		return d, nil
	}
	return "", &reshard.FieldError{Field: "driver", Got: s, Want: "host, replay or graph"}
}

// Driver moves the bytes of one step of a compiled program on this rank.
// The runtime owns the step around it (the buffer check and the call's
// identity agreed before a byte moves, the FP8 scales, the checksums, the
// completion agreement and the atomic commit); a driver only moves, and
// is chosen when the call is prepared.
type Driver interface {
	// Name returns the driver's kind.
	Name() string
	// Move runs every round of the program over in.Bufs and returns when
	// every byte this rank receives is in place. A round that does not
	// complete within the driver's timeout is a *control.TimeoutError naming the
	// rank, the round and its peers; after any error the caller must abort
	// the transport.
	Move(ctx context.Context, in StepInput) (Stats, error)
	// Close frees what the driver allocated.
	Close() error
}

// Event marks a point in a device's queue of work: on GPUs a *cuda.Event,
// which a caller's stream waits on.
type Event interface {
	// Synchronize blocks until the work before the event has completed.
	Synchronize() error
}

// Launcher is a Driver that can queue a step on a device and return before
// it ends (the GPU replay): Launch queues it after the work that after
// marks (nil: none) and returns an event that marks its end; Wait waits
// for it from the host with Move's checks.
type Launcher interface {
	Driver
	Launch(in StepInput, after Event) (Event, error)
	Wait(ctx context.Context) (Stats, error)
}

// StepInput is what a driver gets for one step.
type StepInput struct {
	// Bufs holds this rank's buffers, one entry per tensor of the
	// program's schedule (shadows of the destinations, with Atomic).
	Bufs []TensorBuffers
	// Tag is the call's identity on the wire (transport.Op.Tag).
	Tag int32
	// Verify makes the host driver checksum every message (CRC-32C, seeded
	// with the tag) into the Stats, which the runtime compares across ranks.
	Verify bool
	// Quant holds, per tensor, what a driver needs to pack a tensor
	// converted to FP8 (the zero value for the others): its grid, its
	// source dtype and this step's scales of the blocks this rank's source
	// part touches, from the amax exchange the runtime ran before Move.
	Quant []TensorQuant
	// Progress, if set, is called after every round completes, with the
	// bytes this rank has moved so far in the step and the tensors it is
	// done with (once, at the end, on a device driver).
	Progress func(bytes int64, tensors int)
}
