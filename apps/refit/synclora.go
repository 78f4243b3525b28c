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

// loraLayouts lays out the LoRA adapters of l's model on l's trainer and
// generator (model.NewAdapters); an error for flags that --lora does not
// combine with.
func (f *syncFlags) loraLayouts(l *model.Layouts) (*model.Layouts, error) {
	bad := func(err error) error { return flagError("lora", fmt.Sprint(f.lora.rank), err) }
	for flag, on := range map[string]bool{"delta": f.run.delta, "compare": f.compare, "baseline": f.baseline} {
		if on {
			return nil, bad(fmt.Errorf("--lora does not combine with --%s", flag))
		}
	}
	ad, err := model.NewAdapters(l, model.LoRA{Rank: f.lora.rank, Alpha: f.lora.alpha, Targets: model.ParseLoRATargets(f.lora.targets)})
	if err != nil {
		return nil, bad(err)
	}
	return ad, nil
}

// syncLoRA is sync with --lora: the model's full syncs, then the LoRA
// steps on the adapters of in's model (perf.LoRASync).
func (j *job) syncLoRA(out io.Writer, in syncInput, m *session.Model, wb *session.ModelBuffers, f *syncFlags) error {
	am, _, err := j.prepareModel(syncInput{layouts: in.adapters, route: in.route, buckets: in.buckets})
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
