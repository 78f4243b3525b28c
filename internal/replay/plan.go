// Package replay turns one rank's compiled program (a program.Program) and
// the addresses of its buffers into the commands that run a whole step on
// a GPU's streams with no host wait between rounds: batched copies, device
// memcpys, NCCL groups, and the events that order them across a compute
// stream and the network and local communicators' streams. It is pure Go:
// package refit/gpu executes a Plan on real streams (or captures it as a CUDA
// graph), and Simulate runs plans of every rank on the CPU in adversarial
// interleavings, so that the ordering is tested where there is no GPU.
//
// The ordering mirrors refit.NewHostDriver, the round-by-round host driver,
// with events in place of host waits. For each of the program's rounds
// (round k, staging slot k mod 2), on the compute stream:
//
//   - wait for the groups of every posted round k-2 or earlier and
//     unpack what they staged: their sends have read staging slot k mod 2
//     and their receives filled it, and a round's forwarding sends read data
//     received at least two rounds earlier (the schedule guarantees it);
//   - the round's local copies, in waves: a copy that reads bytes an earlier
//     copy of the wave writes, or writes bytes one reads, starts a new wave
//     (a launch after it);
//   - the packs of its staged sends, then an event;
//
// and on each communicator's stream, after that event, one group of the
// round's sends and receives over that communicator, then an event the
// compute stream waits on when it drains the round. Every stream's work
// joins the compute stream by the end, so the compute stream's completion is
// the step's.
package replay

import (
	"fmt"
	"slices"

	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/strided"
)

// Stream names one of the streams a plan runs on: Compute, Net, Local,
// Side and the further side streams after Side (Side+1 up to Streams-1).
type Stream uint8

const (
	// Compute runs the copies, packs and unpacks (the Memory's stream).
	Compute Stream = iota
	// Net runs the groups of the communicator between domains.
	Net
	// Local runs the groups of the communicator inside a domain.
	Local
	// Side runs the local copies of a round that nothing of the round
	// waits for, beside everything else; the compute stream joins it
	// before an operation that touches their bytes, and at the end.
	// It and the streams after it (side2, side3, ...) also run the step's
	// first Fuse kernels beside the compute stream (Options.FuseStreams).
	Side
)

// Streams is how many streams a plan may name: Compute, Net, Local and up
// to MaxFuseStreams-1 side streams.
const Streams = int(Side) + MaxFuseStreams - 1

var streamNames = [...]string{Compute: "compute", Net: "net", Local: "local", Side: "side"}

func (s Stream) String() string {
	switch {
	case int(s) < len(streamNames):
		return streamNames[s]
	case int(s) < Streams:
		return fmt.Sprintf("side%d", int(s-Side)+1)
	}
	return fmt.Sprintf("stream(%d)", uint8(s))
}

// Span is a buffer: its device address and its length in bytes. The zero
// Span is no buffer.
type Span struct {
	Addr uint64
	Len  int64
}

// Buffers are the addresses a plan is built for: the step's tensor buffers
// and the replay's own staging and scratch (sized by NeedsOf).
type Buffers struct {
	// Tensors[t] are tensor t's source and destination buffers on this
	// rank (the zero Span where the rank holds no part).
	Tensors [][2]Span
	// Full[t] is tensor t's whole-tensor scratch, where the program needs
	// one.
	Full []Span
	// Staging[slot][dir] is the staging of rounds of that parity, for sends
	// (dir 0) and receives (dir 1).
	Staging [2][2]Span
	// Scratch holds the local copies whose two sides cut their bytes into
	// regions that do not pair up, packed and unpacked through it.
	Scratch Span
	// Quant[t] is, for a tensor t converted to FP8 in flight, where the
	// step's scales of its blocks lie (the zero value for the others).
	Quant []QuantTensor
	// SelfScales holds the scale windows of every self-scaled tensor
	// (QuantTensor.Self) one after another, and Flag is 4 bytes: the plan
	// ends with a Check of SelfScales into Flag (none without such a
	// tensor).
	SelfScales, Flag Span
}

