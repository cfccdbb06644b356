package bert_test

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/gputest"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// mixedPlans are the 16-bit storage plans: bf16 and fp16 compute with fp32 or 16-bit gradients,
// and stochastic rounding of the compute copy.
var mixedPlans = []gpt.Precision{
	{Compute: backend.BF16}, {Compute: backend.F16}, {Compute: backend.BF16, Grads: backend.BF16},
	{Compute: backend.F16, Grads: backend.F16, StochasticRounding: true},
}

// countingDT counts the bytes a model allocates, each format at its native size.
type countingDT struct {
	counting
}

func (c *countingDT) AllocDType(n int, dt backend.DType) backend.Buf {
	c.bytes += int64(dt.Bytes()) * int64(n)
	return c.Backend.AllocDType(n, dt)
}

// The plan of every precision is what NewWithPrecision allocates, at the formats' native sizes,
// and a 16-bit plan is smaller than fp32's.
func TestPrecisionMemoryPlanMatchesAllocations(t *testing.T) {
	for _, cfg := range []bert.Config{
		{BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 16},
		{BlockSize: 32, VocabSize: 67, PaddedVocabSize: 80, NumLayers: 3, NumHeads: 3, Channels: 24, TypeVocabSize: 2, PreLN: true},
	} {
		fp32 := gpt.PlanBytes(cfg.MemoryPlan(3, 11))
		for _, prec := range append([]gpt.Precision{{}}, mixedPlans...) {
			be := &countingDT{counting{Backend: cpu.New(1)}}
			if _, err := bert.NewWithPrecision(be, cfg, 3, 11, prec); err != nil {
				t.Fatal(err)
			}
			got := gpt.PlanBytes(cfg.PrecisionMemoryPlan(3, 11, prec))
			if got != be.bytes {
				t.Errorf("%+v %v: plan says %d bytes, NewWithPrecision allocated %d", cfg, prec, got, be.bytes)
			}
			if prec.Mixed() && got >= fp32 {
				t.Errorf("%+v %v: plans %d bytes, not fewer than fp32's %d", cfg, prec, got, fp32)
			}
			be = &countingDT{counting{Backend: cpu.New(1)}}
			if _, err := bert.NewMasked(be, cfg, 3, 11, 5, prec, gpt.Parallel{}); err != nil {
				t.Fatal(err)
			}
			masked := gpt.PlanBytes(cfg.MaskedMemoryPlan(3, 11, 5, prec, gpt.Parallel{}))
			if masked != be.bytes {
				t.Errorf("%+v %v: masked plan says %d bytes, NewMasked allocated %d", cfg, prec, masked, be.bytes)
			}
			if masked >= got {
				t.Errorf("%+v %v: a head of 5 rows plans %d bytes, not fewer than 33 rows' %d", cfg, prec, masked, got)
			}
		}
	}
}

// bert-base at B=32, T=512 (pre-training's shape): bf16 plans at most 60% of fp32's bytes, as
// issue 13 asks of GPT-2 124M.
func TestBF16PlanSizeBertBase(t *testing.T) {
	cfg, err := bert.Preset("bert-base")
	if err != nil {
		t.Fatal(err)
	}
	fp32 := gpt.PlanBytes(cfg.MemoryPlan(32, 512))
	// The trainer's model (NewMasked) holds the logits of the 15% masked positions only.
	mk, err := bert.NewMasker(tokenizer.Specials{PAD: 0, CLS: 1, SEP: 2, MASK: 3}, cfg.VocabSize, 1)
	if err != nil {
		t.Fatal(err)
	}
	masked := gpt.PlanBytes(cfg.MaskedMemoryPlan(32, 512, mk.MaxMasked(32, 512), gpt.Precision{}, gpt.Parallel{}))
	t.Logf("fp32: %.2f GiB, %.2f GiB with the head on the %d masked rows", float64(fp32)/(1<<30), float64(masked)/(1<<30), mk.MaxMasked(32, 512))
	for _, prec := range mixedPlans {
		got := gpt.PlanBytes(cfg.PrecisionMemoryPlan(32, 512, prec))
		ratio := float64(got) / float64(fp32)
		t.Logf("%v: %.2f GiB = %.1f%% of fp32's %.2f GiB", prec, float64(got)/(1<<30), 100*ratio, float64(fp32)/(1<<30))
		if ratio > 0.60 {
			t.Errorf("%v plans %.1f%% of fp32's bytes; want <= 60%%", prec, 100*ratio)
		}
	}
}

// A 16-bit model against the PyTorch fp32 fixture: the same model, with each activation and the
// compute copy of the weights rounded to bf16 (8 significant bits) or fp16 (11). Its loss and
// every gradient stay within a few roundings' error of fp32 (bounds: about 3x what was measured,
// far below the O(1) error of a missing term or a stale weight copy), yet differ from the fp32
// model's bits, so the 16-bit path really ran; the compute copy is the master rounded, before
// and after AdamW updates, which track the fixture's losses.
func TestMixedPrecisionMatchesPyTorch(t *testing.T) {
	be := cpu.New(0)
	defer be.Close()
	testMixedPrecision(t, be)
}

