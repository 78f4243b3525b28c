package perf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/m2n-dev/m2n/lora"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/session"
	"github.com/m2n-dev/m2n/units"
)

// LoRAReport is what refit sync --lora prints: the full sync of the model
// beside the LoRA step of the same run (the adapters moved, then merged
// into the weights on every generator rank), slowest rank, medians.
type LoRAReport struct {
	Rank         int64   `json:"lora_rank"`
	Adapters     int     `json:"adapter_tensors"`
	AdapterBytes int64   `json:"adapter_bytes"`
	ModelBytes   int64   `json:"model_bytes"`
	Steps        int     `json:"steps"`
	FullSec      float64 `json:"full_sync_median_s"`
	StepSec      float64 `json:"lora_step_median_s"`
	MoveSec      float64 `json:"adapter_move_median_s"`
	MergeSec     float64 `json:"merge_median_s"`
	TimeRatio    float64 `json:"step_over_full"`
	ByteRatio    float64 `json:"bytes_over_full"`
	Check        string  `json:"check"`
}

// LoRASync times, on the world session s, Warmup+Iters full syncs of the
// model full (buffers wb, its sources filled with FillModel's floats),
// then as many LoRA steps: the sources write new adapters (ad, buffers
// ab: laid out from model.Adapters of full's model), the adapters move,
// and every generator rank merges them into its weights
// (session.Model.MergeLoRA). With c.Check every generator rank then
// checks every element of its weights against the merges recomputed
// element by element from the patterns, and its adapters against the
// last step's.
func LoRASync(s *session.Session, full *session.Model, wb *session.ModelBuffers, ad *session.Model, ab *session.ModelBuffers, c SyncConfig) (*LoRAReport, error) {
	ctx := context.Background()
	rep := &LoRAReport{Adapters: len(ad.Layouts.Model.Tensors), AdapterBytes: ad.Layouts.Model.Bytes(),
		ModelBytes: full.Layouts.Model.Bytes(), Steps: c.Iters}
	if rep.Adapters > 0 {
		rep.Rank = ad.Layouts.Model.Tensors[0].Adapter.Rank
	}
	var fullT, stepT, moveT, mergeT timings
	steps := c.Warmup + c.Iters
	for it := range steps {
		if c.Progress != nil {
			c.Progress(int64(it), int64(2*steps), "steps")
		}
		sec, err := timedRun(s, full, wb)
		if err != nil {
			return nil, err
		}
		if it >= c.Warmup {
			fullT.Add(sec)
		}
	}
	mg := lora.NewMerger()
	for it := range steps {
		if c.Progress != nil {
			c.Progress(int64(steps+it), int64(2*steps), "steps")
		}
		step := uint64(it + 1)
		if err := inSteps(s, "the sources' adapters", func() error { return fillAdapters(ad, ab, step) }); err != nil {
			return nil, err
		}
		if err := s.Barrier(ctx); err != nil {
			return nil, err
		}
		t0 := time.Now()
		_, err := ad.Run(ctx, ab)
		if _, _, err = stepOver(s, ad, 0, err); err != nil {
			var agreed Agreed
			if s.Options().Atomic && errors.As(err, &agreed) {
				err = loraUntouched(s, full, wb, ad, ab, uint64(it), c.WorldRank, err)
			}
			return nil, err
		}
		t1 := time.Now()
		if err := inSteps(s, "the generator's LoRA merge", func() error { return full.MergeLoRA(mg, wb, ad, ab) }); err != nil {
			return nil, err
		}
		t2 := time.Now()
		per, err := maxOverEach(s, []float64{t2.Sub(t0).Seconds(), t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds()})
		if err != nil {
			return nil, err
		}
		if it >= c.Warmup {
			stepT.Add(per[0])
			moveT.Add(per[1])
			mergeT.Add(per[2])
		}
	}
	rep.FullSec, rep.StepSec, rep.MoveSec, rep.MergeSec = fullT.Median(), stepT.Median(), moveT.Median(), mergeT.Median()
	if rep.FullSec > 0 {
		rep.TimeRatio = rep.StepSec / rep.FullSec
	}
	if rep.ModelBytes > 0 {
		rep.ByteRatio = float64(rep.AdapterBytes) / float64(rep.ModelBytes)
	}
	msg := ""
	if c.Check {
		err := inSteps(s, "check (comparing every merged weight)", func() error {
			if err := checkLoRA(full, wb, ad, ab, uint64(steps), c.WorldRank); err != nil {
				msg = err.Error()
				c.Log.Error().Err(err).Msg("check failed")
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	first, err := firstMessage(s, msg)
	rep.Check = checkResult(c.Check, first)
	return rep, err
}

// loraUntouched checks, after LoRA step merged+1's adapters failed to
// move in atomic mode, that every generator rank's weights still hold the
// previous step's merge, every element against the reference (checkLoRA
// of merged steps), and its adapters the previous step's: nothing of the
// failed step reached a weight. Its error, every rank's alike, says which.
// callErr is the step's failure as every rank agreed on it (stepOver).
func loraUntouched(s *session.Session, full *session.Model, wb *session.ModelBuffers, ad *session.Model, ab *session.ModelBuffers,
	merged uint64, worldRank int, callErr error) error {
	callErr = fmt.Errorf("LoRA step %d, the adapters' move: %w", merged+1, callErr)
	msg := ""
	err := inSteps(s, "check after the failed LoRA step (comparing every merged weight)", func() error {
		if err := checkLoRA(full, wb, ad, ab, merged, worldRank); err != nil {
			msg = err.Error()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w; %v", callErr, err)
	}
	first, err := firstMessage(s, msg)
	switch {
	case err != nil:
		return fmt.Errorf("%w; %v", callErr, err)
	case first != "":
		return Agreed{fmt.Errorf("%w; atomic mode broken: a weight or adapter changed although the step failed: %s", callErr, first)}
	}
	return Agreed{fmt.Errorf("%w; atomic: every generator weight still holds LoRA step %d's merge, every element checked", callErr, merged)}
}

// adapterSeed is the pattern seed of adapter tensor index at step.
func adapterSeed(index int, step uint64) uint64 { return uint64(index) + step<<32 }

// fillAdapters writes step's adapters into this rank's source parts.
func fillAdapters(ad *session.Model, ab *session.ModelBuffers, step uint64) error {
	return ad.EachPart(ab, model.Src, true, func(p session.ModelPart) error {
		return pattern.FillFloats(p.Tensor.Src, p.Rank, adapterSeed(p.Index, step), p.Bytes, p.Part.View)
	})
}

// String renders the report for people.
func (r *LoRAReport) String() string {
	return fmt.Sprintf("LoRA rank %d: %d adapter tensors, %s (%.3f%% of the model's %s)\n"+
		"full sync %s per step; LoRA step %s (adapters %s + merge %s): %.1f%% of the full sync's time, median of %d\ncheck: %s\n",
		r.Rank, r.Adapters, units.FormatBytes(r.AdapterBytes), 100*r.ByteRatio, units.FormatBytes(r.ModelBytes),
		units.FormatSeconds(r.FullSec), units.FormatSeconds(r.StepSec), units.FormatSeconds(r.MoveSec), units.FormatSeconds(r.MergeSec), 100*r.TimeRatio, r.Steps, r.Check)
}
