package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// The MLP's matmul+GELU pairs with cuBLASLt's GELU epilogues (GELU_AUX_BIAS forward, DGELU
// backward) agree with the CPU's separate ops in every format, and ran fused in the 16-bit
// formats (a plan with the epilogue exists afterwards) and unfused in fp32 (MatmulGeluForward
// says why). The bound is the format's tol16: the epilogue takes gelu of the unrounded product,
// one rounding fewer than the CPU's composition.
func TestGeluFusion(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	r := &rig{t: t, cpu: c, gpu: g, rng: rand.New(rand.NewPCG(31, 32))}
	const N, C, OC = 70, 64, 256
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		if g.CheckDType(dt) != nil {
			continue
		}
		r.checkMLPGelu(dt.String(), dt, N, C, OC)

		fused := map[GeluEpilogue]bool{}
		for k := range g.blas.plans {
			if k.AB == dt {
				fused[k.Gelu] = true
			}
		}
		want := dt != backend.F32
		if fused[GeluForward] != want || fused[GeluBackward] != want {
			t.Errorf("%v: fused forward %v, backward %v; want %v", dt, fused[GeluForward], fused[GeluBackward], want)
		}
	}
	// A leading dimension that is not a multiple of 8 runs unfused, with the same results.
	const OC2 = 60
	inp, w, b := r.rand(N*C, 1), r.rand(OC2*C, 0.2), r.rand(OC2, 0.5)
	out, pre := r.rand(N*OC2, 1), r.rand(N*OC2, 1)
	c.MatmulGeluForward(out.c, pre.c, inp.c, w.c, b.c, N, C, OC2)
	g.MatmulGeluForward(out.g, pre.g, inp.g, w.g, b.g, N, C, OC2)
	r.check(fmt.Sprintf("unfused OC=%d out", OC2), out, tol16(backend.F32))
}

// Where cuBLASLt has no bias or GELU epilogue for a product (some alignments, some library
// builds), the ops fall back to plain products: the bias broadcast into the output and the
// product accumulated onto it, the GELU as its own kernel. Blas.noEpilogues makes every
// epilogue missing; the results must still be the CPU's, with the backend unharmed.
func TestMatmulEpilogueFallbacks(t *testing.T) {
	g := gpu(t, false)
	g.blas.noEpilogues = true
	c := cpu.New(0)
	r := &rig{t: t, cpu: c, gpu: g, rng: rand.New(rand.NewPCG(41, 42))}
	const N, C, OC = 37, 64, 96
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		if g.CheckDType(dt) != nil {
			continue
		}
		name := dt.String() + " without epilogues"
		inp, w, b := r.randAs(N*C, 1, dt), r.randAs(OC*C, 0.2, dt), r.randAs(OC, 0.5, dt)
		out := r.randAs(N*OC, 1, dt)
		c.MatmulForward(out.c, inp.c, w.c, b.c, N, C, OC)
		g.MatmulForward(out.g, inp.g, w.g, b.g, N, C, OC)
		r.check(name+" MatmulForward (bias)", out, tol16(dt))
		r.checkMLPGelu(name, dt, N, C, OC)
		if err := g.err; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for k := range g.blas.plans {
		if k.Bias || k.Gelu != NoGelu {
			t.Errorf("a plan with an epilogue was made: %v", k)
		}
	}
}

// checkMLPGelu runs the MLP's matmul+GELU pair on random operands in format dt on both backends
// and compares them: MatmulGeluForward (N,C) -> (N,OC) and, for a second matmul (N,OC) -> (N,C),
// MatmulBackwardGelu through the GELU, within the format's tol16 (the epilogue rounds once less
// than the CPU's composition).
func (r *rig) checkMLPGelu(name string, dt backend.DType, N, C, OC int) {
	c, g := r.cpu, r.gpu
	inp, w, b := r.randAs(N*C, 1, dt), r.randAs(OC*C, 0.2, dt), r.randAs(OC, 0.5, dt)
	out, pre := r.randAs(N*OC, 1, dt), r.randAs(N*OC, 1, dt)
	c.MatmulGeluForward(out.c, pre.c, inp.c, w.c, b.c, N, C, OC)
	g.MatmulGeluForward(out.g, pre.g, inp.g, w.g, b.g, N, C, OC)
	r.check(name+" MatmulGeluForward pre", pre, tol16(dt))
	r.check(name+" MatmulGeluForward out", out, tol16(dt))
	w2, dout := r.randAs(C*OC, 0.2, dt), r.randAs(N*C, 1, dt)
	dinp, dw, db := r.randAs(N*OC, 1, dt), r.rand(C*OC, 1), r.rand(C, 1)
	c.MatmulBackwardGelu(dinp.c, dw.c, db.c, dout.c, out.c, w2.c, pre.c, N, OC, C)
	g.MatmulBackwardGelu(dinp.g, dw.g, db.g, dout.g, out.g, w2.g, pre.g, N, OC, C)
	r.check(name+" MatmulBackwardGelu dinp", dinp, 2*tol16(dt))
	r.check(name+" MatmulBackwardGelu dweight", dw, tol16(dt))
	r.check(name+" MatmulBackwardGelu dbias", db, tol16(dt))
}
