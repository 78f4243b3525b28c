package refit

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/reshard"
)

// fieldValues is one agreed field: its value per tensor (or one value for a
// call-wide field).
type fieldValues struct {
	name      string
	values    []string
	perTensor bool
}

// callFields lists everything the ranks of a call must agree on before
// scheduling.
func callFields(specs []Spec, world int, route reshard.Route, topo reshard.Topology, opts Options) []fieldValues {
	one := func(name, v string) fieldValues { return fieldValues{name: name, values: []string{v}} }
	routeValue := "none"
	if route != nil {
		routeValue = fmt.Sprintf("%s %+v", route.Name(), route)
	}
	domains := "none"
	if topo.Domain != nil {
		domains = fmt.Sprint(topo.Domain)
	}
	fs := []fieldValues{
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
	for _, f := range opts.Agree {
		fs = append(fs, one(f.Name, f.Value))
	}
	per := func(name string, v func(Spec) string) fieldValues {
		f := fieldValues{name: name, perTensor: true}
		for _, s := range specs {
			f.values = append(f.values, v(s))
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

func hash64(vs ...string) uint64 {
	h := fnv.New64a()
	var n [8]byte
	for _, v := range vs {
		binary.LittleEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	return h.Sum64()
}

// AgreementError reports ranks that were given different inputs for one
// call.
type AgreementError struct {
	Field     string `json:"field"`            // the first field that differs
	Tensor    string `json:"tensor,omitempty"` // the tensor it differs for, "" for a call-wide field
	Rank      int    `json:"rank"`             // the first rank that differs from rank 0
	Value     string `json:"value"`            // its value there
	Want      string `json:"want"`             // rank 0's value
	Differing []int  `json:"differing"`        // every rank that differs from rank 0 in this field
}

func (e *AgreementError) Error() string {
	of := ""
	if e.Tensor != "" {
		of = fmt.Sprintf(" for tensor %q", e.Tensor)
	}
	return fmt.Sprintf("ranks disagree: rank %d has %s %s%s, rank 0 has %s (ranks differing from rank 0: %v)",
		e.Rank, e.Field, e.Value, of, e.Want, e.Differing)
}

// ValidationError reports an input some rank found invalid before anything
// moved. Every rank of the call returns it; Err is the failing rank's own
// error with its type (*BufferError, *FieldError, *ViewError, ...), so
// errors.As finds it on every rank.
type ValidationError struct {
	Rank int    // the lowest rank that failed
	Msg  string // its error's text
	Err  error  // its error, typed
}

func (e *ValidationError) Error() string { return "invalid input: " + e.Msg }

// Unwrap returns the failing rank's typed error.
func (e *ValidationError) Unwrap() error { return e.Err }

// Agree makes the ranks of coll agree on fields and on every rank's
// readiness, in one small collective: a field that differs is an
// *AgreementError naming the first rank that differs from rank 0 and its
// value, and a rank whose localErr is not nil makes every rank return a
// *ValidationError carrying that error, typed. Every rank returns the same
// error. Every rank must pass the same field names in the same order.
func Agree(ctx context.Context, coll Collective, fields []Field, localErr error) error {
	fs := make([]fieldValues, len(fields))
	for i, f := range fields {
		fs[i] = fieldValues{name: f.Name, values: []string{f.Value}}
	}
	return agree(ctx, coll, fs, localErr)
}

// Exchange gathers every rank's blob (of any length) on every rank of
// coll, rank r's at index r: a program's own small exchanges (reports,
// say) over the same bounded collective.
func Exchange(ctx context.Context, coll Collective, mine []byte) ([][]byte, error) {
	world := coll.Size()
	lens := make([]byte, 8*world)
	if err := coll.Allgather(ctx, binary.LittleEndian.AppendUint64(nil, uint64(len(mine))), lens); err != nil {
		return nil, err
	}
	counts, displs := make([]int64, world), make([]int64, world)
	total := int64(0)
	for r := range counts {
		counts[r] = int64(binary.LittleEndian.Uint64(lens[8*r:]))
		if counts[r] < 0 || counts[r] > 1<<30 {
			return nil, fmt.Errorf("refit: rank %d sends a control message of %d bytes", r, counts[r])
		}
		displs[r] = total
		total += counts[r]
	}
	all := make([]byte, total)
	if err := coll.Allgatherv(ctx, mine, all, counts, displs); err != nil {
		return nil, err
	}
	out := make([][]byte, world)
	for r := range out {
		out[r] = all[displs[r] : displs[r]+counts[r]]
	}
	return out, nil
}

// spread turns local failures into one error every rank returns: given
// which ranks failed (from a collective every rank made), the lowest
// failing rank's error, typed, wrapped in a *ValidationError.
func spread(ctx context.Context, coll Collective, failing int, localErr error) error {
	var mine []byte
	if localErr != nil {
		mine = EncodeError(localErr)
	}
	blobs, err := Exchange(ctx, coll, mine)
	if err != nil {
		return err
	}
	cause := DecodeError(blobs[failing])
	if cause == nil {
		cause = fmt.Errorf("rank %d failed without a message", failing)
	}
	return &ValidationError{Rank: failing, Msg: cause.Error(), Err: cause}
}

// agreeStatusWord is the smallest agreement: one status word per rank;
// on a failure anywhere, every rank returns the lowest failing rank's
// typed error.
func agreeStatusWord(ctx context.Context, coll Collective, phase string, localErr error) error {
	word := []byte{0}
	if localErr != nil {
		word[0] = 1
	}
	all := make([]byte, coll.Size())
	if err := coll.Allgather(ctx, word, all); err != nil {
		return err
	}
	for r, w := range all {
		if w != 0 {
			return spread(ctx, coll, r, localErr)
		}
	}
	return nil
}

// agree runs the agreement protocol: one allgather of a hash per field and
// a status word; only on a mismatch or a local failure, more collectives to
// find and describe it. Every rank returns the same error.
func agree(ctx context.Context, coll Collective, fs []fieldValues, localErr error) error {
	world := coll.Size()
	n := len(fs) + 1
	mine := make([]byte, 8*n)
	for i, f := range fs {
		binary.LittleEndian.PutUint64(mine[8*i:], hash64(f.values...))
	}
	if localErr != nil {
		binary.LittleEndian.PutUint64(mine[8*len(fs):], 1)
	}
	all := make([]byte, 8*n*world)
	if err := coll.Allgather(ctx, mine, all); err != nil {
		return err
	}
	word := func(r, i int) uint64 { return binary.LittleEndian.Uint64(all[8*(r*n+i):]) }
	// The first field that differs from rank 0 on any rank.
	field, failing := -1, -1
	for i := range fs {
		for r := 1; r < world && field < 0; r++ {
			if word(r, i) != word(0, i) {
				field = i
			}
		}
	}
	for r := 0; r < world && failing < 0; r++ {
		if word(r, len(fs)) != 0 {
			failing = r
		}
	}
	if field < 0 && failing < 0 {
		return nil
	}
	if field < 0 {
		return spread(ctx, coll, failing, localErr)
	}
	e := &AgreementError{Field: fs[field].name}
	for r := 1; r < world; r++ {
		if word(r, field) != word(0, field) {
			e.Differing = append(e.Differing, r)
		}
	}
	e.Rank = e.Differing[0]
	// Find the first tensor where the field differs: per-tensor hashes of
	// that field from every rank (the tensor count agrees, or it would have
	// been the field).
	vals := fs[field].values
	idx := 0
	if fs[field].perTensor {
		per := make([]byte, 8*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint64(per[8*i:], hash64(v))
		}
		allPer := make([]byte, len(per)*world)
		if err := coll.Allgather(ctx, per, allPer); err != nil {
			return err
		}
		at := func(r, i int) uint64 { return binary.LittleEndian.Uint64(allPer[len(per)*r+8*i:]) }
		idx = -1
		for i := range vals {
			for _, r := range e.Differing {
				if at(r, i) != at(0, i) && idx < 0 {
					idx, e.Rank = i, r
				}
			}
		}
		if idx < 0 {
			idx = 0
		}
	}
	// Every rank describes its value of the field (for that tensor).
	v := ""
	if idx < len(vals) {
		v = vals[idx]
	}
	desc := v
	if fs[field].perTensor && fs[field].name != "tensor names" {
		desc += "\x00" + tensorNameOf(fs, idx)
	}
	texts, err := Exchange(ctx, coll, []byte(desc))
	if err != nil {
		return err
	}
	get := func(r int) (string, string) {
		s := string(texts[r])
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				return s[:i], s[i+1:]
			}
		}
		return s, ""
	}
	e.Value, e.Tensor = get(e.Rank)
	e.Want, _ = get(0)
	return e
}

// tensorNameOf returns the name of tensor i from the fields.
func tensorNameOf(fs []fieldValues, i int) string {
	for _, f := range fs {
		if f.name == "tensor names" && i < len(f.values) {
			return f.values[i]
		}
	}
	return ""
}

// agreeSchedule compares the fingerprint of the schedule every rank built
// (and whether it could build and compile it at all).
func agreeSchedule(ctx context.Context, coll Collective, fp uint64, localErr error) error {
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
			return spread(ctx, coll, r, localErr)
		}
	}
	fp0 := binary.LittleEndian.Uint64(all[0:])
	var e *AgreementError
	for r := 1; r < world; r++ {
		if f := binary.LittleEndian.Uint64(all[16*r:]); f != fp0 {
			if e == nil {
				e = &AgreementError{Field: "schedule fingerprint", Rank: r, Value: fmt.Sprintf("%016x", f), Want: fmt.Sprintf("%016x", fp0)}
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
func compareSums(ctx context.Context, coll Collective, s *reshard.Schedule, st Stats) ([]sumFailure, error) {
	mine := make([]byte, 8*len(st.sentSums))
	for i, c := range st.sentSums {
		binary.LittleEndian.PutUint32(mine[8*i:], uint32(c.Message))
		binary.LittleEndian.PutUint32(mine[8*i+4:], c.CRC)
	}
	blobs, err := Exchange(ctx, coll, mine)
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
func agreeStatus(ctx context.Context, coll Collective, failed []byte, firstErr error) ([]bool, error, error) {
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
		mine = EncodeError(firstErr)
	}
	blobs, err := Exchange(ctx, coll, mine)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range blobs {
		if e := DecodeError(b); e != nil {
			return out, e, nil
		}
	}
	return out, fmt.Errorf("refit: a rank reported a failure without a message"), nil
}
