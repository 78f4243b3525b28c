package perf

import (
	"fmt"

	"github.com/m2n-dev/m2n/fp8"
	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/pattern"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/refit"
	"github.com/m2n-dev/m2n/reshard/program"
	"github.com/m2n-dev/m2n/transport"
)

// modelPart is one tensor of a model case: its layouts, with the
// generator's moved onto rank 0, and where its parts sit in the fused
// buffers.
type modelPart struct {
	t       *model.TensorLayout
	dst     placement.Layout
	src     model.Part
	dstPart model.Part
	scale   fp8.Mode // the generator holds it in FP8 with these scales (0: not)
}

// fp8StepGoal is the most an FP8 model step may take, as a fraction of the
// bf16 step of the same model on the same driver (issue 24's target: the
// FP8 step moves half the bytes, and pays an amax pass and the exchange).
const fp8StepGoal = 0.8

// model times every tensor of a scaled model, both sides on this rank:
// the trainer's (Megatron, TP 1) and the generator's (vLLM, TP 1) layouts
// and fused buffers, the generator's moved onto rank 0. With mode, the
// generator is vLLM's FP8 one (model.NewQuantized): the weights vLLM
// quantizes arrive in float8_e4m3fn with their scales, quantized in
// flight, checked bit for bit against quantizing each whole tensor.
func (b *replay) model(name string, mode fp8.Mode) ([]replayRow, error) {
	m, err := model.Load(name, model.LoadOptions{Scale: b.opt.Scale, Layers: b.opt.Layers})
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", name, err)
	}
	ls, err := model.NewQuantized(m, model.Trainer{TP: 1}, model.Generator{TP: 1}, mode)
	if err != nil {
		return nil, err
	}
	st := ls.Stages[0]
	bufs := [2]map[string]transport.Buffer{{}, {}}
	hosts := [2]map[string][]byte{{}, {}}
	var scaleBufs []transport.Buffer
	defer func() {
		for _, side := range bufs {
			for _, x := range side {
				b.mem.Free(x)
			}
		}
		for _, x := range scaleBufs {
			b.mem.Free(x)
		}
	}()
	for side, rank := range []int{0, 1} {
		for _, mb := range st.Buffers(model.Side(side), rank) {
			x, err := b.buf(mb.Bytes())
			if err != nil {
				return nil, err
			}
			bufs[side][mb.Name] = x
			hosts[side][mb.Name] = make([]byte, mb.Bytes())
		}
	}
	c := &benchCase{name: fmt.Sprintf("model %s", m.Name), iters: b.opt.BigIters}
	if mode != 0 {
		c.name += fmt.Sprintf(" fp8 %v", mode)
	}
	var parts []modelPart
	var written int64 // bytes the step writes: the destinations and scales
	scales := make([][]byte, len(st.Tensors))
	for i, t := range st.Tensors {
		dst, err := placement.NewLayout(t.Dst.Shape(), t.Dst.DType(), b.rank0, t.Dst.Placements())
		if err != nil {
			return nil, err
		}
		sp, _ := t.Part(model.Src, 0)
		dp, _ := t.Part(model.Dst, 1)
		parts = append(parts, modelPart{t: t, dst: dst, src: sp, dstPart: dp, scale: t.Scale})
		spec := refit.Spec{Name: t.Name, Src: t.Src, Dst: dst, Views: program.TensorViews{Src: sp.View, Dst: dp.View}, Scale: t.Scale}
		tb := refit.TensorBuffers{Src: bufs[0][sp.Buffer], Dst: bufs[1][dp.Buffer]}
		if t.Scale != 0 {
			n, err := spec.ScaleBytes(0)
			if err != nil {
				return nil, err
			}
			if tb.Scale, err = b.buf(n); err != nil {
				return nil, err
			}
			scaleBufs = append(scaleBufs, tb.Scale)
			scales[i] = make([]byte, n)
			written += n
		}
		c.specs = append(c.specs, spec)
		c.bufs = append(c.bufs, tb)
		c.bytes += t.Src.Bytes()
		written += dst.Bytes()
	}
	// tensors that share a fused buffer fill and check disjoint bytes of
	// it, so they run concurrently. The values are finite floats (FP8
	// refuses NaNs and infinities).
	if err := parallel(len(parts), func(i int) error {
		p := parts[i]
		return pattern.FillFloats(p.t.Src, 0, uint64(i), hosts[0][p.src.Buffer], p.src.View)
	}); err != nil {
		return nil, err
	}
	for name, h := range hosts[0] {
		if err := b.mem.Upload(bufs[0][name], h); err != nil {
			return nil, err
		}
	}
	c.poison = func() error {
		for name, h := range hosts[1] {
			for i := range h {
				h[i] = pattern.Poison
			}
			if err := b.mem.Upload(bufs[1][name], h); err != nil {
				return err
			}
		}
		return nil
	}
	c.check = func() error { return b.checkModel(parts, c.bufs, bufs[1], hosts[1], scales) }
	b.trafficBound(c, written, mode != 0)
	c.goal = func(d refit.DriverKind, sec float64) (string, string) {
		bf, ok := b.bf16[m.Name+"|"+string(d)]
		if mode == 0 || !ok {
			return "", ""
		}
		return fmt.Sprintf("<= 0.8x bf16 (%s)", fmtSec(fp8StepGoal*bf)), yesNo(sec <= fp8StepGoal*bf)
	}
	rows, err := b.timeCalls(c)
	if mode == 0 && err == nil {
		if b.bf16 == nil {
			b.bf16 = map[string]float64{}
		}
		for _, r := range rows {
			b.bf16[m.Name+"|"+r.Driver] = r.Sec
		}
	}
	for i := range rows {
		rows[i].Case = fmt.Sprintf("%s (%d tensors, %s)", c.name, len(c.specs), "scale 1/"+fmt.Sprint(b.opt.Scale))
	}
	return rows, err
}

