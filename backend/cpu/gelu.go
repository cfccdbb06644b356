package cpu

import (
	"math"

	"github.com/gpt2go/gpt2go/backend"
)

// GeluForward: out(N) = gelu(inp(N)), tanh approximation.
func (be *Backend) GeluForward(out, inp backend.Buf, N int) {
	geluForward(&be.pool, Floats(out), Floats(inp), N)
}

// GeluBackward accumulates dinp(N) += gelu'(inp) * dout.
func (be *Backend) GeluBackward(dinp, inp, dout backend.Buf, N int) {
	geluBackward(&be.pool, Floats(dinp), Floats(inp), Floats(dout), N)
}

// geluScale is sqrt(2/pi).
var geluScale = math.Sqrt(2 / math.Pi)

// geluForward: out(N) = 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))) for x = inp(N).
// The tanh is evaluated in float64.
func geluForward[F Float](p *pool, out, inp []F, N int) {
	out, inp = out[:N], inp[:N]
	p.parallelFor(N, 4096, func(lo, hi int) {
		x, y := inp[lo:hi], out[lo:hi]
		for i, xi := range x {
			u := F(geluScale) * (xi + 0.044715*xi*xi*xi)
			y[i] = 0.5 * xi * (1 + F(math.Tanh(float64(u))))
		}
	})
}

// geluBackward accumulates dinp(N) += gelu'(x)*dout(N) for x = inp(N), where
// gelu'(x) = 0.5*(1+tanh(u)) + 0.5*x*(1-tanh(u)^2)*du/dx and u is the tanh argument above.
func geluBackward[F Float](p *pool, dinp, inp, dout []F, N int) {
	dinp, inp, dout = dinp[:N], inp[:N], dout[:N]
	p.parallelFor(N, 4096, func(lo, hi int) {
		x, dy, dx := inp[lo:hi], dout[lo:hi], dinp[lo:hi]
		for i, xi := range x {
			u := F(geluScale) * (xi + 0.044715*xi*xi*xi)
			th := F(math.Tanh(float64(u)))
			du := F(geluScale) * (1 + 3*0.044715*xi*xi)
			grad := 0.5*(1+th) + 0.5*xi*(1-th*th)*du
			dx[i] += grad * dy[i]
		}
	})
}
