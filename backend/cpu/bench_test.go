package cpu

import (
	"fmt"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// GPT-2 124M shapes at B=4, T=64.
const (
	bB, bT, bC, bNH = 4, 64, 768, 12
	bN              = bB * bT
	bV, bVp         = 50257, 50304
)

func benchBuf(be *Backend, n int) backend.Buf {
	b := be.Alloc(n)
	copy(Floats(b), randoms[float32](newRand(uint64(n)), n))
	return b
}

// report adds GFLOP/s and GB/s metrics for flops and bytes per op.
func report(b *testing.B, flops, bytes float64) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	if flops > 0 {
		b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	}
	if bytes > 0 {
		b.ReportMetric(bytes/sec/1e9, "GB/s")
	}
}

func BenchmarkMatmul(b *testing.B) {
	benchmarkMatmul(b, bN, []struct{ C, OC int }{{bC, 3 * bC}, {bC, 4 * bC}, {bC, bC}, {4 * bC, bC}, {bC, bVp}})
}

// BenchmarkMatmulChar runs the matmuls of nanoGPT's char-level Shakespeare model (B=12, T=64,
// C=128, vocabulary 65).
func BenchmarkMatmulChar(b *testing.B) {
	benchmarkMatmul(b, 12*64, []struct{ C, OC int }{{128, 384}, {128, 512}, {128, 128}, {512, 128}, {128, 65}})
}

func benchmarkMatmul(b *testing.B, bN int, shapes []struct{ C, OC int }) {
	for _, s := range shapes {
		be := New(0)
		inp, weight, bias := benchBuf(be, bN*s.C), benchBuf(be, s.OC*s.C), benchBuf(be, s.OC)
		out, dout := be.Alloc(bN*s.OC), benchBuf(be, bN*s.OC)
		dinp, dweight, dbias := be.Alloc(bN*s.C), be.Alloc(s.OC*s.C), be.Alloc(s.OC)
		flops := 2 * float64(bN) * float64(s.C) * float64(s.OC)
		b.Run(fmt.Sprintf("forward/N=%d,C=%d,OC=%d", bN, s.C, s.OC), func(b *testing.B) {
			for b.Loop() {
				be.MatmulForward(out, inp, weight, bias, bN, s.C, s.OC)
			}
			report(b, flops, 0)
		})
		b.Run(fmt.Sprintf("backward/N=%d,C=%d,OC=%d", bN, s.C, s.OC), func(b *testing.B) {
			for b.Loop() {
				be.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, bN, s.C, s.OC)
			}
			report(b, 2*flops, 0)
		})
	}
}

// sgemmShapes are the gemms of a GPT-2 124M step at B=4, T=64 (N=256 rows), for each linear layer
// (C, OC): the forward out(N,OC) = inp(N,C) @ W(OC,C)^T, and the backward dinp(N,C) += dout(N,OC) @
// W and dW(OC,C) += dout^T @ inp(N,C). bench/sgemm_compare.sh runs OpenBLAS on the same list.
func sgemmShapes() []struct {
	name       string
	M, N, K    int
	transA     bool // a is stored (K,M): the dW case
	transB     bool // b is stored (N,K): the forward case
	accumulate bool
} {
	type shape = struct {
		name       string
		M, N, K    int
		transA     bool
		transB     bool
		accumulate bool
	}
	var shapes []shape
	for _, s := range []struct{ C, OC int }{{bC, 3 * bC}, {bC, 4 * bC}, {bC, bC}, {4 * bC, bC}, {bC, bVp}} {
		shapes = append(shapes,
			shape{"fwd", bN, s.OC, s.C, false, true, false},
			shape{"dinp", bN, s.C, s.OC, false, false, true},
			shape{"dW", s.OC, s.C, bN, true, false, true})
	}
	return shapes
}

