package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
)

func TestAlignOf(t *testing.T) {
	for _, c := range []struct {
		p    uintptr
		want uint32
	}{{0, 256}, {0x7f0000000000, 256}, {0x7f0000000100, 256}, {0x7f0000000080, 128}, {0x7f00000000f0, 16},
		{0x7f0000000004, 4}, {0x7f0000000001, 1}} {
		if got := alignOf(c.p); got != c.want {
			t.Errorf("alignOf(%#x) = %d, want %d", c.p, got, c.want)
		}
	}
}

// Matmuls on views that are only 4-byte aligned (as the model's per-layer views are whenever C is
// not a multiple of 64) must pick algorithms that accept them.
func TestMatmulUnalignedViews(t *testing.T) {
	g := gpu(t, true)
	c := cpu.New(0)
	r := &rig{t: t, cpu: c, gpu: g, rng: rand.New(rand.NewPCG(3, 4))}
	const N, C, OC = 37, 60, 180
	view := func(p *pair, off, n int) *pair {
		return &pair{c: c.View(p.c, off, n), g: g.View(p.g, off, n)}
	}
	x, w, b := view(r.rand(N*C+1, 1), 1, N*C), view(r.rand(OC*C+3, 0.2), 3, OC*C), view(r.rand(OC+1, 1), 1, OC)
	out := view(r.rand(N*OC+5, 1), 5, N*OC)
	c.MatmulForward(out.c, x.c, w.c, b.c, N, C, OC)
	g.MatmulForward(out.g, x.g, w.g, b.g, N, C, OC)
	r.check("MatmulForward (unaligned)", out, 2e-3)
	// A fresh dout, the same on both sides: out differs between them by TF32's rounding.
	dout := view(r.rand(N*OC+5, 1), 5, N*OC)
	dx, dw, db := view(r.rand(N*C+2, 1), 2, N*C), view(r.rand(OC*C+1, 1), 1, OC*C), view(r.rand(OC+3, 1), 3, OC)
	c.MatmulBackward(dx.c, dw.c, db.c, dout.c, x.c, w.c, N, C, OC)
	g.MatmulBackward(dx.g, dw.g, db.g, dout.g, x.g, w.g, N, C, OC)
	r.check("MatmulBackward dinp (unaligned)", dx, 2e-3)
	r.check("MatmulBackward dweight (unaligned)", dw, 2e-3)
	r.check("MatmulBackward dbias (unaligned)", db, 1e-5)
}

// LayerNormBackward has a 16-byte path and a scalar one, for rows that are not 16-byte aligned.
func TestLayerNormBackwardPaths(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	r := &rig{t: t, cpu: c, gpu: g, rng: rand.New(rand.NewPCG(5, 8))}
	const N, C = 37, 64
	for _, off := range []int{0, 1} {
		view := func(p *pair, n int) *pair {
			return &pair{c: c.View(p.c, off, n), g: g.View(p.g, off, n)}
		}
		x, dout, w := view(r.rand(N*C+1, 2), N*C), view(r.rand(N*C+1, 1), N*C), view(r.rand(C+1, 1), C)
		out, mean, rstd, bias := r.rand(N*C, 1), r.rand(N, 1), r.rand(N, 1), r.rand(C, 1)
		c.LayerNormForward(out.c, mean.c, rstd.c, x.c, w.c, bias.c, N, C)
		g.LayerNormForward(out.g, mean.g, rstd.g, x.g, w.g, bias.g, N, C)
		dx, dw, db := view(r.rand(N*C+1, 1), N*C), r.rand(C, 1), r.rand(C, 1)
		c.LayerNormBackward(dx.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c, N, C)
		g.LayerNormBackward(dx.g, dw.g, db.g, dout.g, x.g, w.g, mean.g, rstd.g, N, C)
		name := fmt.Sprintf("offset %d", off)
		r.check(name+" dinp", dx, 1e-5)
		r.check(name+" dweight", dw, 1e-5)
		r.check(name+" dbias", db, 1e-5)
	}
}
