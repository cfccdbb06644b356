package gpt_test

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// The trainer does not update through Model.Update (one AdamW per tensor, each told whether it
// decays) but through UpdateWithStats, i.e. SetUpdateStep + QueueUpdate: one AdamWAll over the
// flat buffers, with segments built from the specs and the clip factor read from GradStats'
// buffer on the backend. TestTenAdamWStepsMatchPyTorch covers only the first, so this runs the
// same PyTorch fixture (10 steps, clipping on some) through the second. Decaying every segment
// (biases and LayerNorm too), or a wrong clip factor, moves the final tensors far beyond
// trainedTol.
func TestTenFusedAdamWStepsMatchPyTorch(t *testing.T) {
	r := loadReference(t)
	be := cpu.New(0)
	model, err := gpt.New(be, r.cfg, r.B, r.T)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.SetParams(r.params); err != nil {
		t.Fatal(err)
	}
	opt := gpt.AdamWConfig{Beta1: r.meta(t, "beta1"), Beta2: r.meta(t, "beta2"), Eps: r.meta(t, "eps"), WeightDecay: r.meta(t, "weight_decay")}
	lr, maxNorm := r.meta(t, "lr"), r.meta(t, "max_norm")
	wantLoss, wantNorm := r.floats(t, "train_losses"), r.floats(t, "train_grad_norms")
	clipped := 0
	host := make([]float32, backend.StepStatsLen)
	for i := range wantLoss {
		inputs, targets := r.batch(i)
		model.ZeroGrad()
		loss, err := model.Forward(inputs, targets, r.B, r.T)
		if err != nil {
			t.Fatal(err)
		}
		if err := model.Backward(1); err != nil {
			t.Fatal(err)
		}
		stats := model.GradStats(maxNorm, 1)
		model.UpdateWithStats(opt, lr, i+1, stats)
		be.Download(host, stats)
		st := backend.DecodeStepStats(host)
		if !close(float64(loss), float64(wantLoss[i]), 1e-4) {
			t.Errorf("step %d: loss %.7f, want %.7f", i, loss, wantLoss[i])
		}
		if !close(st.Norm, float64(wantNorm[i]), 1e-4) {
			t.Errorf("step %d: grad norm %.7f, want %.7f", i, st.Norm, wantNorm[i])
		}
		if st.Scale < 1 {
			clipped++
		}
	}
	if clipped == 0 || clipped == len(wantLoss) {
		t.Errorf("clipping triggered on %d of %d steps; the fixture should exercise both cases", clipped, len(wantLoss))
	}
	compareTrained(t, r, be, model)
}

// With zero gradients AdamW's moments stay 0 and a step is weight decay alone: the 2-D weight
// matrices (wte, wpe, qkvw, attprojw, fcw, fcprojw) shrink by lr*wd*w, and the biases and
// LayerNorm weights must not change at all. Checked on the trainer's path (UpdateWithStats) and
// on Model.Update, which must agree bit for bit.
func TestFusedUpdateDecaysOnlyWeightMatrices(t *testing.T) {
	cfg := gpt.Config{BlockSize: 16, VocabSize: 60, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 16}
	decays := map[string]bool{"wte": true, "wpe": true, "qkvw": true, "attprojw": true, "fcw": true, "fcprojw": true}
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.5}
	const lr = 0.1
	run := func(fused bool) (before, after []float32, m *gpt.Model) {
		be := cpu.New(1)
		model, err := gpt.New(be, cfg, 1, cfg.BlockSize)
		if err != nil {
			t.Fatal(err)
		}
		// Random values everywhere, biases and LayerNorm included, so that a decay shows.
		host := make([]float32, cfg.NumParams())
		for i := range host {
			host[i] = float32(math.Sin(float64(i)*0.37)) + 0.5
		}
		if err := model.SetParams(host); err != nil {
			t.Fatal(err)
		}
		model.ZeroGrad()
		if fused {
			model.UpdateWithStats(opt, lr, 1, model.GradStats(1, 1))
		} else {
			model.Update(opt, lr, 1, 1)
		}
		return host, download(be, model.Params), model
	}
	before, fused, model := run(true)
	_, perTensor, _ := run(false)
	for i, s := range model.Specs() {
		if s.Decay != decays[s.Name] {
			t.Errorf("%s: Decay %v, want %v (only 2-D weight matrices decay)", s.Name, s.Decay, decays[s.Name])
		}
		off := model.Offsets()[i]
		bad := 0
		for j := off; j < off+s.Size(); j++ {
			w := float64(before[j])
			want := w
			if decays[s.Name] {
				want = w - lr*opt.WeightDecay*w
			}
			nearDecay := math.Abs(float64(fused[j])-want) <= 1e-6*math.Abs(w)+1e-7
			samePath := math.Float32bits(fused[j]) == math.Float32bits(perTensor[j])
			if !nearDecay || !samePath {
				if bad < 3 {
					t.Errorf("%s[%d]: %g -> fused update %g, Model.Update %g, want %g", s.Name, j-off, w, fused[j], perTensor[j], want)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d elements wrong", s.Name, bad, s.Size())
		}
	}
}