// BenchmarkSgemm times the float32 gemm alone (no bias) at sgemmShapes; the sub-benchmark names
// are what bench/sgemm_openblas.c prints.
func BenchmarkSgemm(b *testing.B) {
	be := New(0)
	for _, s := range sgemmShapes() {
		b.Run(fmt.Sprintf("%s/M=%d,N=%d,K=%d", s.name, s.M, s.N, s.K), func(b *testing.B) {
			a := strided[float32]{data: randoms[float32](newRand(1), s.M*s.K), rowStride: s.K, colStride: 1}
			if s.transA {
				a.rowStride, a.colStride = 1, s.M
			}
			bm := strided[float32]{data: randoms[float32](newRand(2), s.K*s.N), rowStride: s.N, colStride: 1}
			if s.transB {
				bm.rowStride, bm.colStride = 1, s.K
			}
			c := make([]float32, s.M*s.N)
			// One untimed call first, as bench/sgemm_openblas.c makes, so that c's pages are
			// mapped and the packing space allocated.
			gemm(&be.pool, &be.gemm, s.M, s.N, s.K, a, bm, c, s.N, s.accumulate, nil)
			for b.Loop() { // the setup above is not timed
				gemm(&be.pool, &be.gemm, s.M, s.N, s.K, a, bm, c, s.N, s.accumulate, nil)
			}
			report(b, 2*float64(s.M)*float64(s.N)*float64(s.K), 0)
		})
	}
}

func BenchmarkAttention(b *testing.B) {
	// GPT-2 124M, and nanoGPT's char-level Shakespeare model (B=12, T=64, C=128, NH=4).
	for _, s := range []struct{ B, T, C, NH int }{{bB, bT, bC, bNH}, {1, 1024, bC, bNH}, {12, 64, 128, 4}} {
		be := New(0)
		N := s.B * s.T
		qkv, dqkv := benchBuf(be, N*3*s.C), be.Alloc(N*3*s.C)
		out, dout, lse := be.Alloc(N*s.C), benchBuf(be, N*s.C), be.Alloc(s.B*s.NH*s.T)
		// Query-key pairs with t2 <= t, each a dot product and an axpy of HS in the forward; the
		// backward is counted as twice that (its recomputation of the scores is not counted), so
		// that figures compare across implementations.
		pairs := float64(s.B*s.NH) * float64(s.T) * float64(s.T+1) / 2
		flops := pairs * 4 * float64(s.C/s.NH)
		b.Run(fmt.Sprintf("forward/B=%d,T=%d,C=%d", s.B, s.T, s.C), func(b *testing.B) {
			for b.Loop() {
				be.AttentionForward(out, lse, qkv, s.B, s.T, s.C, s.NH, backend.AttentionMask{Causal: true})
			}
			report(b, flops, 0)
		})
		b.Run(fmt.Sprintf("backward/B=%d,T=%d,C=%d", s.B, s.T, s.C), func(b *testing.B) {
			for b.Loop() {
				be.AttentionBackward(dqkv, dout, qkv, out, lse, s.B, s.T, s.C, s.NH, backend.AttentionMask{Causal: true})
			}
			report(b, 2*flops, 0)
		})
		be.Close()
	}
}

func BenchmarkEncoder(b *testing.B) {
	be := New(0)
	tokens := be.AllocInt32(bN)
	be.UploadInt32(tokens, randTokens(newRand(1), bN, bV))
	wte, wpe := benchBuf(be, bVp*bC), benchBuf(be, bT*bC)
	out, dwte, dwpe := be.Alloc(bN*bC), be.Alloc(bVp*bC), be.Alloc(bT*bC)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			be.EncoderForward(out, tokens, wte, wpe, bB, bT, bC)
		}
		report(b, 0, 4*3*bN*bC)
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			be.EncoderBackward(dwte, dwpe, out, tokens, bB, bT, bC)
		}
		report(b, 0, 4*5*bN*bC)
	})
}

