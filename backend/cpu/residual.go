package cpu

import "github.com/gpt2go/gpt2go/backend"

// ResidualForward: out(N) = a(N) + b(N).
func (be *Backend) ResidualForward(out, a, b backend.Buf, N int) {
	residualForward(&be.pool, Floats(out), Floats(a), Floats(b), N)
	be.round(out, N)
}

// ResidualBackward accumulates da(N) += dout and db(N) += dout.
func (be *Backend) ResidualBackward(da, db, dout backend.Buf, N int) {
	residualBackward(&be.pool, Floats(da), Floats(db), Floats(dout), N)
	be.round(da, N)
	be.round(db, N)
}

// residualForward: out(N) = a(N) + b(N).
func residualForward[F Float](p *pool, out, a, b []F, N int) {
	job := reuse[residualForwardJob[F]](p)
	*job = residualForwardJob[F]{out: out[:N], a: a[:N], b: b[:N]}
	p.forRanges(N, 1<<14, job)
	*job = residualForwardJob[F]{}
}

type residualForwardJob[F Float] struct{ out, a, b []F }

func (job *residualForwardJob[F]) runRange(lo, hi int) {
	add(job.out[lo:hi], job.a[lo:hi], job.b[lo:hi])
}

// add sets y[i] = a[i] + b[i] (add32, AVX2 where available, for float32); y may be a or b.
func add[F Float](y, a, b []F) {
	if a32, ok := any(a).([]float32); ok {
		add32(any(y).([]float32), a32, any(b).([]float32))
		return
	}
	y, b = y[:len(a)], b[:len(a)]
	for i := range a {
		y[i] = a[i] + b[i]
	}
}

// residualBackward: da(N) += dout(N), db(N) += dout(N).
func residualBackward[F Float](p *pool, da, db, dout []F, N int) {
	job := reuse[residualBackwardJob[F]](p)
	*job = residualBackwardJob[F]{da: da[:N], db: db[:N], dout: dout[:N]}
	p.forRanges(N, 1<<14, job)
	*job = residualBackwardJob[F]{}
}

type residualBackwardJob[F Float] struct{ da, db, dout []F }

func (job *residualBackwardJob[F]) runRange(lo, hi int) {
	d, g1, g2 := job.dout[lo:hi], job.da[lo:hi], job.db[lo:hi]
	g1, g2 = g1[:len(d)], g2[:len(d)]
	for i, g := range d {
		g1[i] += g
		g2[i] += g
	}
}
