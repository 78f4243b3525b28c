package refit

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// callFields lists everything the ranks of a call must agree on before
// scheduling.
func callFields(specs []Spec, world int, route reshard.Route, topo reshard.Topology, opts Options) []control.Field {
	one := func(name, v string) control.Field { return control.Field{Name: name, Value: v} }
	routeValue := "none"
	if route != nil {
		routeValue = fmt.Sprintf("%s %+v", route.Name(), route)
	}
	domains := "none"
	if topo.Domain != nil {
		domains = fmt.Sprint(topo.Domain)
	}
	fs := []control.Field{
		one("call name", opts.Name),
		one("world size", fmt.Sprint(world)),
		one("tensor count", fmt.Sprint(len(specs))),
		one("route", routeValue),
		one("topology (domain of each rank)", domains),
		one("replica striping", fmt.Sprint(opts.Plan.StripeReplicas)),
		one("chunk bytes", fmt.Sprint(opts.Schedule.ChunkBytes)),
		one("staging bytes", fmt.Sprint(opts.Schedule.StagingBytes)),
		one("coalesce bytes", fmt.Sprint(opts.CoalesceBytes)),
		one("verify", fmt.Sprint(opts.Verify)),
		one("atomic", fmt.Sprint(opts.Atomic)),
		one("delta", fmt.Sprint(opts.Delta)),
	}
	fs = append(fs, opts.Agree...)
	per := func(name string, v func(Spec) string) control.Field {
		f := control.Field{Name: name, PerTensor: make([]string, 0, len(specs))}
		for _, s := range specs {
			f.PerTensor = append(f.PerTensor, v(s))
		}
		return f
	}
	meshOf := func(l placement.Layout) string {
		if l.Mesh().NDim() == 0 {
			return "none"
		}
		return l.Mesh().String()
	}
	return append(fs,
		per("tensor names", func(s Spec) string { return s.Name }),
		per("source shape", func(s Spec) string { return placement.FormatShape(s.Src.Shape()) }),
		per("source dtype", func(s Spec) string { return s.Src.DType().String() }),
		per("source mesh", func(s Spec) string { return meshOf(s.Src) }),
		per("source placements", func(s Spec) string { return "[" + placement.Format(s.Src.Placements()) + "]" }),
		per("destination shape", func(s Spec) string { return placement.FormatShape(s.Dst.Shape()) }),
		per("destination dtype", func(s Spec) string { return s.Dst.DType().String() }),
		per("destination mesh", func(s Spec) string { return meshOf(s.Dst) }),
		per("destination placements", func(s Spec) string { return "[" + placement.Format(s.Dst.Placements()) + "]" }),
		per("fp8 scale mode", func(s Spec) string { return scaleName(s.Scale) }),
	)
}

// agreeSchedule compares the fingerprint of the schedule every rank built
// (and whether it could build and compile it at all).
func agreeSchedule(ctx context.Context, coll control.Collective, fp uint64, localErr error) error {
	world := coll.Size()
	mine := binary.LittleEndian.AppendUint64(nil, fp)
	status := uint64(0)
	if localErr != nil {
		status = 1
	}
	mine = binary.LittleEndian.AppendUint64(mine, status)
	all := make([]byte, 16*world)
	if err := coll.Allgather(ctx, mine, all); err != nil {
		return err
	}
	for r := 0; r < world; r++ {
		if binary.LittleEndian.Uint64(all[16*r+8:]) != 0 {
			return control.Spread(ctx, coll, r, localErr)
		}
	}
	fp0 := binary.LittleEndian.Uint64(all[0:])
	var e *control.AgreementError
	for r := 1; r < world; r++ {
		if f := binary.LittleEndian.Uint64(all[16*r:]); f != fp0 {
			if e == nil {
				e = &control.AgreementError{Field: "schedule fingerprint", Rank: r, Value: fmt.Sprintf("%016x", f), Want: fmt.Sprintf("%016x", fp0)}
			}
			e.Differing = append(e.Differing, r)
		}
	}
	if e != nil {
		return e
	}
	return nil
}

// ChecksumError reports a message whose bytes arrived different from what
// was sent.
type ChecksumError struct {
	Tensor  string        `json:"tensor"`
	Box     placement.Box `json:"box"`
	Src     int           `json:"src"`
	Dst     int           `json:"dst"`
	Sent    uint32        `json:"sent"`
	Arrived uint32        `json:"arrived"`
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("tensor %q: box %v from rank %d to rank %d arrived with CRC-32C %08x, sent as %08x",
		e.Tensor, e.Box, e.Src, e.Dst, e.Arrived, e.Sent)
}

type sumFailure struct {
	tensor int
	err    error
}

// compareSums gathers every rank's sent checksums and compares this rank's
// received ones with them.
func compareSums(ctx context.Context, coll control.Collective, s *reshard.Schedule, st Stats) ([]sumFailure, error) {
	mine := make([]byte, 8*len(st.sentSums))
	for i, c := range st.sentSums {
		binary.LittleEndian.PutUint32(mine[8*i:], uint32(c.Message))
		binary.LittleEndian.PutUint32(mine[8*i+4:], c.CRC)
	}
	blobs, err := control.Exchange(ctx, coll, mine)
	if err != nil {
		return nil, err
	}
	sent := map[int32]uint32{}
	for _, b := range blobs {
		for i := 0; i+8 <= len(b); i += 8 {
			sent[int32(binary.LittleEndian.Uint32(b[i:]))] = binary.LittleEndian.Uint32(b[i+4:])
		}
	}
	var out []sumFailure
	for _, c := range st.recvSums {
		want, ok := sent[c.Message]
		m := &s.Messages[c.Message]
		if ok && want == c.CRC {
			continue
		}
		out = append(out, sumFailure{m.Tensor, &ChecksumError{Tensor: s.TensorName(m.Tensor), Box: m.Box,
			Src: m.Src, Dst: m.Dst, Sent: want, Arrived: c.CRC}})
	}
	return out, nil
}

// agreeStatus gathers every rank's per-tensor failures and first error;
// every rank gets the same answer, the first error typed.
func agreeStatus(ctx context.Context, coll control.Collective, failed []byte, firstErr error) ([]bool, error, error) {
	world := coll.Size()
	n := len(failed)
	all := make([]byte, n*world)
	if err := coll.Allgather(ctx, failed, all); err != nil {
		return nil, nil, err
	}
	out := make([]bool, n)
	any := false
	for r := 0; r < world; r++ {
		for i := 0; i < n; i++ {
			if all[r*n+i] != 0 {
				out[i], any = true, true
			}
		}
	}
	if !any {
		return out, nil, nil
	}
	var mine []byte
	if firstErr != nil {
		mine = control.EncodeError(firstErr)
	}
	blobs, err := control.Exchange(ctx, coll, mine)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range blobs {
		if e := control.DecodeError(b); e != nil {
			return out, e, nil
		}
	}
	return out, fmt.Errorf("refit: a rank reported a failure without a message"), nil
}
