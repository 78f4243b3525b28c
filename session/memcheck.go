package session

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/internal/checked"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/reshard/program"
)

// Footprint is what one rank is about to allocate, in bytes, by kind: a
// program passes it to CheckMemory before it allocates, and Prepare checks
// its own (CallFootprint, then the compiled program's staging and scratch).
type Footprint struct {
	// Tensor names what the memory is for, in errors: a tensor, or a call
	// of several.
	Tensor string
	// Buffers and Staging live in the session's Memory (host memory on
	// CPUs, the GPU's on GPUs): the tensors' buffers, and the staging,
	// scratch and atomic shadows of the calls that move them.
	Buffers, Staging int64
	// HostCopies, Plan and Schedule live in host memory on every device:
	// host copies of buffers (to fill and check them), the plans
	// (reshard.PlanSize) and the schedules (reshard.MessageBytes a
	// message).
	HostCopies, Plan, Schedule int64
}

// split returns the footprint's bytes in host memory on device d, and
// those in the device's memory (0 on CPUs: it is host memory), saturating.
func (f Footprint) split(d Device) (host, dev int64) {
	host = checked.SatSum(f.HostCopies, f.Plan, f.Schedule)
	local := checked.SatSum(f.Buffers, f.Staging)
	if d == GPU {
		return host, local
	}
	return checked.SatSum(host, local), 0
}

func (f Footprint) parts() string {
	var out []string
	for _, p := range []struct {
		name string
		n    int64
	}{{"buffers", f.Buffers}, {"staging and scratch", f.Staging}, {"host copies", f.HostCopies}, {"plans", f.Plan}, {"schedule", f.Schedule}} {
		if p.n > 0 {
			out = append(out, p.name+" "+formatBytes(p.n))
		}
	}
	return strings.Join(out, ", ")
}

// MemoryError reports that ranks would allocate more than the memory they
// have: every rank of the session returns the same one, naming the first
// rank (in rank order) whose memory is short, the tensor, what it needs
// and what there is. Host memory is the host's, shared by the ranks on it:
// their needs count together.
type MemoryError struct {
	Rank   int    // the rank named: on a host, the one that needs the most
	Tensor string // what the memory is for
	Memory string // "host memory" or "GPU memory"
	Need   int64  // what Rank needs of it
	Parts  string // Rank's need by kind
	Ranks  []int  // the ranks that share the memory (a host's), Rank among them
	Total  int64  // what they need together
	Have   int64  // what is available
	From   string // where Have was read
}

func (e *MemoryError) Error() string {
	s := fmt.Sprintf("rank %d, tensor %q: needs %d bytes (%s) of %s: %s", e.Rank, e.Tensor, e.Need, formatBytes(e.Need), e.Memory, e.Parts)
	if len(e.Ranks) > 1 {
		s += fmt.Sprintf("; the %d ranks of its host (%s) need %d bytes (%s) together", len(e.Ranks), mesh.FormatRanks(e.Ranks), e.Total, formatBytes(e.Total))
	}
	return s + fmt.Sprintf("; %d bytes (%s) are available (%s)", e.Have, formatBytes(e.Have), e.From)
}

// memWords is what each rank contributes to a memory check: its needs in
// host and device memory, what each has available, and its footprint.
const memWords = 9

