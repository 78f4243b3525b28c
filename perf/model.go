package perf

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/m2n-dev/m2n/control"
	"github.com/m2n-dev/m2n/dtype"
	"github.com/m2n-dev/m2n/mesh"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard"
	"github.com/m2n-dev/m2n/session"
)

// refitFlat is the route of probe calls.
var refitFlat reshard.Route = reshard.Flat

// FillModel writes every tensor's pattern (seeded with its index in the
// model) into this rank's source parts, through their views: finite
// values (pattern.FillFloats) with floats, as a generator in FP8 needs.
// It runs by inSteps on s, the world session (every rank calls it).
func FillModel(s *session.Session, m *session.Model, b *session.ModelBuffers, floats bool) error {
	return inSteps(s, "model set-up (filling the sources)", func() error {
		return m.EachPart(b, model.Src, true, func(p session.ModelPart) error {
			if floats {
				return pattern.FillFloats(p.Tensor.Src, p.Rank, uint64(p.Index), p.Bytes, p.Part.View)
			}
			return pattern.Fill(p.Tensor.Src, p.Rank, uint64(p.Index), p.Bytes, p.Part.View)
		})
	})
}

// poisonModel fills this rank's destination parts and scale tensors with
// the poison.
func poisonModel(m *session.Model, b *session.ModelBuffers) error {
	for si := range m.StageCount() {
		ss := m.Session(si)
		if ss == nil || si >= len(b.Scale) {
			continue
		}
		for _, x := range b.Scale[si] {
			if err := ss.Memory().Upload(x, bytes.Repeat([]byte{pattern.Poison}, int(x.Len()))); err != nil {
				return err
			}
		}
	}
	return m.EachPart(b, model.Dst, true, func(p session.ModelPart) error {
		return pattern.PoisonPart(p.Tensor.Dst, p.Rank, p.Bytes, p.Part.View)
	})
}

// checkModel checks every element of this rank's destination parts (and
// the scale tensor of every part it receives in FP8, against quantizing
// the whole tensor at once) against the pattern after steps updates of
// changeModel (none: steps 0, and change is not called); the first wrong
// one is named with its tensor and worldRank.
func checkModel(m *session.Model, b *session.ModelBuffers, floats bool, steps uint64, change func(string) float64, worldRank int) error {
	return m.EachPart(b, model.Dst, false, func(p session.ModelPart) error {
		t := p.Tensor
		frac := 0.0
		if steps > 0 {
			frac = change(t.Name)
		}
		var err error
		switch {
		case t.Scale != 0 && p.Scale == nil:
			err = fmt.Errorf("rank %d: no scale buffer for %s", worldRank, t.Name)
		case t.Scale != 0:
			err = pattern.CheckFP8Changed(t.Src.DType(), t.Dst, t.Scale, p.Rank, uint64(p.Index), steps, frac, p.Bytes, p.Part.View, p.Scale)
		case floats:
			err = pattern.CheckFloatsChanged(t.Dst, p.Rank, uint64(p.Index), steps, frac, p.Bytes, p.Part.View)
		default:
			err = pattern.CheckChanged(t.Dst, p.Rank, uint64(p.Index), steps, frac, p.Bytes, p.Part.View)
		}
		if err != nil {
			nameWorldRank(err, t.Name, worldRank)
		}
		return err
	})
}

// probeSpec is a one-element call from rank 0 to every generator rank of
// l, and the generator's world ranks.
func probeSpec(l *model.Layouts) ([]refit.Spec, []int, error) {
	first, err := mesh.Interval([]int{1}, 0)
	if err != nil {
		return nil, nil, err
	}
	gens, err := mesh.Interval([]int{l.Generator.Ranks()}, l.Trainer.Ranks())
	if err != nil {
		return nil, nil, err
	}
	src, err := placement.ParseLayout("1", dtype.F32, first, "R")
	if err != nil {
		return nil, nil, err
	}
	dst, err := placement.ParseLayout("1", dtype.F32, gens, "R")
	if err != nil {
		return nil, nil, err
	}
	return []refit.Spec{{Name: "local-bandwidth probe", Src: src, Dst: dst}}, gens.Ranks(), nil
}

