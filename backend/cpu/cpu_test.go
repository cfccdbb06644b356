package cpu

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

func TestBuffers(t *testing.T) {
	be := New(2)
	if got := be.Name(); got != "cpu (2 threads)" {
		t.Errorf("Name = %q", got)
	}
	buf := be.Alloc(10)
	be.Upload(buf, []float32{1, 2, 3, 4, 5})
	view := be.View(buf, 2, 4)
	if view.Len() != 4 {
		t.Fatalf("view len %d", view.Len())
	}
	Floats(view)[0] = 30 // shares memory with buf
	got := make([]float32, 6)
	be.Download(got, buf)
	checkClose(t, "buf", got, []float32{1, 2, 30, 4, 5, 0}, 0)
	be.Zero(view)
	be.Download(got, buf)
	checkClose(t, "buf after Zero(view)", got, []float32{1, 2, 0, 0, 0, 0}, 0)

	tokens := be.AllocInt32(4)
	be.UploadInt32(tokens, []int32{7, 8})
	if ids := Int32s(be.View(tokens, 1, 2)); ids[0] != 8 || ids[1] != 0 {
		t.Errorf("int32 view = %v", ids)
	}
	if Floats(nil) != nil || Int32s(nil) != nil {
		t.Error("nil Buf must give a nil slice")
	}
	if err := be.Sync(); err != nil {
		t.Error(err)
	}
}

