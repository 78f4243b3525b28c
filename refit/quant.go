package refit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/strided"
	"github.com/m2n-dev/m2n/transport"
)

// TensorQuant is what a driver needs to pack one converting tensor: its
// block grid and the global scales of every block this rank's source part
// touches (Scales.Window on the host, Scales.Dev loaded into the call's
// memory), the same blocks every step.
//
// With Self, the driver scales the tensor itself instead (a device driver,
// on a call that is not atomic): every rank's source part holds the blocks
// it touches whole and every destination part lies inside the same rank's
// source part, so no rank needs another's amaxes. Scales is then empty;
// the driver computes the scales of PartBlocks (the blocks of Part, the
// rank's source part, which lies in its buffer where PartAt says) from the
// part alone, packs with them, and writes the rank's destination scale
// tensor (the blocks DstBlocks, empty without a destination part) into
// TensorBuffers.Scale. A NaN or infinity shows in the scales it computed:
// it then lists the tensor in Stats.NonFinite.
type TensorQuant struct {
	Grid   fp8.Grid
	Scales transport.Scales
	// DType is the source's dtype (bf16 or f32).
	DType dtype.DType

	Self                  bool
	Part                  placement.Box
	PartAt                strided.Desc
	PartBlocks, DstBlocks placement.Box
}

// NewGrid returns the block grid of a converting spec (Spec.Scale over the
// layouts' shape), or an error when the spec does not convert.
func (s Spec) NewGrid() (fp8.Grid, error) {
	if !reshard.ConvertsTo(s.Src.DType(), s.Dst.DType()) {
		return fp8.Grid{}, fmt.Errorf("tensor %q does not convert to FP8 (%v to %v)", s.Name, s.Src.DType(), s.Dst.DType())
	}
	return fp8.NewGrid(s.Dst.Shape(), s.Scale)
}

// ScaleBlocks returns the blocks of the scale tensor that rank holds for a
// spec converted to FP8 (the blocks its destination box touches: where a
// destination shard boundary cuts a block, both ranks hold its scale), and
// whether it holds a scale tensor at all: false when the spec does not
// convert or rank is not in the destination mesh. Its TensorBuffers.Scale
// then holds ScaleBytes(rank) bytes: one little-endian float32 per block,
// row-major over the returned box.
func (s Spec) ScaleBlocks(rank int) (placement.Box, bool, error) {
	if !reshard.ConvertsTo(s.Src.DType(), s.Dst.DType()) {
		return placement.Box{}, false, nil
	}
	box, ok := s.Dst.RankBox(rank)
	if !ok {
		return placement.Box{}, false, nil
	}
	g, err := s.NewGrid()
	if err != nil {
		return placement.Box{}, false, err
	}
	b, err := g.Blocks(box)
	return b, err == nil, err
}

// ScaleBytes returns the size of rank's scale buffer for the spec (0 when
// it has none; see ScaleBlocks).
func (s Spec) ScaleBytes(rank int) (int64, error) {
	b, ok, err := s.ScaleBlocks(rank)
	if !ok || err != nil {
		return 0, err
	}
	return 4 * b.Elems(), nil
}

// scaleName names a scale mode in the agreement ("none" for the zero Mode).
func scaleName(m fp8.Mode) string {
	if m == 0 {
		return "none"
	}
	return m.String()
}

// checkScale checks a spec's scale mode against its dtypes and shape.
func checkScale(s Spec, p *reshard.Plan) error {
	src, dst := s.Src.DType(), s.Dst.DType()
	if !p.Converts() {
		if s.Scale != 0 {
			return &reshard.FieldError{Field: "fp8 scale mode", Got: scaleName(s.Scale), Want: "none",
				Why: fmt.Sprintf("the tensor does not convert in flight (source %v, destination %v): a scale mode needs a %v destination of a bf16 or f32 source", src, dst, dtype.FP8E4M3)}
		}
		return nil
	}
	if s.Scale < fp8.Block || s.Scale > fp8.Tensor {
		return &reshard.FieldError{Field: "fp8 scale mode", Got: scaleName(s.Scale), Want: "block, row or tensor",
			Why: fmt.Sprintf("the tensor converts %v to %v in flight, which needs to know which elements share a scale", src, dst)}
	}
	if _, err := fp8.NewGrid(s.Dst.Shape(), s.Scale); err != nil {
		return &reshard.FieldError{Field: "shape", Got: placement.FormatShape(s.Dst.Shape()),
			Why: fmt.Sprintf("converting to %v by %v: %v", dst, s.Scale, err)}
	}
	return nil
}

