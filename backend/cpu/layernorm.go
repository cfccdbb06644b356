package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// layernormEps is GPT-2's epsilon, added to the biased variance.
const layernormEps = 1e-5

// LayerNormForward normalises the N rows of inp(N,C); see backend.Ops.
func (be *Backend) LayerNormForward(out, mean, rstd, inp, weight, bias backend.Buf, N, C int) {
	layernormForward(&be.pool, Floats(out), Floats(mean), Floats(rstd), Floats(inp), Floats(weight), Floats(bias), N, C)
}

// LayerNormBackward accumulates into dinp(N,C), dweight(C) and dbias(C); see backend.Ops.
func (be *Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd backend.Buf, N, C int) {
	layernormBackward(&be.pool, Floats(dinp), Floats(dweight), Floats(dbias), Floats(dout), Floats(inp),
		Floats(weight), Floats(mean), Floats(rstd), N, C)
}

// layernormForward: out(N,C) = (inp(N,C) - mean) * rstd * weight(C) + bias(C) per row, saving
// mean(N) and rstd(N) = 1/sqrt(biased variance + eps).
func layernormForward[F Float](p *pool, out, mean, rstd, inp, weight, bias []F, N, C int) {
	weight, bias = weight[:C], bias[:C]
	p.parallelFor(N, 8, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x := inp[n*C : n*C+C]
			var sum F
			for _, xi := range x {
				sum += xi
			}
			m := sum / F(C)
			var sumSq F
			for _, xi := range x {
				d := xi - m
				sumSq += d * d
			}
			s := F(1 / math.Sqrt(float64(sumSq/F(C)+layernormEps)))
			y := out[n*C : n*C+C]
			for i, xi := range x {
				y[i] = (xi-m)*s*weight[i] + bias[i]
			}
			mean[n], rstd[n] = m, s
		}
	})
}

// layernormBackward accumulates into dinp(N,C), dweight(C) and dbias(C) given dout(N,C) and the
// forward's inp(N,C), weight(C), mean(N), rstd(N). dinp is computed row by row; dweight and dbias
// reduce over rows, so for them goroutines split the channels and each sums rows 0..N-1 in order.
func layernormBackward[F Float](p *pool, dinp, dweight, dbias, dout, inp, weight, mean, rstd []F, N, C int) {
	weight = weight[:C]
	p.parallelFor(N, 8, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			x := inp[n*C : n*C+C]
			dy := dout[n*C : n*C+C]
			dx := dinp[n*C : n*C+C]
			m, s := mean[n], rstd[n]
			// With xhat = (x-m)*s and g = dy*weight:
			// dx = s * (g - mean(g) - xhat*mean(g*xhat)).
			var sumG, sumGX F
			for i, xi := range x {
				g := dy[i] * weight[i]
				sumG += g
				sumGX += g * (xi - m) * s
			}
			meanG, meanGX := sumG/F(C), sumGX/F(C)
			for i, xi := range x {
				xhat := (xi - m) * s
				dx[i] += s * (dy[i]*weight[i] - meanG - xhat*meanGX)
			}
		}
	})
	p.parallelFor(C, 32, func(lo, hi int) {
		dw, db := dweight[lo:hi], dbias[lo:hi]
		for n := range N {
			x := inp[n*C+lo : n*C+hi]
			dy := dout[n*C+lo : n*C+hi]
			m, s := mean[n], rstd[n]
			for i, g := range dy {
				db[i] += g
				dw[i] += (x[i] - m) * s * g
			}
		}
	})
}