// accountSync fills the report's bytes by link class and stage, the
// stages' routes and rounds, the tensors completed, and every rank's
// memory and handles (its usage at start, after the first timed step and
// now), from reps, this rank's last step.
func accountSync(s *session.Session, l *model.Layouts, m *session.Model, reps []*refit.Report, start, warm Usage, warmPeak int64, rep *SyncReport) error {
	end, err := MeasureUsage()
	if err != nil {
		return err
	}
	ns := len(l.Stages)
	var st refit.Stats
	stageBytes, stageRounds := make([]int64, ns), make([]int64, ns)
	for si, r := range reps {
		if r == nil {
			continue
		}
		st.Add(r.Stats)
		stageBytes[si] = r.Stats.Sent[reshard.LinkNetwork] + r.Stats.Sent[reshard.LinkLocal] + r.Stats.Sent[reshard.LinkSelf]
		stageRounds[si] = int64(m.StageCall(si).Schedule().Rounds)
	}
	mm := m.Memory()
	src, dst := l.RankBytes(s.Rank())
	mine := []int64{st.Sent[reshard.LinkNetwork], st.Sent[reshard.LinkLocal], st.Sent[reshard.LinkSelf],
		src + dst, mm.Staging, mm.Scratch, mm.Bound, start.RSS, peakRSS(), st.Sent[0] + st.Sent[1], st.Recv[0] + st.Recv[1],
		warm.Requests, end.Requests, warm.Comms, end.Comms, warm.Heap, end.Heap, warm.Goroutines, end.Goroutines, warmPeak}
	const fixed = 20
	mine = append(append(mine, stageBytes...), stageRounds...)
	all, err := gather(s, "report gathering", mine)
	if err != nil {
		return err
	}
	for r := 0; r < s.Size(); r++ {
		v := all[r*len(mine):]
		for c := 0; c < 3; c++ {
			rep.Links[c] += v[c]
		}
		role := "generator"
		if srcB, _ := l.RankBytes(r); srcB > 0 {
			role = "trainer"
		}
		rep.Ranks = append(rep.Ranks, SyncRank{Rank: r, Role: role, Share: v[3], Staging: v[4], Scratch: v[5], Bound: v[6],
			Base: v[7], Peak: v[8], Sent: v[9], Recv: v[10], Requests: [2]int64{v[11], v[12]}, Comms: [2]int64{v[13], v[14]},
			Heap: [2]int64{v[15], v[16]}, Goroutines: [2]int64{v[17], v[18]}, PeakAfterWarm: v[19]})
		for si := 0; si < ns; si++ {
			rep.Stages[si].Bytes += v[fixed+si]
			rep.Stages[si].Rounds = max(rep.Stages[si].Rounds, int(v[fixed+ns+si]))
		}
	}
	return stageOutcomes(s, m, reps, rep)
}

// stageOutcomes fills each stage's route and the tensors completed and
// failed: every rank knows those of its own stages, so each stage's come
// from a rank in it (every rank of a stage agreed on them; the
// generators are in all).
func stageOutcomes(s *session.Session, m *session.Model, reps []*refit.Report, rep *SyncReport) error {
	lists := make([]string, m.StageCount())
	for si, r := range reps {
		if r != nil {
			lists[si] = fmt.Sprintf("%d:%s", len(r.Completed), strings.Join(r.Failed, "|"))
		}
	}
	routes, err := fromStageMembers(s, m.Routes())
	if err != nil {
		return err
	}
	per, err := fromStageMembers(s, lists)
	if err != nil {
		return err
	}
	for si := range rep.Stages {
		rep.Routes[si], rep.Stages[si].Route = routes[si], routes[si]
		n, failed, _ := strings.Cut(per[si], ":")
		k, _ := strconv.Atoi(n)
		rep.Completed += k
		if failed != "" {
			rep.Failed = append(rep.Failed, strings.Split(failed, "|")...)
		}
	}
	return nil
}

// fromStageMembers completes a per-stage list that every rank knows for
// its own stages ("" for the others) from every rank's.
func fromStageMembers(s *session.Session, mine []string) ([]string, error) {
	got, err := control.Exchange(context.Background(), s.Collective(), []byte(strings.Join(mine, ",")))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(mine))
	for _, b := range got {
		for si, x := range strings.Split(string(b), ",") {
			if x != "" && si < len(out) {
				out[si] = x
			}
		}
	}
	return out, nil
}