// NonFiniteError reports a NaN or infinite element of a tensor converting
// to FP8: its tensor, its global index (the first one in row-major order
// of the whole tensor, which every rank agrees on), and the source rank
// that holds it. A step that meets one fails on every rank before any
// destination buffer changes (where a device driver scales the tensor
// itself, after the move: see Call.Run); the group stays usable.
type NonFiniteError struct {
	Tensor string  `json:"tensor"`
	Rank   int     `json:"rank"`
	Index  []int64 `json:"index"`
	Flat   int64   `json:"flat"`
	Value  float64 `json:"-"`
	// ValueText is Value as text ("NaN", "+Inf", "-Inf"), which survives
	// JSON.
	ValueText string `json:"value"`
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("tensor %q: element %v (flat index %d) is %s on source rank %d: FP8 quantization refuses non-finite weights",
		e.Tensor, e.Index, e.Flat, e.ValueText, e.Rank)
}

func nonFiniteText(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return fmt.Sprint(v)
}

// replicaOf returns which replica of its part of l rank holds (its
// coordinates on the replicating mesh axes, row-major) and how many
// replicas the part has.
func replicaOf(l placement.Layout, rank int) (rep, count int) {
	m := l.Mesh()
	i := m.Index(rank)
	if i < 0 {
		return 0, 0
	}
	coord := m.Coord(i, nil)
	count = 1
	for a, pl := range l.Placements() {
		if pl == placement.Replicate() {
			rep = rep*m.Dim(a) + coord[a]
			count *= m.Dim(a)
		}
	}
	return rep, count
}

// replicaShare returns the part of box that replica rep of count gathers
// the amaxes of: the rep-th of count slices along the outermost dim that
// has at least count indices (or, if none has, one index of the longest dim
// each, some replicas getting none). Replicas hold the same bytes, so
// each reads only its share; the shares of all replicas cover the box.
func replicaShare(box placement.Box, rep, count int) placement.Box {
	if count <= 1 || box.Empty() {
		return box
	}
	if parts := box.Split(count); rep < len(parts) {
		return parts[rep]
	}
	empty := placement.Box{Lo: append([]int64(nil), box.Lo...), Hi: append([]int64(nil), box.Hi...)}
	empty.Hi[0] = empty.Lo[0] // fewer parts than replicas: an empty share
	return empty
}

// quantTensor is what one rank of a call needs to convert one tensor:
// derived once at Prepare.
type quantTensor struct {
	grid  fp8.Grid
	dtype dtype.DType // the source's
	// src: the rank holds a nonempty source part, srcBox, touching
	// srcBlocks; speaks: it gathers and sends the partial amaxes of
	// speakBox, its replica's share of the part (replicaShare), at speakAt
	// in its buffer (through its view), touching speakBlocks.
	src         bool
	speaks      bool
	srcBox      placement.Box
	srcBlocks   placement.Box
	speakBox    placement.Box
	speakAt     strided.Desc
	speakBlocks placement.Box
	// dst: the rank holds a nonempty destination part, whose scale tensor
	// covers dstBlocks; scaleBytes is its TensorBuffers.Scale size (-1: the
	// rank is not in the destination mesh).
	dst        bool
	dstBlocks  placement.Box
	scaleBytes int64
	// self: no rank needs another's amaxes (fp8.Grid.ScalesLocal), so this rank
	// scales the blocks it packs and holds from its own source part, all
	// of it (at partAt in its buffer), and sends no amaxes.
	self   bool
	partAt strided.Desc
}

// byDriver reports whether a device driver scales the tensor itself
// (TensorQuant.Self): a self-scaled tensor in block or row mode, with
// onDevice. In tensor mode a block is a whole matrix, which one pass of
// the fused kernel would read on one thread block: the amax kernel's
// parallel pass, with the exchange of nothing but failures, is faster.
func (q *quantTensor) byDriver(onDevice bool) bool {
	return onDevice && q.self && q.grid.Mode() != fp8.Tensor
}

// part is this rank's whole source part of the tensor in src, its buffer.
func (q *quantTensor) part(src transport.Buffer) transport.QuantRegion {
	return transport.QuantRegion{DType: q.dtype, Buf: src, At: q.partAt, Box: q.srcBox}
}