// CheckMemory makes every rank of the session compare what it is about to
// allocate (fp) with the memory it has, before it allocates, in one
// bounded collective: the host footprints of the ranks of one host
// together against the host's available memory (MemAvailable in
// /proc/meminfo, or less where the cgroup's limit leaves less), and on
// GPUs each rank's buffers and staging against its GPU's free memory
// (cuMemGetInfo). Every rank returns the same *MemoryError when some rank
// is short (the session stays usable), or nil. Every rank of the session
// must call it.
func (s *Session) CheckMemory(ctx context.Context, fp Footprint) error {
	if err := s.usable(); err != nil {
		return err
	}
	host, dev := fp.split(s.opts.Device)
	hostHave, hostFrom := hostAvailable()
	devHave, devFrom := int64(math.MaxInt64), ""
	if s.dev != nil {
		devHave, devFrom = s.dev.available()
	}
	mine := []int64{host, dev, hostHave, devHave, fp.Buffers, fp.Staging, fp.HostCopies, fp.Plan, fp.Schedule}
	b := make([]byte, 8*memWords)
	for i, x := range mine {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	all := make([]byte, len(b)*s.size)
	if control.PhaseOf(ctx) == "" {
		ctx = control.WithPhase(ctx, "memory check")
	}
	if err := s.ctl.Allgather(ctx, b, all); err != nil {
		return s.fail(err)
	}
	word := func(r, i int) int64 { return int64(binary.LittleEndian.Uint64(all[8*(r*memWords+i):])) }
	hostOf := s.machines
	if len(hostOf) != s.size {
		hostOf = make([]int, s.size) // every rank on one host
	}
	for r := 0; r < s.size; r++ {
		// the host of rank r, checked at its lowest rank.
		var ranks []int
		for q := 0; q < s.size; q++ {
			if hostOf[q] == hostOf[r] {
				ranks = append(ranks, q)
			}
		}
		if ranks[0] == r {
			var total int64
			have := int64(math.MaxInt64)
			top := r
			for _, q := range ranks {
				total = checked.SatSum(total, word(q, 0))
				have = min(have, word(q, 2))
				if word(q, 0) > word(top, 0) {
					top = q
				}
			}
			if total > have {
				return s.memoryError(fp.Tensor, top, "host memory", word(top, 0), ranks, total, have, hostFrom, word)
			}
		}
		if s.opts.Device == GPU && word(r, 1) > word(r, 3) {
			return s.memoryError(fp.Tensor, r, "GPU memory", word(r, 1), []int{r}, word(r, 1), word(r, 3), devFrom, word)
		}
	}
	return nil
}

func (s *Session) memoryError(tensor string, r int, memory string, need int64, ranks []int, total, have int64, from string, word func(r, i int) int64) error {
	p := Footprint{Buffers: word(r, 4), Staging: word(r, 5), HostCopies: word(r, 6), Plan: word(r, 7), Schedule: word(r, 8)}
	switch {
	case s.opts.Device == GPU && memory == "GPU memory":
		p = Footprint{Buffers: p.Buffers, Staging: p.Staging}
	case s.opts.Device == GPU:
		p = Footprint{HostCopies: p.HostCopies, Plan: p.Plan, Schedule: p.Schedule}
	}
	return &MemoryError{Rank: r, Tensor: tensor, Memory: memory, Need: need, Parts: p.parts(), Ranks: ranks, Total: total, Have: have, From: from}
}

// CallFootprint estimates what preparing and running a call of specs
// takes on this rank beside the caller's buffers, before anything is
// planned: the plans (reshard.PlanSize: exact), the schedule (at least a
// message per transfer and per chunk of every destination's part, at
// reshard.MessageBytes each, and at most reshard.MaxMessages: a route
// refuses more before it allocates them) and the staging bound. Specs
// that do not plan (bad layouts) count nothing: Prepare reports them.
func (s *Session) CallFootprint(specs []refit.Spec) Footprint {
	fp := Footprint{Tensor: callName(specs), Staging: s.opts.StagingBytes}
	var msgs int64
	chunk := max(s.opts.ChunkBytes, 1)
	for _, sp := range specs {
		transfers, bytes, err := reshard.PlanSize(sp.Src, sp.Dst, s.size)
		if err != nil {
			continue
		}
		fp.Plan = checked.SatSum(fp.Plan, bytes)
		var recv int64
		dm := sp.Dst.Mesh()
		for i := 0; i < dm.Size(); i++ {
			recv = checked.SatSum(recv, sp.Dst.LocalBytes(dm.RankAt(i)))
		}
		msgs = checked.SatSum(msgs, max(transfers, recv/chunk))
	}
	fp.Schedule = checked.SatMul(min(msgs, reshard.MaxMessages), reshard.MessageBytes)
	return fp
}

// checkCall is Prepare's own check before planning: the plans and the
// schedule of specs (CallFootprint, without the staging: the compiled
// program's exact staging is checked after, checkProgram).
func (s *Session) checkCall(ctx context.Context, specs []refit.Spec) error {
	fp := s.CallFootprint(specs)
	fp.Staging = 0
	return s.CheckMemory(control.WithPhase(ctx, "memory check of the call's plans and schedule"), fp)
}

// checkProgram is Prepare's check after compiling: the staging, the
// whole-tensor scratch and (atomic calls) the shadows that this rank's
// program allocates on its first run.
func (s *Session) checkProgram(ctx context.Context, specs []refit.Spec, p *program.Program) error {
	fp := Footprint{Tensor: callName(specs)}
	for slot := range p.Staging {
		for _, n := range p.Staging[slot] {
			fp.Staging = checked.SatSum(fp.Staging, n)
		}
	}
	for _, n := range p.Full {
		fp.Staging = checked.SatSum(fp.Staging, n)
	}
	if s.opts.Atomic {
		for _, sp := range specs {
			if sp.Dst.Mesh().Contains(s.rank) {
				fp.Staging = checked.SatSum(fp.Staging, sp.Dst.LocalBytes(s.rank))
			}
		}
	}
	return s.CheckMemory(control.WithPhase(ctx, "memory check of the call's staging and scratch"), fp)
}

func callName(specs []refit.Spec) string {
	switch len(specs) {
	case 0:
		return "(none)"
	case 1:
		return specs[0].Name
	}
	return fmt.Sprintf("%s and %d more", specs[0].Name, len(specs)-1)
}

// hostAvailable returns the host memory this process may still take, and
// where that was read: MemAvailable in /proc/meminfo, or less where the
// cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes) leaves less.
// Where neither can be read it is unbounded.
func hostAvailable() (int64, string) {
	have, from := int64(math.MaxInt64), "unknown"
	if n, ok := memAvailable(); ok {
		have, from = n, "MemAvailable in /proc/meminfo"
	}
	for _, c := range [][2]string{{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"}} {
		limit, ok1 := readInt(c[0])
		used, ok2 := readInt(c[1])
		if ok1 && ok2 && limit-used < have {
			have, from = max(limit-used, 0), "the cgroup's limit less its usage, "+c[0]
		}
	}
	return have, from
}

func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, false
			}
			return checked.SatMul(kb, 1024), true
		}
	}
	return 0, false
}

// readInt reads a file holding one whole number ("max" is no number).
func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// formatBytes renders a size in binary units.
func formatBytes(n int64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v, u = v/1024, u+1
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}