// QuantTensor is a tensor converted to FP8 in flight, as its Quantize
// commands need it: its block grid and source dtype, and the device window
// of the float32 scales of Blocks (the blocks this rank's source part
// touches, row-major), which the executor fills every step before the
// plan runs (refit.StepInput.Quant).
//
// A tensor with Self is scaled by the plan itself (refit.TensorQuant.Self):
// Fuse commands quantize Part, the rank's source part (whole blocks only,
// at PartAt in its source buffer), in one pass that writes the scales of
// Blocks (the part's blocks) into Scales; the plan then copies the
// window's DstBlocks (the rank's destination scale tensor, row-major) into
// ScaleDst. Where the part's messages are local copies of it into one run
// of its destination (one copy or its chunks), one Fuse at the start of
// the step writes that run and the copies are dropped; where its one
// message is a send of the whole part, the Fuse packs that send; otherwise
// it writes the part's E4M3 bytes (row-major over Part) into FP8Part
// (FP8PartNeeds sizes it) at the start, and the messages copy from there.
type QuantTensor struct {
	Grid   fp8.Grid
	DType  dtype.DType
	Blocks placement.Box
	Scales Span

	Self      bool
	Part      placement.Box
	PartAt    strided.Desc
	DstBlocks placement.Box
	ScaleDst  Span
	FP8Part   Span
}

// Needs is the memory a program's replay needs beyond the tensor buffers.
type Needs struct {
	Staging [2][2]int64
	Full    []int64
	Scratch int64
}

// NeedsOf returns what a program's replay needs.
func NeedsOf(p *program.Program) Needs {
	n := Needs{Staging: p.Staging, Full: slices.Clone(p.Full)}
	for i := range p.Rounds {
		var s int64
		for _, cp := range p.Rounds[i].Copies {
			if !pairs(cp) {
				s += cp.Bytes
			}
		}
		n.Scratch = max(n.Scratch, s)
	}
	return n
}

// pairs reports whether a copy's regions pair up one to one (equal byte
// counts), so that each pair is one strided copy. A copy that converts
// to FP8 never does: it is quantized into the scratch, then unpacked.
func pairs(cp program.Copy) bool {
	if cp.Quant || len(cp.From) != len(cp.To) {
		return false
	}
	for i := range cp.From {
		if cp.From[i].At.Bytes() != cp.To[i].At.Bytes() {
			return false
		}
	}
	return true
}

// Copy is one item of a batched copy: the bytes SrcAt describes in the
// buffer at Src to the places DstAt describes in the buffer at Dst, in
// packed order.
type Copy struct {
	Dst   uint64
	DstAt strided.Desc
	Src   uint64
	SrcAt strided.Desc
}

// P2P is one point-to-point operation of a group: Len bytes at Addr sent to
// or received from Peer.
type P2P struct {
	Peer int
	Send bool
	Addr uint64
	Len  int64
}

// Kind is what a command does.
type Kind uint8

const (
	// Wait makes the stream wait for the last record of Event queued
	// before it (none: no wait).
	Wait Kind = iota
	// Record records Event on the stream.
	Record
	// Batch launches Batches[Batch] in one batched-copy launch.
	Batch
	// Memcpy copies Len contiguous bytes from Src to Dst.
	Memcpy
	// Group posts Ops as one NCCL group on the stream's communicator.
	Group
	// Quantize queues Quants[Quant]: a region in the source dtype
	// quantized to FP8 E4M3 with this step's scales of its tensor, packed.
	Quantize
	// Fuse queues Quants[Quant] as one pass over a region of whole
	// blocks of a self-scaled tensor (QuantTensor.Self): each block's
	// amax, its scale written into the tensor's window, its elements
	// quantized and packed (cuda.FusedQuantize).
	Fuse
	// Check writes into the 4 bytes at Dst the largest magnitude among
	// the float32s of the Len bytes at Src (the self-scaled tensors'
	// windows), as float32 bits: 0x7F800000 or above when a scale is
	// infinite or NaN.
	Check
)

