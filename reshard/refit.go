package reshard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/m2n-dev/m2n/placement"
)

// Collective is the control-plane collective a refit call agrees over: the
// launcher's communicator of the ranks that take part (m2n's *mpi.Comm has
// these methods). Every rank must call Refit for each call, even with no
// buffers, so that the collectives match.
type Collective interface {
	Rank() int
	Size() int
	// Allgather gathers len(send) bytes from every rank into recv, rank r's
	// at recv[r*len(send):].
	Allgather(send, recv []byte) error
	// Allgatherv gathers counts[r] bytes from rank r into recv at displs[r].
	Allgatherv(send, recv []byte, counts, displs []int64) error
}

// Tensor is one named tensor of a refit call, as this rank holds it.
type Tensor struct {
	Name     string
	Src, Dst placement.Layout
	Buffers  TensorBuffers
}

// Field is one named value every rank of a call must agree on.
type Field struct{ Name, Value string }

// RefitOptions configure a call. Every rank must pass equal values for
// everything but Timeout; Refit checks that they do.
type RefitOptions struct {
	// Route names the route; Build makes its schedule from the plans.
	Route string
	Build func(plans []*Plan) (*Schedule, error)
	// Plan and Schedule are the planning and staging options.
	Plan     Options
	Schedule ScheduleOptions
	// Timeout bounds every wait for a round (0: none).
	Timeout time.Duration
	// Verify checksums every message on both sides (CRC-32C) and compares
	// the sums across ranks before the call succeeds.
	Verify bool
	// Atomic makes destinations receive into shadow buffers and copy them
	// in only once every tensor of the call has arrived (and verified) on
	// every rank: if the call fails, every destination buffer still holds
	// its old values, bit for bit.
	Atomic bool
	// Agree lists more fields that must match across ranks (domain sizes,
	// leader balance, ...).
	Agree []Field
	// Watch, if set, is called before each collective phase of the call
	// ("agreement", "verification", "status") and the function it returns
	// after it; a caller arms a watchdog there, since a collective with a
	// dead peer never returns.
	Watch func(phase string) (done func())
}

func (o *RefitOptions) watch(phase string) func() {
	if o.Watch == nil {
		return func() {}
	}
	return o.Watch(phase)
}

// RefitReport is what a call did on this rank.
type RefitReport struct {
	// Completed lists the tensors that reached every destination rank (and
	// verified, with Verify), in call order; Failed the others.
	Completed, Failed []string
	Schedule          *Schedule
	Stats             Stats
}

