// Package pattern fills tensors with a pattern of their global element
// index and checks it, so that a refit can be verified element by
// element: the sources fill their parts, the destinations start poisoned,
// and after a step every destination element must hold its own global
// index's bytes. A byte that lands in the wrong place, in the wrong tensor
// or not at all is caught and named (a *MismatchError gives the tensor,
// the rank, the element's global index and both values).
//
// Every function takes a part the way the runtime sees it: the tensor's
// layout, a rank of the layout's communicator, the tensor's seed (its
// index in the call or the model: tensors with different seeds hold
// different bytes), the host bytes of the buffer that holds the part, and
// the view that places the part in them (the zero View: the buffer is
// exactly the part; fused weights sit in larger buffers through views).
// For one tensor:
//
//	w := make([]byte, spec.Src.LocalBytes(rank))
//	err := pattern.Fill(spec.Src, rank, 0, w, placement.View{}) // a source's weights
//	// ... the step ...
//	err = pattern.Check(spec.Dst, rank, 0, got, placement.View{}) // nil, or the first wrong element
//
// For a whole model, session.Model.FillParts and ReadParts hand every part
// of a rank's (possibly fused) buffers to Fill or Check, with the part's
// stage-local rank, seed and view, on CPUs and on GPUs (through host
// copies):
//
//	err := m.FillParts(bufs, model.Src, pattern.Fill)
//	err = m.ReadParts(bufs, model.Dst, pattern.Check)
//
// Byte's pattern takes every bit pattern, NaNs and infinities included;
// FillFloats and CheckFloats use finite values spread over many binades
// instead, for sources that convert to FP8, and CheckFP8 checks an FP8
// destination and its scales against quantizing the whole tensor at once.
// Change and CheckChanged model training updates for a delta sync: each
// update changes a given fraction of a tensor's elements, drawn from the
// global index alone, so that sources change their parts and
// destinations check theirs without exchanging anything.
// The package is pure.
package pattern
