package profile

import "github.com/gpt2go/gpt2go/backend"

// Every method below runs the wrapped backend's op unchanged between two clock readings (the
// second after a Sync, see Options.NoSync) and records it under the op's method name.

func (p *Backend) EncoderForward(out, tokens, wte, wpe backend.Buf, B, T, C int) {
	start := p.now()
	p.Backend.EncoderForward(out, tokens, wte, wpe, B, T, C)
	p.record("EncoderForward", start, p.finish(), encoderForwardCost(B, T, C, wpe != nil))
}

func (p *Backend) EncoderBackward(dwte, dwpe, dout, tokens backend.Buf, B, T, C int) {
	start := p.now()
	p.Backend.EncoderBackward(dwte, dwpe, dout, tokens, B, T, C)
	p.record("EncoderBackward", start, p.finish(), encoderBackwardCost(B, T, C, dwpe != nil))
}

func (p *Backend) LayerNormForward(out, mean, rstd, inp, weight, bias backend.Buf, N, C int) {
	start := p.now()
	p.Backend.LayerNormForward(out, mean, rstd, inp, weight, bias, N, C)
	p.record("LayerNormForward", start, p.finish(), layerNormForwardCost(N, C))
}

func (p *Backend) ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias backend.Buf, N, C int) {
	start := p.now()
	p.Backend.ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias, N, C)
	p.record("ResidualLayerNormForward", start, p.finish(), residualLayerNormForwardCost(N, C))
}

func (p *Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd backend.Buf, N, C int) {
	start := p.now()
	p.Backend.LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C)
	p.record("LayerNormBackward", start, p.finish(), layerNormBackwardCost(N, C))
}

func (p *Backend) MatmulForward(out, inp, weight, bias backend.Buf, N, C, OC int) {
	start := p.now()
	p.Backend.MatmulForward(out, inp, weight, bias, N, C, OC)
	p.record("MatmulForward", start, p.finish(), matmulForwardCost(N, C, OC, bias != nil))
}

func (p *Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight backend.Buf, N, C, OC int) {
	start := p.now()
	p.Backend.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
	p.record("MatmulBackward", start, p.finish(), matmulBackwardCost(N, C, OC, dinp != nil, dbias != nil))
}

func (p *Backend) MatmulGeluForward(out, pre, inp, weight, bias backend.Buf, N, C, OC int) {
	start := p.now()
	p.Backend.MatmulGeluForward(out, pre, inp, weight, bias, N, C, OC)
	p.record("MatmulGeluForward", start, p.finish(), matmulGeluForwardCost(N, C, OC, bias != nil))
}

func (p *Backend) MatmulBackwardGelu(dinp, dweight, dbias, dout, inp, weight, pre backend.Buf, N, C, OC int) {
	start := p.now()
	p.Backend.MatmulBackwardGelu(dinp, dweight, dbias, dout, inp, weight, pre, N, C, OC)
	p.record("MatmulBackwardGelu", start, p.finish(), matmulBackwardGeluCost(N, C, OC, dbias != nil))
}

func (p *Backend) AttentionForward(out, lse, qkv backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	start := p.now()
	p.Backend.AttentionForward(out, lse, qkv, B, T, C, NH, mask)
	p.record("AttentionForward", start, p.finish(), attentionForwardCost(B, T, C, NH, mask))
}

func (p *Backend) AttentionBackward(dqkv, dout, qkv, out, lse backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	start := p.now()
	p.Backend.AttentionBackward(dqkv, dout, qkv, out, lse, B, T, C, NH, mask)
	p.record("AttentionBackward", start, p.finish(), attentionBackwardCost(B, T, C, NH, mask))
}

func (p *Backend) AttentionForwardCached(out, kcache, vcache, qkv backend.Buf, B, Tnew, pos, maxT, C, NH int) {
	start := p.now()
	p.Backend.AttentionForwardCached(out, kcache, vcache, qkv, B, Tnew, pos, maxT, C, NH)
	p.record("AttentionForwardCached", start, p.finish(), attentionForwardCachedCost(B, Tnew, pos, C, NH))
}

func (p *Backend) GeluForward(out, inp backend.Buf, N int) {
	start := p.now()
	p.Backend.GeluForward(out, inp, N)
	p.record("GeluForward", start, p.finish(), geluForwardCost(N))
}

func (p *Backend) GeluBackward(dinp, inp, dout backend.Buf, N int) {
	start := p.now()
	p.Backend.GeluBackward(dinp, inp, dout, N)
	p.record("GeluBackward", start, p.finish(), geluBackwardCost(N))
}

func (p *Backend) GeluErfForward(out, inp backend.Buf, N int) {
	start := p.now()
	p.Backend.GeluErfForward(out, inp, N)
	p.record("GeluErfForward", start, p.finish(), geluForwardCost(N))
}