// Refit moves every tensor of a call from its source layout to its
// destination layout, with the guarantees a production weight sync needs:
//
//   - Everything is validated before a byte moves: layouts that disagree on
//     shape or dtype, meshes outside the communicator, buffers whose length
//     does not match the layout (too long or too short), a rank's buffers
//     that alias. A local failure fails every rank, with the failing rank's
//     message (*ValidationError).
//   - The ranks agree: every rank hashes what it was given (layouts,
//     options, route, staging), one small collective compares the hashes,
//     and on a mismatch every rank fails at once with an *AgreementError
//     naming the ranks that differ and the first field where they do.
//   - Every wait is bounded by Timeout (*TimeoutError); the caller must then
//     Abort the transport, because the peers may be stuck.
//   - With Verify, checksums of every message are compared across ranks
//     (*ChecksumError names the tensor, the box and both ranks).
//   - With Atomic, nothing reaches a destination buffer unless every tensor
//     arrived everywhere.
//
// The report lists the tensors that completed. Every rank of coll must call
// Refit with tensors of the same names and layouts; ranks outside a
// tensor's meshes pass nil buffers. The executor's transport must span the
// same ranks as coll, in the same order.
func Refit(ctx context.Context, ex *Executor, coll Collective, tensors []Tensor, opts RefitOptions) (*RefitReport, error) {
	rank, world := coll.Rank(), coll.Size()
	if ex.T.Rank() != rank || ex.T.Size() != world {
		return nil, fmt.Errorf("reshard: transport is rank %d of %d, collective rank %d of %d", ex.T.Rank(), ex.T.Size(), rank, world)
	}
	// 1. Local validation, then agreement (which also spreads any rank's
	// validation failure to every rank).
	plans, localErr := validate(ex.T.Rank(), ex.Mem, tensors, world, opts, true)
	done := opts.watch("agreement")
	err := agree(coll, fields(tensors, world, opts), localErr)
	done()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(tensors))
	for i, t := range tensors {
		names[i] = t.Name
	}
	rep := &RefitReport{}
	if len(tensors) == 0 {
		return rep, nil
	}
	sched, err := opts.Build(plans)
	if err != nil {
		return nil, err
	}
	sched.TensorNames = names
	rep.Schedule = sched

	// 2. Buffers: the destinations, or their shadows.
	bufs := make([]TensorBuffers, len(tensors))
	var shadows []Buffer
	defer func() {
		for _, b := range shadows {
			if b != nil {
				ex.Mem.Free(b)
			}
		}
	}()
	for i, t := range tensors {
		bufs[i] = t.Buffers
		if opts.Atomic && t.Buffers.Dst != nil && t.Buffers.Dst.Len() > 0 {
			b, err := ex.Mem.Alloc(t.Buffers.Dst.Len())
			if err != nil {
				return nil, fmt.Errorf("reshard: shadow of tensor %q: %w", t.Name, err)
			}
			shadows = append(shadows, b)
			bufs[i].Dst = b
		}
	}

	// 3. Run. A transport failure or timeout ends the call here: peers may
	// be gone, so no collective is safe; the caller aborts.
	ex.Timeout, ex.Verify = opts.Timeout, opts.Verify
	st, err := ex.Run(ctx, sched, bufs)
	rep.Stats = st
	if err != nil {
		rep.Failed = names
		return rep, err
	}

	// 4. Verify and agree on what completed.
	failed := make([]byte, len(tensors))
	var firstErr error
	if opts.Verify {
		done := opts.watch("verification")
		bad, err := compareSums(coll, sched, st)
		done()
		if err != nil {
			return rep, err
		}
		for _, ce := range bad {
			failed[ce.tensor] = 1
			if firstErr == nil {
				firstErr = ce.err
			}
		}
	}
	done = opts.watch("status")
	allFailed, first, err := agreeStatus(coll, failed, firstErr)
	done()
	if err != nil {
		return rep, err
	}
	for i, n := range names {
		if allFailed[i] {
			rep.Failed = append(rep.Failed, n)
		} else {
			rep.Completed = append(rep.Completed, n)
		}
	}
	if first != "" {
		if opts.Atomic {
			rep.Completed, rep.Failed = nil, names
		}
		if firstErr != nil && firstErr.Error() == first {
			return rep, firstErr
		}
		return rep, errors.New(first)
	}

	// 5. Commit the shadows.
	if opts.Atomic {
		for i, t := range tensors {
			if t.Buffers.Dst == nil || t.Buffers.Dst.Len() == 0 {
				continue
			}
			all := Strided{Run: t.Buffers.Dst.Len()}
			if err := ex.Mem.Copy(t.Buffers.Dst, all, bufs[i].Dst, all); err != nil {
				return rep, fmt.Errorf("reshard: committing tensor %q: %w", t.Name, err)
			}
		}
		if err := ex.Mem.Sync(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// Check runs the first step of Refit alone, before any buffer exists:
// every rank validates the layouts and options of a call and the ranks agree
// on them, so that a mistake surfaces on every rank at once (*ValidationError,
// *AgreementError) before the caller allocates or launches anything.
// Tensors' buffers are not looked at.
func Check(coll Collective, tensors []Tensor, opts RefitOptions) error {
	_, localErr := validate(coll.Rank(), nil, tensors, coll.Size(), opts, false)
	done := opts.watch("agreement")
	defer done()
	return agree(coll, fields(tensors, coll.Size(), opts), localErr)
}

// validate checks this rank's inputs and plans every tensor; with bufs it
// checks the buffers too. It returns the first problem as an error rather
// than failing, so that agreement can spread it to every rank.
func validate(rank int, mem Memory, tensors []Tensor, world int, opts RefitOptions, withBuffers bool) ([]*Plan, error) {
	if opts.Build == nil {
		return nil, fmt.Errorf("rank %d: no route to build", rank)
	}
	if err := opts.Schedule.Validate(); err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	seen := map[string]bool{}
	plans := make([]*Plan, len(tensors))
	for i, t := range tensors {
		if t.Name == "" || seen[t.Name] {
			return nil, fmt.Errorf("rank %d, tensor %d: name %q is empty or repeated", rank, i, t.Name)
		}
		seen[t.Name] = true
		p, err := NewPlan(t.Src, t.Dst, world, opts.Plan)
		if err != nil {
			return nil, fmt.Errorf("rank %d, tensor %q: %w", rank, t.Name, err)
		}
		plans[i] = p
	}
	if !withBuffers {
		return plans, nil
	}
	s := &Schedule{Plans: plans, world: world}
	bufs := make([]TensorBuffers, len(tensors))
	for i, t := range tensors {
		bufs[i] = t.Buffers
	}
	if err := checkBuffers(s, rank, bufs); err != nil {
		var be *BufferError
		if errors.As(err, &be) {
			return nil, fmt.Errorf("rank %d, tensor %q: %s buffer %s: %d bytes, the layout needs %d",
				rank, tensors[be.Tensor].Name, be.Side, be.Why, be.Got, be.Want)
		}
		return nil, err
	}
	if err := checkAliasing(mem, rank, tensors); err != nil {
		return nil, err
	}
	return plans, nil
}

// checkAliasing fails when two buffers of this rank share memory.
func checkAliasing(mem Memory, rank int, tensors []Tensor) error {
	ad, ok := mem.(Addresser)
	if !ok {
		return nil
	}
	type span struct {
		lo, hi uintptr
		what   string
	}
	var spans []span
	for _, t := range tensors {
		for _, side := range []struct {
			b    Buffer
			name string
		}{{t.Buffers.Src, "source"}, {t.Buffers.Dst, "destination"}} {
			if side.b == nil {
				continue
			}
			if lo, hi, ok := ad.AddressRange(side.b); ok {
				spans = append(spans, span{lo, hi, fmt.Sprintf("the %s buffer of tensor %q", side.name, t.Name)})
			}
		}
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].lo < spans[b].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return fmt.Errorf("rank %d: %s and %s overlap in memory; every buffer of a call must be its own",
				rank, spans[i-1].what, spans[i].what)
		}
	}
	return nil
}