// prepareQuant derives this rank's quantTensor of every converting spec
// (nil for the others); the specs have been validated.
func prepareQuant(rank, world int, specs []Spec) ([]*quantTensor, error) {
	var out []*quantTensor
	for i, s := range specs {
		if !reshard.ConvertsTo(s.Src.DType(), s.Dst.DType()) {
			continue
		}
		if out == nil {
			out = make([]*quantTensor, len(specs))
		}
		g, err := s.NewGrid()
		if err != nil {
			return nil, err
		}
		q := &quantTensor{grid: g, dtype: s.Src.DType(), scaleBytes: -1}
		if q.self, err = g.ScalesLocal(s.Src, s.Dst, world); err != nil {
			return nil, err
		}
		if box, ok := s.Src.RankBox(rank); ok && !box.Empty() {
			q.src, q.srcBox = true, box
			if q.srcBlocks, err = g.Blocks(box); err != nil {
				return nil, err
			}
			q.partAt = strided.DescribeView(box, box, s.Src.ElemSize(), s.Views.Src)
			rep, count := replicaOf(s.Src, rank)
			if share := replicaShare(box, rep, count); !share.Empty() {
				q.speaks, q.speakBox = true, share
				q.speakAt = strided.DescribeView(box, share, s.Src.ElemSize(), s.Views.Src)
				if q.speakBlocks, err = g.Blocks(share); err != nil {
					return nil, err
				}
			}
		}
		if box, ok := s.Dst.RankBox(rank); ok {
			if q.dstBlocks, err = g.Blocks(box); err != nil {
				return nil, err
			}
			q.dst = !box.Empty()
			q.scaleBytes = 4 * q.dstBlocks.Elems()
		}
		out[i] = q
	}
	return out, nil
}

// stepScales is what the amax exchange of one step gives this rank: per
// converting tensor, the scales it packs with (loaded into the memory) and
// the bytes of its destination scale tensor.
type stepScales struct {
	exec    []TensorQuant
	bytes   [][]byte     // little-endian float32s over quantTensor.dstBlocks
	dst     []fp8.Window // the same scales, by tensor (delta mode rescales with them)
	release func()       // frees the scales LoadScales loaded (nil: none)
}

func (s *stepScales) free() {
	if s != nil && s.release != nil {
		s.release()
		s.release = nil
	}
}

// partialAmaxes gathers, in one QuantAmaxes, the partial amaxes of every
// converting tensor this rank speaks for, and returns them as the records
// this rank sends in the amax exchange (a failure or a non-finite element
// as a record of its own). A self-scaled tensor's amaxes (its whole source
// part's) stay on this rank, in own; with onDevice the driver gathers them
// itself and none are gathered here.
func (c *Call) partialAmaxes(qm transport.QuantMemory, bufs []TensorBuffers, onDevice bool) (blob []byte, own []fp8.Window) {
	var jobs []transport.AmaxJob
	var jobTensor []int
	for i, q := range c.quant {
		var region transport.QuantRegion
		var blocks placement.Box
		switch {
		case q == nil:
			continue
		case q.self && q.src && !q.byDriver(onDevice):
			region, blocks = q.part(bufs[i].Src), q.srcBlocks
		case !q.self && q.speaks:
			region = transport.QuantRegion{DType: q.dtype, Buf: bufs[i].Src, At: q.speakAt, Box: q.speakBox}
			blocks = q.speakBlocks
		default:
			continue
		}
		w, err := q.grid.NewWindow(blocks)
		if err != nil {
			blob = c.amaxFailure(blob, i, err)
			continue
		}
		jobs = append(jobs, transport.AmaxJob{Grid: q.grid, Window: w, Region: region})
		jobTensor = append(jobTensor, i)
	}
	if len(jobs) > 0 {
		if err := qm.QuantAmaxes(jobs); err != nil {
			for k := range jobs {
				jobs[k].Err = err
			}
		}
	}
	for k, j := range jobs {
		i := jobTensor[k]
		var nf *fp8.NonFiniteError
		switch {
		case errors.As(j.Err, &nf):
			blob = appendNonFiniteRecord(blob, i, nf.Flat, nf.Value)
		case j.Err != nil:
			blob = c.amaxFailure(blob, i, j.Err)
		case c.quant[i].self:
			if own == nil {
				own = make([]fp8.Window, len(c.quant))
			}
			own[i] = j.Window
		default:
			blob = appendWindowRecord(blob, i, j.Window)
		}
	}
	return blob, own
}

// amaxFailure appends the record of this rank's failure to gather tensor
// i's partial amaxes.
func (c *Call) amaxFailure(blob []byte, i int, err error) []byte {
	return appendFailureRecord(blob, i, fmt.Sprintf("rank %d, tensor %q: partial amaxes: %v", c.rank, c.specs[i].Name, err))
}