// checkModel reads the generator's buffers and scale tensors of a model
// case back and checks every tensor's part: bit for bit against
// quantizing the whole tensor where it converts to FP8, else against the
// source pattern.
func (b *replay) checkModel(parts []modelPart, tbs []refit.TensorBuffers, dst map[string]transport.Buffer, hosts map[string][]byte, scales [][]byte) error {
	for name, h := range hosts {
		if err := b.mem.Download(h, dst[name]); err != nil {
			return err
		}
	}
	for i, s := range scales {
		if s != nil {
			if err := b.mem.Download(s, tbs[i].Scale); err != nil {
				return err
			}
		}
	}
	return parallel(len(parts), func(i int) error {
		p := parts[i]
		got := hosts[p.dstPart.Buffer]
		var err error
		if p.scale != 0 {
			err = pattern.CheckFP8(p.t.Src.DType(), p.dst, p.scale, 0, uint64(i), got, p.dstPart.View, scales[i])
		} else {
			err = pattern.CheckFloats(p.dst, 0, uint64(i), got, p.dstPart.View)
		}
		if err != nil {
			return fmt.Errorf("tensor %s: %w", p.t.Name, err)
		}
		return nil
	})
}

// trafficBound sets model case c's bound: its bytes read once (c.bytes)
// and written once (written) at the copy's rate, a copy reading and
// writing each byte; an FP8 generator writes half the bytes of its
// quantized weights, so its bound is below the bf16 step's.
func (b *replay) trafficBound(c *benchCase, written int64, fp8 bool) {
	c.boundAt = float64(c.bytes+written) / (2 * b.copyBW)
	what := "bytes"
	if fp8 {
		what = "traffic"
	}
	c.bound = fmt.Sprintf("%s at %.0f GB/s %s", what, b.copyBW/1e9, fmtSec(c.boundAt))
}