// testMixedPrecision runs TestMixedPrecisionMatchesPyTorch's checks on backend be.
func testMixedPrecision(t *testing.T, be backend.Backend) {
	for _, name := range variants {
		r := loadReference(t, name)
		fp32 := r.newModel(t, be)
		fp32Loss, err := fp32.ForwardBatch(r.batch(t, 0))
		if err != nil {
			t.Fatal(err)
		}
		for _, prec := range mixedPlans {
			t.Run(name+"/"+prec.String(), func(t *testing.T) {
				// Relative bounds, 3-5x the largest measured over both fixtures and all plans (bf16:
				// loss 3.8e-5, gradients 0.012, ten steps' losses 5.2e-4; fp16: 4.1e-6, 0.0041,
				// 1.2e-4).
				lossTol, gradTol, trainTol := 2e-4, 0.035, 2e-3
				if prec.Compute == backend.F16 {
					lossTol, gradTol, trainTol = 2.5e-5, 0.015, 5e-4
				}
				m, err := bert.NewWithPrecision(be, r.cfg, r.B, r.T, prec)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.SetParams(r.params(t)); err != nil {
					t.Fatal(err)
				}
				checkComputeCopy(t, be, m, prec, false)
				loss, err := m.ForwardBatch(r.batch(t, 0))
				if err != nil {
					t.Fatal(err)
				}
				want := r.floats(t, "loss")[0]
				rel := math.Abs(float64(loss-want)) / float64(want)
				t.Logf("loss %.6f vs PyTorch fp32 %.6f: relative %.2g", loss, want, rel)
				if rel > lossTol {
					t.Errorf("loss %.6f vs PyTorch fp32 %.6f: relative %.2g > %g", loss, want, rel, lossTol)
				}
				if loss == fp32Loss {
					t.Errorf("loss %v is fp32's to the bit: nothing was rounded to %v", loss, prec.Compute)
				}
				m.ZeroGrad()
				if err := m.Backward(1); err != nil {
					t.Fatal(err)
				}
				grads, worst := download(be, m.Grads), 0.0
				for i, s := range m.Specs() {
					off := m.Offsets()[i]
					got := grads[off : off+s.Size()]
					if prec.Grads != backend.F32 {
						for j, g := range got {
							if prec.Grads.Round(g) != g {
								t.Fatalf("grad.%s[%d] = %g is not a %v value", s.Name, j, g, prec.Grads)
							}
						}
					}
					ref := r.floats(t, "grad."+s.Name)
					if s.Name == "qkvb" { // the key bias's exact gradient is 0: only rounding noise
						got, ref = withoutKeyBias(got, r.cfg.NumLayers, r.cfg.Channels), withoutKeyBias(ref, r.cfg.NumLayers, r.cfg.Channels)
					}
					e := gputest.RelL2(got, ref)
					worst = max(worst, e)
					if e > gradTol {
						t.Errorf("grad.%s: relative L2 error %.3g vs PyTorch fp32 > %g", s.Name, e, gradTol)
					}
				}
				t.Logf("largest relative L2 gradient error %.3g", worst)

				// Ten clipped AdamW steps: the compute copy follows the master; the losses follow
				// PyTorch's fp32 run.
				opt := gpt.AdamWConfig{Beta1: r.meta(t, "beta1"), Beta2: r.meta(t, "beta2"), Eps: r.meta(t, "eps"), WeightDecay: r.meta(t, "weight_decay")}
				lr, maxNorm := r.meta(t, "lr"), r.meta(t, "max_norm")
				wantLoss := r.floats(t, "train_losses")
				worst = 0
				for i := range wantLoss {
					loss := stepGrads(t, m, r.batch(t, i))
					worst = max(worst, math.Abs(float64(loss-wantLoss[i]))/float64(wantLoss[i]))
					norm := m.GradNorm()
					m.Update(opt, lr, i+1, min(1, maxNorm/(norm+1e-6)))
					checkComputeCopy(t, be, m, prec, prec.StochasticRounding)
				}
				t.Logf("10 steps: largest relative loss difference %.3g", worst)
				if worst > trainTol {
					t.Errorf("10 steps: a loss differs from PyTorch fp32's by %.3g relative > %g", worst, trainTol)
				}
			})
		}
	}
}

// checkComputeCopy requires every element of the compute copy to be the fp32 master rounded to
// the compute format: to nearest, or (stochastic) to one of its two neighbours.
func checkComputeCopy(t *testing.T, be backend.Backend, m *bert.Model, prec gpt.Precision, stochastic bool) {
	t.Helper()
	master, copy16 := download(be, m.Params), download(be, m.Compute())
	dt := prec.Compute
	for i, p := range master {
		if near := dt.Round(p); copy16[i] != near && (!stochastic || dt.Round(copy16[i]) != copy16[i] ||
			math.Abs(float64(copy16[i]-p)) > 2*dt.Epsilon()*math.Abs(float64(p))+0x1p-24) {
			t.Fatalf("%v: parameter %d: compute copy %g, master %g (nearest %v value %g)", prec, i, copy16[i], p, dt, near)
		}
	}
}

// The masked-pattern task (TestLearnsMaskedPattern) is learnt in bf16 and fp16 as in fp32.
func TestLearnsMaskedPatternMixed(t *testing.T) {
	for _, prec := range []gpt.Precision{{Compute: backend.BF16}, {Compute: backend.F16}} {
		t.Run(prec.String(), func(t *testing.T) { learnMaskedPattern(t, prec) })
	}
}
