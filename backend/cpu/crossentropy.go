package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// CrossEntropyForward writes probs(N,Vp) and losses(N) from logits(N,Vp) and targets(N); probs may
// be logits.
func (be *Backend) CrossEntropyForward(losses, probs, logits, targets backend.Buf, N, V, Vp int) {
	crossEntropyForward(&be.pool, Floats(losses), Floats(probs), Floats(logits), Int32s(targets), N, V, Vp)
}

// CrossEntropyBackward writes dlogits(N,Vp) = (probs - onehot(target))*dloss; dlogits may be probs.
func (be *Backend) CrossEntropyBackward(dlogits, probs, targets backend.Buf, dloss float32, N, V, Vp int) {
	crossEntropyBackward(&be.pool, Floats(dlogits), Floats(probs), Int32s(targets), dloss, N, V, Vp)
}

// crossEntropyForward: probs(N,Vp) = softmax of the first V columns of each row of logits(N,Vp)
// (the padding columns V..Vp-1 get 0) and losses(N) = -log probs[n, targets[n]]. probs may alias
// logits. Exponentials and the normaliser are computed in float64, and the loss is taken from the
// log-sum-exp rather than from the rounded probability.
func crossEntropyForward[F Float](p *pool, losses, probs, logits []F, targets []int32, N, V, Vp int) {
	p.parallelFor(N, 1, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x := logits[n*Vp : n*Vp+V]
			y := probs[n*Vp : n*Vp+Vp]
			maxLogit := x[0]
			for _, xi := range x[1:] {
				maxLogit = max(maxLogit, xi)
			}
			target := int(targets[n])
			targetLogit := x[target]
			var sum float64
			for i, xi := range x {
				e := math.Exp(float64(xi - maxLogit))
				sum += e
				y[i] = F(e)
			}
			inv := 1 / sum
			for i := range V {
				y[i] = F(float64(y[i]) * inv)
			}
			clear(y[V:])
			losses[n] = F(math.Log(sum) - float64(targetLogit-maxLogit))
		}
	})
}

// crossEntropyBackward writes dlogits(N,Vp) = (probs(N,Vp) - onehot(targets(N)))*dloss for the first
// V columns and 0 for padding. dlogits may alias probs.
func crossEntropyBackward[F Float](p *pool, dlogits, probs []F, targets []int32, dloss F, N, V, Vp int) {
	p.parallelFor(N, 1, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			pr := probs[n*Vp : n*Vp+V]
			d := dlogits[n*Vp : n*Vp+Vp]
			for i, pi := range pr {
				d[i] = pi * dloss
			}
			d[targets[n]] -= dloss
			clear(d[V:])
		}
	})
}
