package gpt

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// Streaming the gradient out of a backward pass, so that data-parallel training can start
// summing a layer's gradient over the ranks while backward works on the layers below it.
//
// Backward visits the layers from the last to the first, and layer l's parameters get gradient
// from layer l's backward alone, so once it returns, the l-th slice of every per-layer tensor
// (ParamSpec.PerLayer) is final. The other tensors (the embeddings, the final LayerNorms, a
// head) are final only at the end: wte, tied to the LM head, gets gradient first and last.

// GradReady receives views of Grads whose values are final for the backward pass under way
// (StreamGrads). It runs on the backward's goroutine, between ops; it must not write Grads and
// should return quickly (queue the work).
type GradReady func(views []backend.Buf)

type gradStream struct {
	ready   GradReady
	scratch bool   // this pass computes into GradScratch and adds it to Grads (Accumulate)
	done    []bool // layers handed over
}

// StreamGrads makes the next backward pass (a model's Backward or BackwardAccumulate) hand the
// gradient to ready piece by piece, as soon as each piece is final: right after layer l's
// backward, the l-th slices of every per-layer tensor (in BackwardAccumulate, once they have
// been added to Grads), layer by layer from the last; at the end, the other tensors. Every
// element of Grads is in exactly one view. The pass's bits are those of a pass without
// StreamGrads, and the passes after it stream nothing unless StreamGrads is called again.
func (t *Trainable) StreamGrads(ready GradReady) {
	if t.layerGrads == nil {
		t.layerGrads, t.restGrads = t.layerViews(t.Grads)
		if t.gradScratch != nil {
			t.layerScratch, t.restScratch = t.layerViews(t.gradScratch)
		}
	}
	t.stream = &gradStream{ready: ready, done: make([]bool, len(t.layerGrads))}
}

// layerViews splits a buffer laid out like the parameters into, for each layer, the views of its
// slices of the per-layer tensors, and the views of the other tensors.
func (t *Trainable) layerViews(flat backend.Buf) (layers [][]backend.Buf, rest []backend.Buf) {
	for i, s := range t.specs {
		if !s.PerLayer {
			rest = append(rest, t.be.View(flat, t.offsets[i], s.Size()))
			continue
		}
		L := s.Shape[0]
		if layers == nil {
			layers = make([][]backend.Buf, L)
		} else if len(layers) != L {
			panic(fmt.Sprintf("gpt: per-layer tensor %s has %d layers, another %d", s.Name, L, len(layers)))
		}
		per := s.Size() / L
		for l := range L {
			layers[l] = append(layers[l], t.be.View(flat, t.offsets[i]+l*per, per))
		}
	}
	return layers, rest
}

// LayerGradsDone tells the gradient stream, if there is one, that layer l's backward has
// finished: a model's backward calls it after each layer.
func (t *Trainable) LayerGradsDone(l int) {
	s := t.stream
	if s == nil || s.done[l] {
		return
	}
	s.done[l] = true
	if s.scratch {
		t.addScratch(t.layerGrads[l], t.layerScratch[l])
	}
	s.ready(t.layerGrads[l])
}

// addScratch adds the scratch views to the gradient views, element by element (acc = acc + g).
func (t *Trainable) addScratch(grads, scratch []backend.Buf) {
	defer backend.Scope(t.be, "grad_accumulate")()
	for i, g := range grads {
		t.be.ResidualForward(g, g, scratch[i], g.Len())
	}
}

// RunBackward runs backward, a model's backward pass: into Grads, or with scratch into zeroed
// GradScratch, which is then added to Grads (Accumulate). It finishes the gradient stream: the
// layers backward did not report (a pass with nothing to learn from may skip them), from the
// last down as a full pass reports them, and then the other tensors.
func (t *Trainable) RunBackward(scratch bool, backward func() error) error {
	if t.frozen {
		return fmt.Errorf("backward: the model was built for inference only (no gradients); build it with New to train")
	}
	if scratch {
		if t.gradScratch == nil {
			return fmt.Errorf("backward: the model was made without Parallel.SeparateAccum")
		}
		t.be.Zero(t.gradScratch)
	}
	s := t.stream
	if s != nil {
		s.scratch = scratch
	}
	err := backward()
	if err != nil || s == nil {
		t.stream = nil
		if err == nil && scratch {
			t.addScratch([]backend.Buf{t.Grads}, []backend.Buf{t.gradScratch})
		}
		return err
	}
	for l := len(s.done) - 1; l >= 0; l-- { // a full pass's order: ranks must hand over alike
		t.LayerGradsDone(l)
	}
	t.stream = nil
	if scratch {
		t.addScratch(t.restGrads, t.restScratch)
	}
	s.ready(t.restGrads)
	return nil
}
