package gpt_test

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

func TestForwardTrainMatchesForward(t *testing.T) {
	be := cpu.New(2)
	defer be.Close()
	testForwardTrain(t, be)
}

// testForwardTrain: ForwardTrain (the classifier's backward fused into the forward) gives the
// loss and, after Backward and BackwardAccumulate, the gradients of Forward then Backward, bit
// for bit, in fp32 and each 16-bit plan the backend has; a Backward with another loss scale is
// refused.
func testForwardTrain(t *testing.T, be backend.Backend) {
	cfg := gpt.Config{BlockSize: 16, VocabSize: 61, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 32}
	const B, T = 3, 16
	batch := func(seed int) (in, tg []int32) {
		in, tg = make([]int32, B*T), make([]int32, B*T)
		for i := range in {
			in[i], tg[i] = int32((i*7+seed)%cfg.VocabSize), int32((i*11+3*seed)%cfg.VocabSize)
		}
		return in, tg
	}
	in1, tg1 := batch(1)
	in2, tg2 := batch(2)
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		if be.CheckDType(dt) != nil {
			continue
		}
		run := func(fused bool) (losses []float32, grads []float32) {
			m, err := gpt.NewParallel(be, cfg, B, T, gpt.Precision{Compute: dt}, gpt.Parallel{SeparateAccum: true})
			if err != nil {
				t.Fatal(err)
			}
			m.InitGPT2(5)
			m.ZeroGrad()
			for i, b := range [][2][]int32{{in1, tg1}, {in2, tg2}} {
				const scale = 0.5
				var loss float32
				if fused {
					loss, err = m.ForwardTrain(b[0], b[1], B, T, scale)
				} else {
					loss, err = m.Forward(b[0], b[1], B, T)
				}
				if err != nil {
					t.Fatal(err)
				}
				losses = append(losses, loss)
				if i == 0 {
					err = m.Backward(scale)
				} else {
					err = m.BackwardAccumulate(scale)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			return losses, download(be, m.Grads)
		}
		l1, g1 := run(false)
		l2, g2 := run(true)
		for i := range l1 {
			if math.Float32bits(l1[i]) != math.Float32bits(l2[i]) {
				t.Errorf("%v: loss %d: ForwardTrain %v, Forward %v", dt, i, l2[i], l1[i])
			}
		}
		for i := range g1 {
			if math.Float32bits(g1[i]) != math.Float32bits(g2[i]) {
				t.Fatalf("%v: gradient %d: after ForwardTrain %v, after Forward %v", dt, i, g2[i], g1[i])
			}
		}
	}
	m, err := gpt.New(be, cfg, B, T)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ForwardTrain(in1, tg1, B, T, 0.5); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err == nil {
		t.Error("Backward(1) after ForwardTrain(0.5) was accepted")
	}
	if _, err := m.ForwardTrain(in1, nil, B, T, 1); err == nil {
		t.Error("ForwardTrain without targets was accepted")
	}
}
