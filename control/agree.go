package control

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
)

// Field is one named value every rank must agree on: Value, or, for a
// per-tensor field, PerTensor (its value for each tensor of a call, in the
// call's order; Value is then unused). A per-tensor field that differs is
// reported for the first tensor where it does, named by the values of the
// per-tensor field "tensor names" if the fields have one.
type Field struct {
	Name, Value string
	PerTensor   []string
}

// values returns the field's values: PerTensor, or Value.
func (f Field) values() []string {
	if f.PerTensor != nil {
		return f.PerTensor
	}
	return []string{f.Value}
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
// readiness, in one small collective (an allgather of a hash per field
// and a status word; only on a mismatch or a local failure, more
// collectives to find and describe it): a field that differs is an
// *AgreementError naming the first rank that differs from rank 0 and its
// value (and, for a per-tensor field, the first tensor it differs for),
// and a rank whose localErr is not nil makes every rank return a
// *ValidationError carrying that error, typed. Every rank returns the same
// error. Every rank must pass the same field names in the same order.
func Agree(ctx context.Context, coll Collective, fs []Field, localErr error) error {
	world := coll.Size()
	n := len(fs) + 1
	mine := make([]byte, 8*n)
	for i, f := range fs {
		binary.LittleEndian.PutUint64(mine[8*i:], hash64(f.values()...))
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
		return Spread(ctx, coll, failing, localErr)
	}
	e := &AgreementError{Field: fs[field].Name}
	for r := 1; r < world; r++ {
		if word(r, field) != word(0, field) {
			e.Differing = append(e.Differing, r)
		}
	}
	e.Rank = e.Differing[0]
	// Find the first tensor where the field differs: per-tensor hashes of
	// that field from every rank (the tensor count agrees, or it would have
	// been the field).
	vals := fs[field].values()
	idx := 0
	if fs[field].PerTensor != nil {
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
	if fs[field].PerTensor != nil && fs[field].Name != "tensor names" {
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
func tensorNameOf(fs []Field, i int) string {
	for _, f := range fs {
		if f.Name == "tensor names" && i < len(f.PerTensor) {
			return f.PerTensor[i]
		}
	}
	return ""
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

// Spread turns local failures into one error every rank returns: given
// which rank failed first (from a collective every rank made, such as a
// status word each), that rank's error, typed, wrapped in a
// *ValidationError. Every rank of coll must call it, with its own
// localErr (nil where it did not fail).
func Spread(ctx context.Context, coll Collective, failing int, localErr error) error {
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