func (p *Backend) GeluErfBackward(dinp, inp, dout backend.Buf, N int) {
	start := p.now()
	p.Backend.GeluErfBackward(dinp, inp, dout, N)
	p.record("GeluErfBackward", start, p.finish(), geluBackwardCost(N))
}

func (p *Backend) ResidualForward(out, a, b backend.Buf, N int) {
	start := p.now()
	p.Backend.ResidualForward(out, a, b, N)
	p.record("ResidualForward", start, p.finish(), residualForwardCost(N))
}

func (p *Backend) ResidualBackward(da, db, dout backend.Buf, N int) {
	start := p.now()
	p.Backend.ResidualBackward(da, db, dout, N)
	p.record("ResidualBackward", start, p.finish(), residualBackwardCost(N))
}

func (p *Backend) CrossEntropyForward(losses, lse, logits, targets backend.Buf, N, V, Vp int) {
	start := p.now()
	p.Backend.CrossEntropyForward(losses, lse, logits, targets, N, V, Vp)
	p.record("CrossEntropyForward", start, p.finish(), crossEntropyForwardCost(N, V, Vp))
}

func (p *Backend) CrossEntropyBackward(dlogits, logits, lse, targets backend.Buf, dloss float32, N, V, Vp int) {
	start := p.now()
	p.Backend.CrossEntropyBackward(dlogits, logits, lse, targets, dloss, N, V, Vp)
	p.record("CrossEntropyBackward", start, p.finish(), crossEntropyBackwardCost(N, V, Vp))
}

func (p *Backend) CrossEntropyFused(losses, lse, logits, targets backend.Buf, dloss float32, N, V, Vp int) {
	start := p.now()
	p.Backend.CrossEntropyFused(losses, lse, logits, targets, dloss, N, V, Vp)
	p.record("CrossEntropyFused", start, p.finish(), crossEntropyFusedCost(N, V, Vp))
}

func (p *Backend) AdamW(params, grads, m, v backend.Buf, N int, h backend.AdamWParams) {
	start := p.now()
	p.Backend.AdamW(params, grads, m, v, N, h)
	p.record("AdamW", start, p.finish(), adamWCost(N))
}

func (p *Backend) SumSquares(x backend.Buf, N int) float64 {
	start := p.now()
	sum := p.Backend.SumSquares(x, N)
	p.record("SumSquares", start, p.finish(), sumSquaresCost(N))
	return sum
}

// The memory ops that run inside a step are timed too: zeroing gradients is a real cost, and on
// a GPU uploads and downloads are transfers (torch lists them as Memcpy HtoD/DtoH).

func (p *Backend) Zero(b backend.Buf) {
	start := p.now()
	p.Backend.Zero(b)
	p.record("Zero", start, p.finish(), zeroCost(b.Len()))
}

func (p *Backend) Upload(dst backend.Buf, src []float32) {
	start := p.now()
	p.Backend.Upload(dst, src)
	p.record("Upload", start, p.finish(), copyCost(len(src)))
}

func (p *Backend) UploadInt32(dst backend.Buf, src []int32) {
	start := p.now()
	p.Backend.UploadInt32(dst, src)
	p.record("UploadInt32", start, p.finish(), copyCost(len(src)))
}

func (p *Backend) Download(dst []float32, src backend.Buf) {
	start := p.now()
	p.Backend.Download(dst, src)
	p.record("Download", start, p.finish(), copyCost(len(dst)))
}

func (p *Backend) Convert(dst, src backend.Buf, N int, seed uint64) {
	start := p.now()
	p.Backend.Convert(dst, src, N, seed)
	p.record("Convert", start, p.finish(), convertCost(N, dst.DType()))
}

func (p *Backend) ConvertSeeded(dst, src backend.Buf, N int, seed backend.Buf) {
	start := p.now()
	p.Backend.ConvertSeeded(dst, src, N, seed)
	p.record("Convert", start, p.finish(), convertCost(N, dst.DType()))
}

func (p *Backend) GradStats(stats, grads backend.Buf, N, block int, clip, lossScale float64) {
	start := p.now()
	p.Backend.GradStats(stats, grads, N, block, clip, lossScale)
	p.record("SumSquares", start, p.finish(), sumSquaresCost(N))
}

func (p *Backend) AdamWAll(params, grads, m, v backend.Buf, segs []backend.AdamWSegment, h backend.AdamWParams, step, stats backend.Buf) {
	start := p.now()
	p.Backend.AdamWAll(params, grads, m, v, segs, h, step, stats)
	p.record("AdamW", start, p.finish(), adamWCost(params.Len()))
}