// fieldValues is one agreed field: its value per tensor (or one value for a
// call-wide field).
type fieldValues struct {
	name      string
	values    []string
	perTensor bool
}

func fields(tensors []Tensor, world int, opts RefitOptions) []fieldValues {
	one := func(name, v string) fieldValues { return fieldValues{name: name, values: []string{v}} }
	fs := []fieldValues{
		one("world size", fmt.Sprint(world)),
		one("tensor count", fmt.Sprint(len(tensors))),
		one("route", opts.Route),
		one("replica striping", fmt.Sprint(opts.Plan.StripeReplicas)),
		one("chunk bytes", fmt.Sprint(opts.Schedule.ChunkBytes)),
		one("staging bytes", fmt.Sprint(opts.Schedule.StagingBytes)),
		one("verify", fmt.Sprint(opts.Verify)),
		one("atomic", fmt.Sprint(opts.Atomic)),
	}
	for _, f := range opts.Agree {
		fs = append(fs, one(f.Name, f.Value))
	}
	per := func(name string, v func(Tensor) string) fieldValues {
		f := fieldValues{name: name, perTensor: true}
		for _, t := range tensors {
			f.values = append(f.values, v(t))
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
		per("tensor names", func(t Tensor) string { return t.Name }),
		per("source shape", func(t Tensor) string { return placement.FormatShape(t.Src.Shape()) }),
		per("source dtype", func(t Tensor) string { return t.Src.DType().String() }),
		per("source mesh", func(t Tensor) string { return meshOf(t.Src) }),
		per("source placements", func(t Tensor) string { return "[" + placement.Format(t.Src.Placements()) + "]" }),
		per("destination shape", func(t Tensor) string { return placement.FormatShape(t.Dst.Shape()) }),
		per("destination dtype", func(t Tensor) string { return t.Dst.DType().String() }),
		per("destination mesh", func(t Tensor) string { return meshOf(t.Dst) }),
		per("destination placements", func(t Tensor) string { return "[" + placement.Format(t.Dst.Placements()) + "]" }),
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
	Field     string // the first field that differs
	Tensor    string // the tensor it differs for, "" for a call-wide field
	Rank      int    // the first rank that differs from rank 0
	Value     string // its value there
	Want      string // rank 0's value
	Differing []int  // every rank that differs from rank 0 in this field
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
// moved. Every rank of the call returns it.
type ValidationError struct {
	Rank int    // the lowest rank that failed
	Msg  string // its error
}

func (e *ValidationError) Error() string { return "invalid input: " + e.Msg }

const textWidth = 512

// fixedText renders s into exactly textWidth bytes.
func fixedText(s string) []byte {
	b := make([]byte, textWidth)
	copy(b, s)
	return b
}

func readText(b []byte) string { return strings.TrimRight(string(b), "\x00") }

// agree runs the agreement protocol: one allgather of a hash per field and
// a status word; only on a mismatch or a local failure, more collectives to
// find and describe it. Every rank returns the same error.
func agree(coll Collective, fs []fieldValues, localErr error) error {
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
	if err := coll.Allgather(mine, all); err != nil {
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
		// A validation failure: every rank learns the lowest failing rank's
		// message.
		msg := ""
		if localErr != nil {
			msg = localErr.Error()
		}
		texts := make([]byte, textWidth*world)
		if err := coll.Allgather(fixedText(msg), texts); err != nil {
			return err
		}
		return &ValidationError{Rank: failing, Msg: readText(texts[failing*textWidth : (failing+1)*textWidth])}
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
		if err := coll.Allgather(per, allPer); err != nil {
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
	texts := make([]byte, textWidth*world)
	if err := coll.Allgather(fixedText(desc), texts); err != nil {
		return err
	}
	get := func(r int) (string, string) {
		v, t, _ := strings.Cut(readText(texts[r*textWidth:(r+1)*textWidth]), "\x00")
		return v, t
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

// ChecksumError reports a message whose bytes arrived different from what
// was sent.
type ChecksumError struct {
	Tensor        string
	Box           placement.Box
	Src, Dst      int
	Sent, Arrived uint32
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
func compareSums(coll Collective, s *Schedule, st Stats) ([]sumFailure, error) {
	world := coll.Size()
	mine := make([]byte, 8*len(st.SentSums))
	for i, c := range st.SentSums {
		binary.LittleEndian.PutUint32(mine[8*i:], uint32(c.Message))
		binary.LittleEndian.PutUint32(mine[8*i+4:], c.CRC)
	}
	lens := make([]byte, 8*world)
	if err := coll.Allgather(binary.LittleEndian.AppendUint64(nil, uint64(len(mine))), lens); err != nil {
		return nil, err
	}
	counts, displs := make([]int64, world), make([]int64, world)
	total := int64(0)
	for r := range counts {
		counts[r] = int64(binary.LittleEndian.Uint64(lens[8*r:]))
		displs[r] = total
		total += counts[r]
	}
	all := make([]byte, total)
	if err := coll.Allgatherv(mine, all, counts, displs); err != nil {
		return nil, err
	}
	sent := make(map[int32]uint32, total/8)
	for i := int64(0); i+8 <= total; i += 8 {
		sent[int32(binary.LittleEndian.Uint32(all[i:]))] = binary.LittleEndian.Uint32(all[i+4:])
	}
	var out []sumFailure
	for _, c := range st.RecvSums {
		want, ok := sent[c.Message]
		m := &s.Messages[c.Message]
		if ok && want == c.CRC {
			continue
		}
		out = append(out, sumFailure{m.Tensor, &ChecksumError{Tensor: tensorName(s, m.Tensor), Box: m.Box,
			Src: m.Src, Dst: m.Dst, Sent: want, Arrived: c.CRC}})
	}
	return out, nil
}

// agreeStatus gathers every rank's per-tensor failures and first error;
// every rank gets the same answer.
func agreeStatus(coll Collective, failed []byte, firstErr error) ([]bool, string, error) {
	world := coll.Size()
	n := len(failed)
	all := make([]byte, n*world)
	if err := coll.Allgather(failed, all); err != nil {
		return nil, "", err
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
		return out, "", nil
	}
	msg := ""
	if firstErr != nil {
		msg = firstErr.Error()
	}
	texts := make([]byte, textWidth*world)
	if err := coll.Allgather(fixedText(msg), texts); err != nil {
		return nil, "", err
	}
	for r := 0; r < world; r++ {
		if t := readText(texts[r*textWidth : (r+1)*textWidth]); t != "" {
			return out, t, nil
		}
	}
	return out, "a rank reported a failure without a message", nil
}