// TestThreadDeterminism runs every op through the backend.Backend interface with 1 and 3 threads on
// shapes large enough to split every loop, and requires bitwise-identical results.
func TestThreadDeterminism(t *testing.T) {
	const (
		B, T, C, NH = 2, 37, 192, 4
		OC, V, Vp   = 300, 300, 320
		N           = B * T
	)
	run := func(threads int) (map[string][]float32, float64) {
		var be backend.Backend = New(threads)
		r := newRand(17)
		results := map[string][]float32{}
		buf := func(values []float32) backend.Buf {
			b := be.Alloc(len(values))
			be.Upload(b, values)
			return b
		}
		keep := func(name string, b backend.Buf) { results[name] = clone(Floats(b)) }
		tokens := be.AllocInt32(N)
		be.UploadInt32(tokens, randTokens(r, N, 5)) // few distinct tokens: many repeats
		targets := be.AllocInt32(N)
		be.UploadInt32(targets, randTokens(r, N, V))

		wte, wpe := buf(randoms[float32](r, Vp*C)), buf(randoms[float32](r, T*C))
		x, dx := be.Alloc(N*C), buf(randoms[float32](r, N*C))
		dwte, dwpe := buf(randoms[float32](r, Vp*C)), buf(randoms[float32](r, T*C))
		be.EncoderForward(x, tokens, wte, wpe, B, T, C)
		keep("encoder out", x)
		be.EncoderForward(x, tokens, wte, nil, B, T, C)
		keep("encoder out nil wpe", x)
		be.EncoderBackward(dwte, dwpe, dx, tokens, B, T, C)
		be.EncoderBackward(dwte, nil, dx, tokens, B, T, C)
		keep("dwte", dwte)
		keep("dwpe", dwpe)

		lnw, lnb := buf(randoms[float32](r, C)), buf(randoms[float32](r, C))
		ln, mean, rstd := be.Alloc(N*C), be.Alloc(N), be.Alloc(N)
		dinp, dlnw, dlnb := buf(randoms[float32](r, N*C)), buf(randoms[float32](r, C)), buf(randoms[float32](r, C))
		be.LayerNormForward(ln, mean, rstd, x, lnw, lnb, N, C)
		be.LayerNormBackward(dinp, dlnw, dlnb, dx, x, lnw, mean, rstd, N, C)
		resid, ln2, mean2, rstd2 := be.Alloc(N*C), be.Alloc(N*C), be.Alloc(N), be.Alloc(N)
		be.ResidualLayerNormForward(resid, ln2, mean2, rstd2, x, dx, lnw, lnb, N, C)
		for name, b := range map[string]backend.Buf{"fused residual": resid, "fused ln": ln2, "fused mean": mean2, "fused rstd": rstd2} {
			keep(name, b)
		}
		for name, b := range map[string]backend.Buf{"ln": ln, "mean": mean, "rstd": rstd, "ln dinp": dinp, "ln dweight": dlnw, "ln dbias": dlnb} {
			keep(name, b)
		}

		w, bias := buf(randoms[float32](r, OC*C)), buf(randoms[float32](r, OC))
		mm, dmm := be.Alloc(N*OC), buf(randoms[float32](r, N*OC))
		dw, dbias := buf(randoms[float32](r, OC*C)), buf(randoms[float32](r, OC))
		be.MatmulForward(mm, x, w, bias, N, C, OC)
		keep("matmul out", mm)
		be.MatmulForward(mm, x, w, nil, N, C, OC)
		keep("matmul out nil bias", mm)
		be.MatmulBackward(dinp, dw, dbias, dmm, x, w, N, C, OC)
		be.MatmulBackward(nil, dw, nil, dmm, x, w, N, C, OC)
		keep("matmul dinp", dinp)
		keep("matmul dweight", dw)
		keep("matmul dbias", dbias)

		qkv, dqkv := buf(randoms[float32](r, N*3*C)), buf(randoms[float32](r, N*3*C))
		lse := be.Alloc(B * NH * T)
		be.AttentionForward(x, lse, qkv, B, T, C, NH, backend.AttentionMask{Causal: true})
		be.AttentionBackward(dqkv, dx, qkv, x, lse, B, T, C, NH, backend.AttentionMask{Causal: true})
		for name, b := range map[string]backend.Buf{"attention out": x, "lse": lse, "dqkv": dqkv} {
			keep(name, b)
		}

		h, dh := buf(randoms[float32](r, N*4*C)), buf(randoms[float32](r, N*4*C))
		gelu, dgelu := be.Alloc(N*4*C), buf(randoms[float32](r, N*4*C))
		be.GeluForward(gelu, h, N*4*C)
		be.GeluBackward(dgelu, h, dh, N*4*C)
		keep("gelu", gelu)
		keep("dgelu", dgelu)
		be.ResidualForward(gelu, h, dh, N*4*C)
		be.ResidualBackward(h, dgelu, dh, N*4*C)
		keep("residual", gelu)
		keep("residual da", h)
		keep("residual db", dgelu)

		logits, lse, losses := buf(randoms[float32](r, N*Vp)), be.Alloc(N), be.Alloc(N)
		be.CrossEntropyForward(losses, lse, logits, targets, N, V, Vp)
		keep("lse", lse)
		keep("losses", losses)
		be.CrossEntropyBackward(logits, logits, lse, targets, 1.0/N, N, V, Vp)
		keep("dlogits", logits)
		logits = buf(randoms[float32](r, N*Vp))
		be.CrossEntropyFused(losses, lse, logits, targets, 1.0/N, N, V, Vp)
		keep("fused lse", lse)
		keep("fused losses", losses)
		keep("fused dlogits", logits)

		params, grads := buf(randoms[float32](r, 100_000)), buf(randoms[float32](r, 100_000))
		m, v := be.Alloc(100_000), be.Alloc(100_000)
		for step := 1; step <= 3; step++ {
			be.AdamW(params, grads, m, v, 100_000, backend.AdamWParams{
				LR: 6e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 0.5, Step: step})
		}
		keep("adamw params", params)
		keep("adamw m", m)
		keep("adamw v", v)
		return results, be.SumSquares(grads, 100_000)
	}
	one, sumSquares1 := run(1)
	three, sumSquares3 := run(3)
	if sumSquares1 != sumSquares3 {
		t.Errorf("SumSquares: %v with 3 threads, %v with 1", sumSquares3, sumSquares1)
	}
	for name, want := range one {
		got := three[name]
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("%s[%d]: %g with 3 threads, %g with 1", name, i, got[i], want[i])
				break
			}
		}
	}
}