// exchangeAmax runs one step's amax exchange (every rank of the call takes
// part): each source rank gathers the partial amaxes of its replica's
// share of its part of every converting tensor (the replicas of a part
// split the reading: replicaShare), the ranks exchange them in one
// bounded collective, and every rank combines the windows that touch the
// blocks it packs and the blocks its destination part holds, so that every
// block's scale is the whole tensor's. A NaN or infinity anywhere fails
// every rank alike with a *control.ValidationError carrying a *NonFiniteError of
// the first one (the lowest flat index, over the first tensor in call
// order that has one).
//
// How it scales: every rank receives every speaking rank's windows, about
// 4 bytes per block of every converting tensor (a block of 128x128 bf16
// elements is 32 KiB; its scale 4 bytes, 1/8192 of the weights), over an
// allgather, and combines only the windows of the tensors it holds.
//
// A self-scaled tensor (fp8.Grid.ScalesLocal) sends no amaxes: every rank scales
// it from its own source part, and only a failure or a non-finite element
// crosses ranks, so that every rank still fails alike. With device, the
// driver moves the step on a device (it loads the scales itself: the GPU
// replay, into windows at fixed addresses) and the scales stay on the
// host (Scales.Dev nil); else they are loaded into mem
// (QuantMemory.LoadScales) for the host driver's QuantPack. With device
// and a call neither atomic nor in delta mode, the driver also scales the
// self-scaled tensors itself (TensorQuant.Self), on the device: nothing of
// them is gathered or combined here.
func (c *Call) exchangeAmax(ctx context.Context, mem transport.Memory, coll control.Collective, bufs []TensorBuffers, device bool) (*stepScales, error) {
	qm := mem.(transport.QuantMemory) // checked with the buffers
	onDevice := device && !c.opts.Atomic && c.delta == nil
	blob, own := c.partialAmaxes(qm, bufs, onDevice)
	blobs, err := control.Exchange(control.WithPhase(ctx, "FP8 amax exchange"), coll, blob)
	if err != nil {
		return nil, err
	}
	byTensor := make([][]amaxRecord, len(c.quant))
	for r, b := range blobs {
		recs, err := parseRecords(r, b, len(c.specs), func(t int) int { return c.specs[t].Dst.NDim() })
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			if c.quant[rec.tensor] == nil {
				return nil, fmt.Errorf("refit: rank %d sent FP8 amaxes of tensor %q, which does not convert", r, c.specs[rec.tensor].Name)
			}
			byTensor[rec.tensor] = append(byTensor[rec.tensor], rec)
		}
	}
	// The first failure, in call order, fails every rank alike.
	for i, recs := range byTensor {
		var fail, nonFinite *amaxRecord
		for k := range recs {
			rec := &recs[k]
			switch {
			case rec.kind == recFailure && (fail == nil || rec.rank < fail.rank):
				fail = rec
			case rec.kind == recNonFinite && (nonFinite == nil || rec.flat < nonFinite.flat ||
				(rec.flat == nonFinite.flat && rec.rank < nonFinite.rank)):
				nonFinite = rec
			}
		}
		if fail != nil {
			return nil, &control.ValidationError{Rank: fail.rank, Msg: fail.msg, Err: errors.New(fail.msg)}
		}
		if nonFinite != nil {
			return nil, c.nonFiniteError(i, nonFinite.rank, nonFinite.flat, nonFinite.value)
		}
	}
	out := &stepScales{exec: make([]TensorQuant, len(c.quant)), bytes: make([][]byte, len(c.quant)), dst: make([]fp8.Window, len(c.quant))}
	combine := func(i int, blocks placement.Box) (fp8.Window, error) {
		q := c.quant[i]
		w, err := q.grid.NewWindow(blocks)
		if err != nil {
			return w, err
		}
		if q.self { // scaled here: the driver's are not combined
			if own == nil || own[i].Values == nil {
				return w, fmt.Errorf("refit: rank %d, tensor %q: no amaxes of its source part", c.rank, c.specs[i].Name)
			}
			if err := w.MaxWith(own[i]); err != nil {
				return w, fmt.Errorf("refit: tensor %q: the amaxes of its source part: %w", c.specs[i].Name, err)
			}
		}
		for _, rec := range byTensor[i] {
			if err := w.MaxWith(rec.window); err != nil {
				return w, fmt.Errorf("refit: tensor %q: the amaxes of rank %d: %w", c.specs[i].Name, rec.rank, err)
			}
		}
		if err := w.ToScales(); err != nil {
			return w, fmt.Errorf("refit: tensor %q: %w", c.specs[i].Name, err)
		}
		return w, nil
	}
	var srcWindows []fp8.Window
	var srcTensor []int
	for i, q := range c.quant {
		if q == nil {
			continue
		}
		if q.byDriver(onDevice) {
			if q.src {
				out.exec[i] = TensorQuant{Grid: q.grid, DType: q.dtype, Self: true,
					Part: q.srcBox, PartAt: q.partAt, PartBlocks: q.srcBlocks, DstBlocks: q.dstBlocks}
			}
			continue
		}
		if q.src {
			w, err := combine(i, q.srcBlocks)
			if err != nil {
				return nil, err
			}
			srcWindows = append(srcWindows, w)
			srcTensor = append(srcTensor, i)
		}
		if q.dst {
			w, err := combine(i, q.dstBlocks)
			if err != nil {
				return nil, err
			}
			out.bytes[i] = w.AppendBits(make([]byte, 0, 4*len(w.Values)))
			out.dst[i] = w
		}
	}
	if len(srcWindows) > 0 && device {
		for k, i := range srcTensor {
			q := c.quant[i]
			out.exec[i] = TensorQuant{Grid: q.grid, DType: q.dtype, Scales: transport.Scales{Window: srcWindows[k]}}
		}
	} else if len(srcWindows) > 0 {
		sc, release, err := qm.LoadScales(srcWindows)
		if err != nil {
			return nil, fmt.Errorf("refit: rank %d: loading the scales of %d tensors: %w", c.rank, len(srcWindows), err)
		}
		out.release = release
		for k, i := range srcTensor {
			q := c.quant[i]
			out.exec[i] = TensorQuant{Grid: q.grid, DType: q.dtype, Scales: sc[k]}
		}
	}
	return out, nil
}

