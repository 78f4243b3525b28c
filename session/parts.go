package session

import (
	"fmt"

	"github.com/m2n-dev/m2n/model"
	"github.com/m2n-dev/m2n/placement"
	"github.com/m2n-dev/m2n/transport"
)

// PartFunc is called for one tensor part this rank holds: l is the
// tensor's layout on the side (over its layout shape, with the ranks of
// the tensor's stage communicator), rank this rank in that communicator,
// seed the tensor's index in the model, buf the host bytes of the whole
// buffer that holds the part (a fused buffer holds several tensors'
// parts) and v where the part lies in buf. pattern.Fill and pattern.Check
// are PartFuncs.
type PartFunc func(l placement.Layout, rank int, seed uint64, buf []byte, v placement.View) error

// FillParts calls fn for every tensor part this rank holds on side, stage
// by stage and tensor by tensor, to write it: on CPUs buf is the buffer
// itself; on GPUs a host copy of it, downloaded before the stage's first
// part and uploaded after its last. An error names the stage and the
// tensor.
func (m *Model) FillParts(b *ModelBuffers, side model.Side, fn PartFunc) error {
	return m.parts(b, side, fn, true)
}

// ReadParts is FillParts for reading: nothing is written back.
func (m *Model) ReadParts(b *ModelBuffers, side model.Side, fn PartFunc) error {
	return m.parts(b, side, fn, false)
}

func (m *Model) parts(b *ModelBuffers, side model.Side, fn PartFunc, write bool) error {
	for si, ss := range m.Pipeline.Sessions {
		if ss == nil {
			continue
		}
		bufs := b.Src[si]
		if side == model.Dst {
			bufs = b.Dst[si]
		}
		host := map[string][]byte{}
		for i, t := range m.Layouts.Stages[si].Tensors {
			p, ok := t.Part(side, ss.Rank())
			if !ok {
				continue
			}
			h, ok := host[p.Buffer]
			if !ok {
				x := bufs[p.Buffer]
				if hb, isHost := x.(transport.HostBuffer); isHost {
					h = hb
				} else {
					h = make([]byte, x.Len())
					if err := ss.Memory().Download(h, x); err != nil {
						return fmt.Errorf("stage %d: buffer %s: %w", si, p.Buffer, err)
					}
				}
				host[p.Buffer] = h
			}
			if err := fn(t.Layout(side), ss.Rank(), uint64(m.Index[si][i]), h, p.View); err != nil {
				return fmt.Errorf("stage %d, tensor %s: %w", si, t.Name, err)
			}
		}
		if !write {
			continue
		}
		for name, h := range host {
			if _, isHost := bufs[name].(transport.HostBuffer); !isHost {
				if err := ss.Memory().Upload(bufs[name], h); err != nil {
					return fmt.Errorf("stage %d: buffer %s: %w", si, name, err)
				}
			}
		}
	}
	return nil
}
