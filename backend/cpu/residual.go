package cpu

import "github.com/gpt2go/gpt2go/backend"

// ResidualForward: out(N) = a(N) + b(N).
func (be *Backend) ResidualForward(out, a, b backend.Buf, N int) {
	residualForward(&be.pool, Floats(out), Floats(a), Floats(b), N)
}

// ResidualBackward accumulates da(N) += dout and db(N) += dout.
func (be *Backend) ResidualBackward(da, db, dout backend.Buf, N int) {
	residualBackward(&be.pool, Floats(da), Floats(db), Floats(dout), N)
}

// residualForward: out(N) = a(N) + b(N).
func residualForward[F Float](p *pool, out, a, b []F, N int) {
	out, a, b = out[:N], a[:N], b[:N]
	p.parallelFor(N, 1<<14, func(lo, hi int) {
		y, x1, x2 := out[lo:hi], a[lo:hi], b[lo:hi]
		x1, x2 = x1[:len(y)], x2[:len(y)]
		for i := range y {
			y[i] = x1[i] + x2[i]
		}
	})
}

// residualBackward: da(N) += dout(N), db(N) += dout(N).
func residualBackward[F Float](p *pool, da, db, dout []F, N int) {
	da, db, dout = da[:N], db[:N], dout[:N]
	p.parallelFor(N, 1<<14, func(lo, hi int) {
		d, g1, g2 := dout[lo:hi], da[lo:hi], db[lo:hi]
		g1, g2 = g1[:len(d)], g2[:len(d)]
		for i, g := range d {
			g1[i] += g
			g2[i] += g
		}
	})
}
