package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/perf"
	"github.com/m2n-dev/m2n/session"
	"github.com/spf13/pflag"
)

// loraFlags are sync's --lora flags.
type loraFlags struct {
	rank    int64
	alpha   float64
	targets string
}

func (f *loraFlags) register(fs *pflag.FlagSet) {
	fs.Int64Var(&f.rank, "lora", 0, "LoRA mode: after full syncs of the model, move only adapters of this rank on the target projections and merge them into the generator's weights every step, and report both")
	fs.Float64Var(&f.alpha, "lora-alpha", 0, "with --lora: the merge scales B @ A by alpha / rank (default: alpha = rank)")
	fs.StringVar(&f.targets, "lora-targets", "", "with --lora: comma-separated projections that carry adapters (default: "+strings.Join(model.DefaultLoRATargets, ",")+")")
}

// options returns the adapters' options; an error for flags that
// --lora does not combine with.
func (f *syncFlags) loraOptions() (model.LoRA, error) {
	o := model.LoRA{Rank: f.lora.rank, Alpha: f.lora.alpha}
	if f.lora.targets != "" {
		o.Targets = strings.Split(f.lora.targets, ",")
	}
	for flag, on := range map[string]bool{"delta": f.run.delta, "compare": f.compare, "baseline": f.baseline} {
		if on {
			return o, flagError("lora", fmt.Sprint(f.lora.rank), fmt.Errorf("--lora does not combine with --%s", flag))
		}
	}
	return o, nil
}

// syncLoRA is sync with --lora: the model's full syncs, then the LoRA
// steps on the adapters of in's model (perf.LoRASync).
func (j *job) syncLoRA(out io.Writer, in syncInput, m *session.Model, wb *session.ModelBuffers, f *syncFlags) error {
	o, err := f.loraOptions()
	var al *model.Layouts
	if err == nil {
		var ad *model.Model
		if ad, err = model.Adapters(in.layouts.Model, o); err == nil {
			al, err = model.New(ad, in.layouts.Trainer, in.layouts.Generator)
		}
	}
	if err := j.Ready(err); err != nil {
		return err
	}
	am, _, err := j.prepareModel(syncInput{layouts: al, route: in.route, buckets: in.buckets})
	if err != nil {
		return err
	}
	defer am.Close()
	ab, err := am.Alloc()
	if err != nil {
		return err
	}
	defer am.Free(ab)
	rep, err := perf.LoRASync(j.Session, m, wb, am, ab, perf.SyncConfig{Warmup: f.run.warmup, Iters: f.run.iters, Check: f.run.check,
		WorldRank: j.Rank, Log: j.Log})
	if err != nil {
		return err
	}
	if j.Rank == 0 {
		if err := printJSONOr(out, f.run.asJSON, rep, func() error { _, err := io.WriteString(out, rep.String()); return err }); err != nil {
			return err
		}
	}
	if strings.HasPrefix(rep.Check, "FAILED") {
		return jobError{fmt.Errorf("check failed: %s", strings.TrimPrefix(rep.Check, "FAILED: "))}
	}
	return nil
}
