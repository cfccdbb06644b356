package gpt_test

import (
	"math"
	"slices"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// A streamed backward hands over every element of the gradient exactly once, layer by layer
// from the last and then the rest, each view already holding its final value; and the pass's
// gradient is the bits of a pass that streams nothing. Checked for a step's only micro-batch
// (Backward, straight into Grads) and for the last of two (BackwardAccumulate, through the
// scratch). The ready function here adds 1 to each view it gets: an element handed over twice
// ends +2, one never handed over +0, and one handed over before its last write has that write
// applied on top of the +1.
func TestStreamGradsHandsOverEachElementOnceWhenFinal(t *testing.T) {
	const B, T = 2, 16
	cfg := parallelConfig
	cfg.NumLayers = 3
	for _, micros := range []int{1, 2} {
		be := cpu.New(2)
		defer be.Close()
		var models [2]*gpt.Model
		for i := range models {
			m, err := gpt.NewParallel(be, cfg, B, T, gpt.Precision{}, gpt.Parallel{SeparateAccum: true})
			if err != nil {
				t.Fatal(err)
			}
			m.InitGPT2(5)
			models[i] = m
		}
		type handed struct {
			view backend.Buf
			at   []float32 // the values when handed over, before the +1
		}
		var got []handed
		ready := func(views []backend.Buf) {
			for _, v := range views {
				h := make([]float32, v.Len())
				be.Download(h, v)
				got = append(got, handed{v, append([]float32(nil), h...)})
				for i := range h {
					h[i]++
				}
				be.Upload(v, h)
			}
		}
		var calls []int // views per ready call
		for i, m := range models {
			m.ZeroGrad()
			for k := range micros {
				in, tg := microBatch(k, B, T, cfg.VocabSize)
				if _, err := m.Forward(in, tg, B, T); err != nil {
					t.Fatal(err)
				}
				if i == 1 && k == micros-1 {
					m.StreamGrads(func(views []backend.Buf) { ready(views); calls = append(calls, len(views)) })
				}
				var err error
				if k == 0 {
					err = m.Backward(0.5)
				} else {
					err = m.BackwardAccumulate(0.5)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		// 3 layers of the 12 per-layer tensors, then wte, wpe, lnfw, lnfb.
		if want := []int{12, 12, 12, 4}; !slices.Equal(calls, want) {
			t.Fatalf("micro-batches %d: ready got %v views per call, want %v", micros, calls, want)
		}
		n := models[0].Grads.Len()
		plain, streamed := make([]float32, n), make([]float32, n)
		be.Download(plain, models[0].Grads)
		be.Download(streamed, models[1].Grads)
		for i := range plain {
			if want := plain[i] + 1; math.Float32bits(streamed[i]) != math.Float32bits(want) {
				t.Fatalf("micro-batches %d: gradient element %d is %v, want the plain pass's %v + 1", micros, i, streamed[i], plain[i])
			}
		}
		for _, h := range got {
			now := make([]float32, h.view.Len())
			be.Download(now, h.view)
			for i := range now {
				if now[i] != h.at[i]+1 {
					t.Fatalf("micro-batches %d: a view changed after it was handed over (%v then %v)", micros, h.at[i], now[i]-1)
				}
			}
		}
		// The next pass streams nothing.
		calls = nil
		in, tg := microBatch(7, B, T, cfg.VocabSize)
		if _, err := models[1].Forward(in, tg, B, T); err != nil {
			t.Fatal(err)
		}
		if err := models[1].Backward(1); err != nil || calls != nil {
			t.Fatalf("a later pass: err %v, ready called %d times", err, len(calls))
		}
	}
}

// A backward pass that returns without reporting its layers (BERT's, when a batch has no masked
// position) has RunBackward hand them over itself, in the order a full pass does: from the last
// layer down, then the rest. Ranks must issue their collectives in the same order (NCCL sums
// the n-th call of each rank together), and a rank whose last micro-batch happened to skip
// would otherwise pair its layer 0 with the others' last layer.
func TestStreamGradsOrderWhenBackwardSkipsLayers(t *testing.T) {
	const B, T = 2, 16
	cfg := parallelConfig
	cfg.NumLayers = 3
	be := cpu.New(1)
	defer be.Close()
	m, err := gpt.NewParallel(be, cfg, B, T, gpt.Precision{}, gpt.Parallel{SeparateAccum: true})
	if err != nil {
		t.Fatal(err)
	}
	m.InitGPT2(5)
	order := func(backward func() error) []backend.Buf {
		var firsts []backend.Buf
		m.StreamGrads(func(views []backend.Buf) { firsts = append(firsts, views[0]) })
		if err := backward(); err != nil {
			t.Fatal(err)
		}
		return firsts
	}
	in, tg := microBatch(0, B, T, cfg.VocabSize)
	if _, err := m.Forward(in, tg, B, T); err != nil {
		t.Fatal(err)
	}
	full := order(func() error { return m.Backward(1) })
	skipped := order(func() error { return m.RunBackward(false, func() error { return nil }) })
	if len(full) != cfg.NumLayers+1 || !slices.Equal(full, skipped) {
		t.Fatalf("a pass that reports no layer hands over %d pieces in another order than a full pass's %d", len(skipped), len(full))
	}
}
