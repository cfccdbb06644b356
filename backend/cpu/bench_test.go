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
	for _, s := range []struct{ C, OC int }{{bC, 3 * bC}, {bC, 4 * bC}, {bC, bC}, {4 * bC, bC}, {bC, bVp}} {
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

func BenchmarkAttention(b *testing.B) {
	be := New(0)
	qkv, dqkv := benchBuf(be, bN*3*bC), be.Alloc(bN*3*bC)
	out, dout := be.Alloc(bN*bC), benchBuf(be, bN*bC)
	preatt, att := be.Alloc(bB*bNH*bT*bT), be.Alloc(bB*bNH*bT*bT)
	dpreatt, datt := be.Alloc(bB*bNH*bT*bT), be.Alloc(bB*bNH*bT*bT)
	// Query-key pairs with t2 <= t, each a dot product and an axpy of HS.
	pairs := float64(bB*bNH) * bT * (bT + 1) / 2
	flops := pairs * 4 * float64(bC/bNH)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			be.AttentionForward(out, preatt, att, qkv, bB, bT, bC, bNH)
		}
		report(b, flops, 0)
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			be.AttentionBackward(dqkv, dpreatt, datt, dout, qkv, att, bB, bT, bC, bNH)
		}
		report(b, 2*flops, 0)
	})
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

func BenchmarkCrossEntropy(b *testing.B) {
	be := New(0)
	targets := be.AllocInt32(bN)
	be.UploadInt32(targets, randTokens(newRand(2), bN, bV))
	logits, probs, losses := benchBuf(be, bN*bVp), be.Alloc(bN*bVp), be.Alloc(bN)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			be.CrossEntropyForward(losses, probs, logits, targets, bN, bV, bVp)
		}
		report(b, 0, 4*2*bN*bVp)
	})
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			be.CrossEntropyBackward(logits, probs, targets, 1.0/bN, bN, bV, bVp)
		}
		report(b, 0, 4*2*bN*bVp)
	})
}

func BenchmarkAdamW(b *testing.B) {
	be := New(0)
	n := 1 << 24
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