func (k Kind) String() string {
	return [...]string{"wait", "record", "batch", "memcpy", "group", "quantize", "fuse", "check"}[k]
}

// QuantOp is one quantize-while-packing of a message that converts to FP8:
// the region SrcAt of the buffer at Src (in the tensor's source dtype,
// holding the elements of Box, the message's box of the global tensor, in
// row-major order of Box) becomes Box.Elems() E4M3 bytes at Dst, each
// divided by its block's scale of this step (the runtime's
// refit.StepInput.Quant[Tensor]), as fp8.Grid.Pack writes them.
//
// A Fuse command's QuantOp reads whole blocks and writes their scales
// (QuantTensor.Self).
type QuantOp struct {
	Tensor int
	Box    placement.Box
	Src    uint64
	SrcAt  strided.Desc
	Dst    uint64
	// Fused: a Fuse command's (see the comment above).
	Fused bool
}

// Cmd is one command on one stream.
type Cmd struct {
	Kind     Kind
	Stream   Stream
	Event    int
	Batch    int
	Dst, Src uint64
	Len      int64
	Ops      []P2P
	// Quant indexes Plan.Quants (Quantize).
	Quant int
	// Round is the index in the program's Rounds of the round the command
	// belongs to.
	Round int
}

// Plan is one rank's step as stream commands, in the order the host queues
// them.
type Plan struct {
	Cmds    []Cmd
	Batches [][]Copy
	// Quants are the Quantize commands' operations; Quant[t] (Buffers.Quant)
	// tensor t's grid and scales.
	Quants []QuantOp
	Quant  []QuantTensor
	// Events is the number of distinct events the commands use.
	Events int
	// Done[i] are the events whose completion means round i's groups are
	// done (one per communicator the round uses; none for a round of local
	// copies only).
	Done [][]int
	// Stats is what the step moves, as the host driver counts it.
	Stats refit.Stats
}

// DefaultMemcpyMin is the size from which a contiguous local copy runs as a
// device memcpy rather than as an item of a batched copy: large enough that
// the launch between memcpys costs nothing beside the copy, and past the
// batched kernel's ~96% of a copy.
const DefaultMemcpyMin = 64 << 20

// Options configure Build.
type Options struct {
	// Class says which communicator carries the operations with a peer;
	// nil takes each wire's class from the program.
	Class func(peer int) reshard.LinkClass
	// MemcpyMin: contiguous copies of at least this many bytes (after
	// merging copies that continue one another) run as memcpys; 0 takes
	// DefaultMemcpyMin, negative never.
	MemcpyMin int64
	// FuseStreams is how many streams the step's first Fuse kernels (the
	// self-scaled tensors' parts, see QuantTensor) spread over: the compute stream
	// and FuseStreams-1 side streams. 0 takes
	// DefaultFuseStreams; 1 to MaxFuseStreams.
	FuseStreams int
}

// DefaultFuseStreams is Options.FuseStreams where it is 0. A small
// tensor's fused kernel takes about as long as one round of a large one's
// (11-13 us on an H200 for a 128x1024 weight, whatever its bytes) and fills
// few of the GPU's multiprocessors, so more of them run at once over more
// streams: Qwen3-235B-A22B/4's FP8 step (564 fused kernels, 376 of them of
// 4 MiB or less) took 6.23 ms over 2 streams, 5.51 over 4 and 5.11 over 8,
// DeepSeek-V3/4's 11.95 and 11.06 over 2 and 8
// (bench/results/h200-fp8-streams.txt).
const DefaultFuseStreams = 8

// MaxFuseStreams bounds Options.FuseStreams.
const MaxFuseStreams = 8
