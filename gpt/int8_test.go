package gpt_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// TestQuantizeInt8 checks an int8 model against its fp32 self: the loss within 1% and every logit
// within 3% of the largest (int8 rounds each weight and input to 1/254 of its row's range), yet not
// the fp32 bits (the int8 products do run); the KV-cached generation path agrees with the int8
// Forward; the weights take a quarter of the memory (plus a scale and a row sum per row); training
// and a second quantization are refused.
func TestQuantizeInt8(t *testing.T) { testQuantizeInt8(t, cpu.New(0), 8) }

// testQuantizeInt8 runs TestQuantizeInt8 on be, whose int8 weights keep perRow bytes per row
// beside the int8 values (its scale, and on the CPU a row sum).
func testQuantizeInt8(t *testing.T, be backend.Backend, perRow int64) {
	cfg := kvConfig
	const B = 2
	T := cfg.BlockSize
	m := randomModel(t, be, cfg, B, T, gpt.Precision{})
	rng := rand.New(rand.NewPCG(7, 8))
	tokens, targets := make([]int32, B*T), make([]int32, B*T)
	for i := range tokens {
		tokens[i], targets[i] = int32(rng.IntN(cfg.VocabSize)), int32(rng.IntN(cfg.VocabSize))
	}
	logits := func() ([][]float32, float32) {
		loss, err := m.Forward(tokens, targets, B, T)
		if err != nil {
			t.Fatal(err)
		}
		rows := make([][]float32, B*T)
		for i := range rows {
			rows[i] = make([]float32, cfg.VocabSize)
			m.LogitsRow(rows[i], i/T, i%T)
		}
		return rows, loss
	}
	want, wantLoss := logits()
	st, err := m.QuantizeInt8()
	if err != nil {
		t.Fatal(err)
	}
	if !m.IsInt8() {
		t.Fatal("IsInt8 is false after QuantizeInt8")
	}
	L, C, Vp := cfg.NumLayers, cfg.Channels, cfg.PaddedVocabSize
	values := int64(L*12*C*C + Vp*C)
	rows := int64(L*(3*C+C+4*C+C) + Vp)
	if st.FP32Bytes != 4*values || st.Int8Bytes != values+perRow*rows {
		t.Fatalf("stats %+v, want fp32 %d bytes, int8 %d", st, 4*values, values+perRow*rows)
	}
	got, gotLoss := logits()
	t.Logf("loss fp32 %.5f int8 %.5f", wantLoss, gotLoss)
	if math.Abs(float64(gotLoss-wantLoss)) > 0.01*float64(wantLoss) {
		t.Fatalf("int8 loss %g, fp32 %g", gotLoss, wantLoss)
	}
	var scale, worst float64
	same := true
	for i := range want {
		for j, w := range want[i] {
			scale = max(scale, math.Abs(float64(w)))
			worst = max(worst, math.Abs(float64(got[i][j]-w)))
			same = same && got[i][j] == w
		}
	}
	t.Logf("largest logit difference %.3g of %.3g", worst, scale)
	if worst > 0.03*scale || same {
		t.Fatalf("int8 logits differ from fp32 by up to %g (largest logit %g; identical: %v)", worst, scale, same)
	}
	if err := m.Backward(1); err == nil {
		t.Fatal("Backward of an int8 model did not fail")
	}
	if _, err := m.QuantizeInt8(); err == nil {
		t.Fatal("quantizing twice did not fail")
	}

	// The cache runs the same int8 products; only attention's float sums differ, which may move
	// an input across a rounding boundary of its quantization: a few quanta at most.
	kc, err := m.NewKVCache(B, T)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, cfg.VocabSize)
	for pos := range T {
		step := []int32{tokens[pos], tokens[T+pos]}
		if err := kc.Append(step, 1); err != nil {
			t.Fatal(err)
		}
		for b := range B {
			kc.Logits(row, b)
			for j, g := range row {
				if d := math.Abs(float64(g - got[b*T+pos][j])); d > 0.01*scale {
					t.Fatalf("sequence %d position %d logit %d: cached int8 %g, int8 Forward %g", b, pos, j, g, got[b*T+pos][j])
				}
			}
		}
	}
}