func BenchmarkLayerNorm(b *testing.B) {
	be := New(0)
	inp, weight, bias := benchBuf(be, bN*bC), benchBuf(be, bC), benchBuf(be, bC)
	out, mean, rstd := be.Alloc(bN*bC), be.Alloc(bN), be.Alloc(bN)
	dinp, dweight, dbias := be.Alloc(bN*bC), be.Alloc(bC), be.Alloc(bC)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			be.LayerNormForward(out, mean, rstd, inp, weight, bias, bN, bC)
		}
		report(b, 0, 4*2*bN*bC)
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			be.LayerNormBackward(dinp, dweight, dbias, out, inp, weight, mean, rstd, bN, bC)
		}
		report(b, 0, 4*4*bN*bC)
	})
	// residual = inp + dinp and its LayerNorm: reads two (N,C) arrays, writes two. Compare with
	// Residual/forward followed by LayerNorm/forward, the unfused pair.
	residual := be.Alloc(bN * bC)
	b.Run("residual_forward", func(b *testing.B) {
		for b.Loop() {
			be.ResidualLayerNormForward(residual, out, mean, rstd, inp, dinp, weight, bias, bN, bC)
		}
		report(b, 0, 4*4*bN*bC)
	})
}

func BenchmarkGelu(b *testing.B) {
	be := New(0)
	n := bN * 4 * bC
	inp, out, dinp := benchBuf(be, n), be.Alloc(n), be.Alloc(n)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			be.GeluForward(out, inp, n)
		}
		report(b, 0, 4*2*float64(n))
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			be.GeluBackward(dinp, inp, out, n)
		}
		report(b, 0, 4*4*float64(n))
	})
	b.Run("erf_forward", func(b *testing.B) {
		for b.Loop() {
			be.GeluErfForward(out, inp, n)
		}
		report(b, 0, 4*2*float64(n))
	})
	b.Run("erf_backward", func(b *testing.B) {
		for b.Loop() {
			be.GeluErfBackward(dinp, inp, out, n)
		}
		report(b, 0, 4*4*float64(n))
	})
}

func BenchmarkResidual(b *testing.B) {
	be := New(0)
	n := bN * bC
	x, y, out := benchBuf(be, n), benchBuf(be, n), be.Alloc(n)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			be.ResidualForward(out, x, y, n)
		}
		report(b, 0, 4*3*float64(n))
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			be.ResidualBackward(x, y, out, n)
		}
		report(b, 0, 4*5*float64(n))
	})
}

// BenchmarkCrossEntropy: the forward reads logits(N,Vp) once (writing lse and losses, N each); the
// backward reads them and writes dlogits in place, as the model runs it.
func BenchmarkCrossEntropy(b *testing.B) {
	be := New(0)
	targets := be.AllocInt32(bN)
	be.UploadInt32(targets, randTokens(newRand(2), bN, bV))
	logits, lse, losses := benchBuf(be, bN*bVp), be.Alloc(bN), be.Alloc(bN)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			be.CrossEntropyForward(losses, lse, logits, targets, bN, bV, bVp)
		}
		report(b, 0, 4*bN*bVp)
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			be.CrossEntropyBackward(logits, logits, lse, targets, 1.0/bN, bN, bV, bVp)
		}
		report(b, 0, 4*2*bN*bVp)
	})
	// fused: both in one pass per row; the row is read from memory once. Its logits become
	// dlogits, then dlogits of those, and so on: finite values all the same.
	b.Run("fused", func(b *testing.B) {
		for b.Loop() {
			be.CrossEntropyFused(losses, lse, logits, targets, 1.0/bN, bN, bV, bVp)
		}
		report(b, 0, 4*2*bN*bVp)
	})
}

func BenchmarkAdamW(b *testing.B) {
	be := New(0)
	n := 124_475_904 // GPT-2 124M's parameters (Vp = 50304): one optimizer step, one gradient norm
	params, grads, m, v := benchBuf(be, n), benchBuf(be, n), be.Alloc(n), be.Alloc(n)
	h := backend.AdamWParams{LR: 6e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 1, Step: 1}
	b.Run("step", func(b *testing.B) {
		for b.Loop() {
			be.AdamW(params, grads, m, v, n, h)
		}
		report(b, 0, 4*7*float64(n))
	})
	b.Run("sumsquares", func(b *testing.B) {
		for b.Loop() {
			be.SumSquares(grads, n)
		}
		report(b, 0, 4*float64(n))
	})
}