// nonFiniteSource finds the first NaN or infinity of this rank's source
// part of tensor t, whose scales a driver computed came out non-finite
// (Stats.NonFinite), and returns it as the *control.ValidationError of a
// *NonFiniteError that the end of the step spreads.
func (c *Call) nonFiniteSource(t int, bufs []TensorBuffers) error {
	q := c.quant[t]
	if q == nil || !q.src || t >= len(bufs) {
		return fmt.Errorf("rank %d: the driver reported non-finite scales of tensor %q, which this rank does not scale", c.rank, c.specs[t].Name)
	}
	w, err := q.grid.NewWindow(q.srcBlocks)
	if err != nil {
		return err
	}
	jobs := []transport.AmaxJob{{Grid: q.grid, Window: w, Region: q.part(bufs[t].Src)}}
	if err := c.mem.(transport.QuantMemory).QuantAmaxes(jobs); err != nil {
		return err
	}
	var nf *fp8.NonFiniteError
	if !errors.As(jobs[0].Err, &nf) {
		return fmt.Errorf("rank %d, tensor %q: the driver's FP8 scales came out non-finite, but its source part reads back finite (%v)", c.rank, c.specs[t].Name, jobs[0].Err)
	}
	return c.nonFiniteError(t, c.rank, nf.Flat, nf.Value)
}

// nonFiniteError is the error every rank returns for the NaN or infinity
// v at flat index flat of tensor t, on source rank rank: a
// *control.ValidationError carrying its *NonFiniteError.
func (c *Call) nonFiniteError(t, rank int, flat int64, v float64) error {
	e := &NonFiniteError{Tensor: c.specs[t].Name, Rank: rank, Flat: flat,
		Index: unravel(c.specs[t].Src.Shape(), flat), Value: v, ValueText: nonFiniteText(v)}
	return &control.ValidationError{Rank: rank, Msg: e.Error(), Err: e}
}

// unravel turns a row-major flat index into an index of shape.
func unravel(shape []int64, flat int64) []int64 {
	idx := make([]int64, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = flat % shape[d]
			flat /= shape[d]
		}
	}
	return idx
}

// deliverScales writes this step's scale tensors into the destinations'
// Scale buffers.
func (c *Call) deliverScales(mem transport.Memory, bufs []TensorBuffers, sc *stepScales) error {
	qm := mem.(transport.QuantMemory) // checked with the buffers
	var dst []transport.Buffer
	var src [][]byte
	for i, b := range sc.bytes {
		if len(b) > 0 {
			dst, src = append(dst, bufs[i].Scale), append(src, b)
		}
	}
	if len(dst) == 0 {
		return nil
	}
	if err := qm.WriteScales(dst, src); err != nil {
		return fmt.Errorf("refit: rank %d: writing the scales of %d tensors: %w", c.rank, len(dst), err)
	}
	return nil
}