// TestNewInferenceInt8 on the CPU; gpt/int8_cuda_test.go runs it on a GPU.
func TestNewInferenceInt8(t *testing.T) { testNewInferenceInt8(t, cpu.New(0)) }

// testNewInferenceInt8: NewInferenceInt8, reading the parameters in chunks of 37 (which cut
// across tensors and layers), gives the bits of NewInference + SetParams +
// QuantizeInt8 (losses, every logit, an attention map, greedy cached generation) in fp32 and
// bf16, at the planned shape and a smaller one, with the same Int8Stats and without the float
// matmul weights in Params; it refuses a wrong parameter count and backward.
func testNewInferenceInt8(t *testing.T, be backend.Backend) {
	cfg := kvConfig
	const B, T = 3, 24
	for _, prec := range []gpt.Precision{{}, {Compute: backend.BF16}} {
		m := randomModel(t, be, cfg, B, T, prec)
		params := make([]float32, m.Params.Len())
		be.Download(params, m.Params)
		ref := inferenceTwin(t, m, B, T)
		wantSt, err := ref.QuantizeInt8()
		if err != nil {
			t.Fatal(err)
		}
		q, st, err := gpt.NewInferenceInt8(be, cfg, B, T, prec, chunked(params, 37))
		if err != nil {
			t.Fatal(err)
		}
		if st != wantSt || !q.IsInt8() || !q.Frozen() {
			t.Errorf("%v: stats %+v (int8 %v, frozen %v), QuantizeInt8's %+v", prec, st, q.IsInt8(), q.Frozen(), wantSt)
		}
		L, C := cfg.NumLayers, cfg.Channels
		if got, want := q.Params.Len(), cfg.NumParams()-L*12*C*C; got != want {
			t.Errorf("%v: Params holds %d values, want %d (no matmul weights)", prec, got, want)
		}
		sameForward(t, prec.String()+" int8", ref, q, rand.New(rand.NewPCG(9, 10)), [2]int{B, T}, [2]int{2, 7})
		sameMapsAndGreedy(t, prec.String()+" int8", ref, q, []int32{3, 17, 9, 42, 0, 42, 7, 10, 17}, T, 1)
		if err := q.Backward(1); err == nil {
			t.Errorf("%v: backward on an int8 model did not fail", prec)
		}
		if _, err := q.QuantizeInt8(); err == nil {
			t.Errorf("%v: quantizing NewInferenceInt8's model again did not fail", prec)
		}
	}
	if _, _, err := gpt.NewInferenceInt8(be, cfg, B, T, gpt.Precision{}, gpt.HostParams(make([]float32, cfg.NumParams()-1))); err == nil || !strings.Contains(err.Error(), "parameter count") {
		t.Errorf("a short parameter array: %v, want a count mismatch", err)
	}
}

// failingQuantizer refuses the quantization after ok successful ones.
type failingQuantizer struct {
	backend.Backend
	ok int
}

func (f *failingQuantizer) QuantizeInt8(w backend.Buf, OC, C int) (backend.Buf, error) {
	if f.ok == 0 {
		return nil, fmt.Errorf("out of memory")
	}
	f.ok--
	return f.Backend.QuantizeInt8(w, OC, C)
}

// A QuantizeInt8 that fails partway leaves the float model as it was: every weight float, the
// same loss, backward still allowed.
func TestQuantizeInt8AllOrNothing(t *testing.T) {
	be := &failingQuantizer{Backend: cpu.New(0)}
	m := randomModel(t, be, kvConfig, 1, 8, gpt.Precision{})
	tokens := []int32{3, 17, 9, 42, 0, 42, 7, 10}
	want, err := m.Forward(tokens, tokens, 1, len(tokens))
	if err != nil {
		t.Fatal(err)
	}
	be.ok = 3
	if _, err := m.QuantizeInt8(); err == nil {
		t.Fatal("the failing quantization succeeded")
	}
	got, err := m.Forward(tokens, tokens, 1, len(tokens))
	if err != nil {
		t.Fatal(err)
	}
	if m.IsInt8() || got != want {
		t.Errorf("after a failed QuantizeInt8: int8 %v, loss %v (before %v)", m.IsInt8(), got, want)
	}
	if err := m.Backward(1); err != nil {
		t.Errorf("backward after a failed QuantizeInt8: %v", err)
	}
}
