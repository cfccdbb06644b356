package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// AdamW updates params(N) in place from grads(N) and the moments m, v(N) as torch.optim.AdamW.
func (be *Backend) AdamW(params, grads, m, v backend.Buf, N int, h backend.AdamWParams) {
	adamW(&be.pool, Floats(params), Floats(grads), Floats(m), Floats(v), N, h)
}

// SumSquares returns the sum of x(N)^2 accumulated in float64.
func (be *Backend) SumSquares(x backend.Buf, N int) float64 {
	return sumSquares(&be.pool, &be.partials, Floats(x), N)
}

// adamW is one step of torch.optim.AdamW (single-tensor, fp32) over params, grads, m, v (N):
//
//	g = grad*gradScale; p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g
//	p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// The bias corrections are computed in float64 on the host, the per-element math in F.
func adamW[F Float](p *pool, params, grads, m, v []F, N int, h backend.AdamWParams) {
	params, grads, m, v = params[:N], grads[:N], m[:N], v[:N]
	b1, b2, eps := F(h.Beta1), F(h.Beta2), F(h.Eps)
	decay := F(h.LR) * F(h.WeightDecay)
	gradScale := F(h.GradScale)
	bc1 := 1 - math.Pow(float64(h.Beta1), float64(h.Step))
	bc2 := 1 - math.Pow(float64(h.Beta2), float64(h.Step))
	stepSize := F(float64(h.LR) / bc1)
	bc2Sqrt := F(math.Sqrt(bc2))
	p.parallelFor(N, 1<<13, func(lo, hi int) {
		w, gr, mm, vv := params[lo:hi], grads[lo:hi], m[lo:hi], v[lo:hi]
		gr, mm, vv = gr[:len(w)], mm[:len(w)], vv[:len(w)]
		for i, pi := range w {
			g := gr[i] * gradScale
			pi -= decay * pi
			mi := b1*mm[i] + (1-b1)*g
			vi := b2*vv[i] + (1-b2)*g*g
			mm[i], vv[i] = mi, vi
			denom := F(math.Sqrt(float64(vi)))/bc2Sqrt + eps
			w[i] = pi - stepSize*(mi/denom)
		}
	})
}

// sumSquaresChunks is how many partial sums SumSquares splits its input into; fixed so the
// summation order does not depend on the thread count.
const sumSquaresChunks = 64

// sumSquares returns the sum of x(N)^2 in float64: partial sums over sumSquaresChunks fixed
// ranges, added in order.
func sumSquares[F Float](p *pool, partials *[sumSquaresChunks]float64, x []F, N int) float64 {
	x = x[:N]
	p.parallelFor(sumSquaresChunks, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			var s float64
			for _, xi := range x[c*N/sumSquaresChunks : (c+1)*N/sumSquaresChunks] {
				s += float64(xi) * float64(xi)
			}
			partials[c] = s
		}
	})
	var total float64
	for _, s := range partials {
		total += s
	}
	return total
}
