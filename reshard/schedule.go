package reshard

import (
	"fmt"

	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/strided"
)

// BufKind names which of a rank's buffers for a tensor a Segment lives in.
type BufKind uint8

const (
	// BufSrc is the rank's local buffer in the source layout.
	BufSrc BufKind = iota
	// BufDst is the rank's local buffer in the destination layout.
	BufDst
	// BufFull is scratch holding the whole global tensor, dense row-major
	// (the legacy all-gather + broadcast route needs it).
	BufFull
)

var bufKindNames = [...]string{BufSrc: "src", BufDst: "dst", BufFull: "full"}

func (k BufKind) String() string {
	if int(k) < len(bufKindNames) {
		return bufKindNames[k]
	}
	return fmt.Sprintf("buf(%d)", uint8(k))
}

// Segment is a strided region of one buffer of one tensor.
type Segment struct {
	Tensor int
	Buf    BufKind
	At     strided.Desc
}

// LinkClass says which fabric a message crosses.
type LinkClass uint8

const (
	// LinkNetwork crosses between domains (the NICs).
	LinkNetwork LinkClass = iota
	// LinkLocal stays inside one domain (NVLink, or shared memory on a host).
	LinkLocal
	// LinkSelf is a copy inside one rank.
	LinkSelf
	// LinkClasses counts the classes (the length of per-class arrays).
	LinkClasses
)

var linkClassNames = [...]string{LinkNetwork: "network", LinkLocal: "local", LinkSelf: "self"}

func (c LinkClass) String() string {
	if int(c) < len(linkClassNames) {
		return linkClassNames[c]
	}
	return fmt.Sprintf("link(%d)", uint8(c))
}

// Message moves bytes from one rank to another (or copies inside one rank
// when Src == Dst). From lists the regions the sender reads and To the
// regions the receiver writes, in the same byte order; both total Bytes.
type Message struct {
	Src, Dst int
	Round    int
	Bytes    int64
	Class    LinkClass
	From, To []Segment
	// Tensor and Box name what the message carries (the global region of
	// tensor Tensor), for checksums and error messages.
	Tensor int
	Box    placement.Box
}

// Schedule is a plan turned into messages and rounds for one route. Every
// rank builds the same Schedule; each executes its own part. A message's
// dependencies (data it forwards) always lie at least two rounds earlier, so
// a rank may keep two rounds in flight.
type Schedule struct {
	Route string
	// Note says why the route was chosen, for routes that choose (auto).
	Note  string
	Plans []*Plan
	// TensorNames name the tensors in errors and reports; optional.
	TensorNames []string
	Messages    []Message // in posting order: by round, then insertion order
	Rounds      int
	// RoundBytes bounds the bytes a rank sends, and separately receives,
	// in one round over each link class (network, local).
	RoundBytes int64
	// World is the communicator size: every message's ranks lie in
	// [0, World). A schedule of no tensors (no plans, no messages) is
	// &Schedule{Route: route, World: world}.
	World int
}

// Topology says which domain each rank of a communicator belongs to.
// Ranks of one domain share a fast local fabric.
type Topology struct {
	// Domain[r] identifies rank r's domain; ranks with equal values share
	// one. A nil Domain puts every rank in a domain of its own.
	Domain []int
}

// Class returns the link class between two ranks. A rank that Domain does
// not name (outside [0, len(Domain))) is in a domain of its own, as every
// rank is when Domain is nil; Validate reports such ranks as errors.
func (t Topology) Class(a, b int) LinkClass {
	switch {
	case a == b:
		return LinkSelf
	case t.Domain != nil && a >= 0 && b >= 0 && a < len(t.Domain) && b < len(t.Domain) && t.Domain[a] == t.Domain[b]:
		return LinkLocal
	}
	return LinkNetwork
}

// Validate checks that the topology fits a communicator of world ranks:
// a nil Domain, or one domain per rank.
func (t Topology) Validate(world int) error {
	if t.Domain != nil && len(t.Domain) != world {
		return &FieldError{Field: "topology", Got: fmt.Sprintf("%d ranks", len(t.Domain)), Want: fmt.Sprintf("%d (the communicator)", world),
			Why: "the topology must name the domain of every rank"}
	}
	return nil
}

// maxRounds bounds the rounds of a schedule: a message that would land in
// round maxRounds or later makes the Builder fail (see Builder.Err). Every
// round costs every rank a posting step, so more rounds than this mean
// chunks and staging far too small for the tensor.
const maxRounds = 1 << 24

// MaxMessages bounds the messages of a schedule (about MessageBytes each,
// so a few GiB at most). Routes count their messages before cutting boxes
// into chunks and refuse more with an error naming the count; since every
// message lands at most two rounds after the latest before it, a schedule
// within MaxMessages also stays within maxRounds.
const MaxMessages = 1 << 23

// MessageBytes estimates the memory one message of a schedule takes, with
// its segments, box and descriptors, for comparing a schedule's size with
// the memory a rank has.
const MessageBytes = 512

// addHook, set only by tests, sees every message Add places (with its
// round) and the lower bound it was given, to compare with a reference.
var addHook func(b *Builder, m Message, after int, div int64)

const pairHints = 4

const (
	usageBits   = 6
	usageFan    = 1 << usageBits
	usageMask   = usageFan - 1
	usageLevels = 4 // usageFan^usageLevels == maxRounds rounds
)

const usageFronts = 4

// seg is shorthand for a one-segment list.
func seg(tensor int, kind BufKind, at strided.Desc) []Segment {
	return []Segment{{Tensor: tensor, Buf: kind, At: at}}
}

// TensorName names tensor i of the schedule in errors: its TensorNames
// entry if it has one, else "tensor i". A nil schedule names every tensor
// by index.
func (s *Schedule) TensorName(i int) string {
	if s != nil && i >= 0 && i < len(s.TensorNames) && s.TensorNames[i] != "" {
		return s.TensorNames[i]
	}
	return fmt.Sprintf("tensor %d", i)
}

// classBytes returns the total bytes of every message of class c, saturating
// at math.MaxInt64.
func (s *Schedule) classBytes(c LinkClass) int64 {
	var n int64
	for i := range s.Messages {
		if s.Messages[i].Class == c {
			n = checked.SatSum(n, s.Messages[i].Bytes)
		}
	}
	return n
}
