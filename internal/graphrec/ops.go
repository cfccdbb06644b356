package graphrec

import (
	"slices"

	"github.com/gpt2go/gpt2go/backend"
)

// Every op is recorded while capturing and run at once otherwise; an op whose result the host
// reads is refused while capturing.

func (r *Backend) EncoderForward(out, tokens, wte, wpe backend.Buf, B, T, C int) {
	r.op(func() { r.inner.EncoderForward(out, tokens, wte, wpe, B, T, C) })
}

func (r *Backend) EncoderBackward(dwte, dwpe, dout, tokens backend.Buf, B, T, C int) {
	r.op(func() { r.inner.EncoderBackward(dwte, dwpe, dout, tokens, B, T, C) })
}

func (r *Backend) LayerNormForward(out, mean, rstd, inp, weight, bias backend.Buf, N, C int) {
	r.op(func() { r.inner.LayerNormForward(out, mean, rstd, inp, weight, bias, N, C) })
}

func (r *Backend) ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias backend.Buf, N, C int) {
	r.op(func() { r.inner.ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias, N, C) })
}

func (r *Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd backend.Buf, N, C int) {
	r.op(func() { r.inner.LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C) })
}

func (r *Backend) MatmulForward(out, inp, weight, bias backend.Buf, N, C, OC int) {
	r.op(func() { r.inner.MatmulForward(out, inp, weight, bias, N, C, OC) })
}

func (r *Backend) MatmulForwardInt8(out, inp, qweight, bias backend.Buf, N, C, OC int) {
	r.op(func() { r.inner.MatmulForwardInt8(out, inp, qweight, bias, N, C, OC) })
}

func (r *Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight backend.Buf, N, C, OC int) {
	r.op(func() { r.inner.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC) })
}

func (r *Backend) MatmulGeluForward(out, pre, inp, weight, bias backend.Buf, N, C, OC int) {
	r.op(func() { r.inner.MatmulGeluForward(out, pre, inp, weight, bias, N, C, OC) })
}

func (r *Backend) MatmulBackwardGelu(dinp, dweight, dbias, dout, inp, weight, pre backend.Buf, N, C, OC int) {
	r.op(func() { r.inner.MatmulBackwardGelu(dinp, dweight, dbias, dout, inp, weight, pre, N, C, OC) })
}

func (r *Backend) AttentionForward(out, lse, qkv backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	r.op(func() { r.inner.AttentionForward(out, lse, qkv, B, T, C, NH, mask) })
}

func (r *Backend) AttentionBackward(dqkv, dout, qkv, out, lse backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	r.op(func() { r.inner.AttentionBackward(dqkv, dout, qkv, out, lse, B, T, C, NH, mask) })
}

func (r *Backend) AttentionForwardCached(out, kcache, vcache, qkv backend.Buf, B, Tnew, pos, maxT, C, NH int) {
	r.op(func() { r.inner.AttentionForwardCached(out, kcache, vcache, qkv, B, Tnew, pos, maxT, C, NH) })
}

func (r *Backend) GeluForward(out, inp backend.Buf, N int) {
	r.op(func() { r.inner.GeluForward(out, inp, N) })
}

func (r *Backend) GeluBackward(dinp, inp, dout backend.Buf, N int) {
	r.op(func() { r.inner.GeluBackward(dinp, inp, dout, N) })
}

func (r *Backend) GeluErfForward(out, inp backend.Buf, N int) {
	r.op(func() { r.inner.GeluErfForward(out, inp, N) })
}

func (r *Backend) GeluErfBackward(dinp, inp, dout backend.Buf, N int) {
	r.op(func() { r.inner.GeluErfBackward(dinp, inp, dout, N) })
}

func (r *Backend) ResidualForward(out, a, b backend.Buf, N int) {
	r.op(func() { r.inner.ResidualForward(out, a, b, N) })
}

func (r *Backend) ResidualBackward(da, db, dout backend.Buf, N int) {
	r.op(func() { r.inner.ResidualBackward(da, db, dout, N) })
}

func (r *Backend) CrossEntropyForward(losses, lse, logits, targets backend.Buf, N, V, Vp int) {
	r.op(func() { r.inner.CrossEntropyForward(losses, lse, logits, targets, N, V, Vp) })
}

func (r *Backend) CrossEntropyBackward(dlogits, logits, lse, targets backend.Buf, dloss float32, N, V, Vp int) {
	r.op(func() { r.inner.CrossEntropyBackward(dlogits, logits, lse, targets, dloss, N, V, Vp) })
}

func (r *Backend) CrossEntropyFused(losses, lse, logits, targets backend.Buf, dloss float32, N, V, Vp int) {
	r.op(func() { r.inner.CrossEntropyFused(losses, lse, logits, targets, dloss, N, V, Vp) })
}

func (r *Backend) AdamW(params, grads, m, v backend.Buf, N int, h backend.AdamWParams) {
	r.op(func() { r.inner.AdamW(params, grads, m, v, N, h) })
}

func (r *Backend) SumSquares(x backend.Buf, N int) float64 {
	r.refuse("SumSquares (a result read on the host)")
	return r.inner.SumSquares(x, N)
}

func (r *Backend) GradStats(stats, grads backend.Buf, N, block int, clip, lossScale float64) {
	r.op(func() { r.inner.GradStats(stats, grads, N, block, clip, lossScale) })
}

func (r *Backend) AdamWAll(params, grads, m, v backend.Buf, segs []backend.AdamWSegment, h backend.AdamWParams, step, stats backend.Buf) {
	segs = slices.Clone(segs) // a graph keeps its arguments' values
	r.op(func() { r.inner.AdamWAll(params, grads, m, v, segs, h, step, stats) })
}

func (r *Backend) Convert(dst, src backend.Buf, N int, seed uint64) {
	r.op(func() { r.inner.Convert(dst, src, N, seed) })
}

func (r *Backend) ConvertSeeded(dst, src backend.Buf, N int, seed backend.Buf) {
	r.op(func() { r.inner.ConvertSeeded(dst, src, N, seed) })
}
