package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// randAs makes a tensor of n values uniform in [-scale, scale) stored as dt on both backends;
// Upload rounds them to dt the same way on both, so both ops read identical inputs.
func (r *rig) randAs(n int, scale float64, dt backend.DType) *pair {
	if dt == backend.F32 {
		return r.rand(n, scale)
	}
	p := &pair{host: make([]float32, n)}
	for i := range p.host {
		p.host[i] = float32((2*r.rng.Float64() - 1) * scale)
	}
	p.c, p.g = r.cpu.AllocDType(n, dt), r.gpu.AllocDType(n, dt)
	r.cpu.Upload(p.c, p.host)
	r.gpu.Upload(p.g, p.host)
	return p
}

// tol16 is the bound on the relative L2 difference of an output stored as dt. Both backends
// read the same 16-bit inputs, compute in fp32 (differing only in the order of their sums, some
// 1e-6 relative) and round once: an element then differs by at most one unit in the last place
// of dt (2 epsilon relative), and only where the fp32 values straddle a rounding boundary. Four
// epsilon (bf16 1.6e-2, fp16 2.0e-3) leaves room for the cancellations of a few elements; fp32
// outputs keep the fp32 bound, 1e-5 (attention's dqkv 1e-4, as in TestOpsMatchCPU).
func tol16(dt backend.DType) float64 {
	if dt == backend.F32 {
		return 1e-5
	}
	return 4 * dt.Epsilon()
}

// TestOps16MatchCPU runs every op with bf16 and with fp16 activations (and fp32 or 16-bit
// parameter gradients) on both backends and compares with the CPU's exact emulation of the
// formats (bounds: tol16).
func TestOps16MatchCPU(t *testing.T) {
	g := gpu(t, false)
	for _, x := range []backend.DType{backend.BF16, backend.F16} {
		if g.CheckDType(x) != nil {
			t.Logf("%v: not on this GPU", x)
			continue
		}
		for _, gd := range []backend.DType{backend.F32, x} {
			t.Run(fmt.Sprintf("%v/grads=%v", x, gd), func(t *testing.T) { testOps16(t, g, x, gd) })
		}
	}
}

func testOps16(t *testing.T, g *Backend, x, gd backend.DType) {
	r := &rig{t: t, cpu: cpu.New(0), gpu: g, rng: rand.New(rand.NewPCG(9, uint64(x)*10+uint64(gd)))}
	const B, T, C, NH, V, Vp = 3, 67, 96, 4, 1000, 1024
	N := B * T
	tx, tg, f32 := tol16(x), tol16(gd), tol16(backend.F32)

	tok := r.tokens(N, V)
	wte, wpe := r.randAs(Vp*C, 1, x), r.randAs(T*C, 1, x)
	enc := r.randAs(N*C, 1, x)
	r.cpu.EncoderForward(enc.c, tok.c, wte.c, wpe.c, B, T, C)
	g.EncoderForward(enc.g, tok.g, wte.g, wpe.g, B, T, C)
	r.check("EncoderForward", enc, tx)
	dout := r.randAs(N*C, 1, x)
	dwte, dwpe := r.randAs(Vp*C, 1, gd), r.randAs(T*C, 1, gd)
	r.cpu.EncoderBackward(dwte.c, dwpe.c, dout.c, tok.c, B, T, C)
	g.EncoderBackward(dwte.g, dwpe.g, dout.g, tok.g, B, T, C)
	r.check("EncoderBackward dwte", dwte, tg)
	r.check("EncoderBackward dwpe", dwpe, tg)

	in, w, bias := r.randAs(N*C, 2, x), r.randAs(C, 1, x), r.randAs(C, 1, x)
	out, mean, rstd := r.randAs(N*C, 1, x), r.rand(N, 1), r.rand(N, 1)
	r.cpu.LayerNormForward(out.c, mean.c, rstd.c, in.c, w.c, bias.c, N, C)
	g.LayerNormForward(out.g, mean.g, rstd.g, in.g, w.g, bias.g, N, C)
	r.check("LayerNormForward out", out, tx)
	r.check("LayerNormForward mean", mean, f32)
	r.check("LayerNormForward rstd", rstd, f32)
	dx, dw, db := r.randAs(N*C, 1, x), r.randAs(C, 1, gd), r.randAs(C, 1, gd)
	r.cpu.LayerNormBackward(dx.c, dw.c, db.c, dout.c, in.c, w.c, mean.c, rstd.c, N, C)
	g.LayerNormBackward(dx.g, dw.g, db.g, dout.g, in.g, w.g, mean.g, rstd.g, N, C)
	r.check("LayerNormBackward dinp", dx, tx)
	r.check("LayerNormBackward dweight", dw, tg)
	r.check("LayerNormBackward dbias", db, tg)

	a2, res := r.randAs(N*C, 1, x), r.randAs(N*C, 1, x)
	r.cpu.ResidualLayerNormForward(res.c, out.c, mean.c, rstd.c, in.c, a2.c, w.c, bias.c, N, C)
	g.ResidualLayerNormForward(res.g, out.g, mean.g, rstd.g, in.g, a2.g, w.g, bias.g, N, C)
	r.check("ResidualLayerNormForward residual", res, tx)
	r.check("ResidualLayerNormForward out", out, tx)
	r.check("ResidualLayerNormForward rstd", rstd, f32)

	const OC = 3 * C
	mw, mb, mo := r.randAs(OC*C, 0.2, x), r.randAs(OC, 1, x), r.randAs(N*OC, 1, x)
	r.cpu.MatmulForward(mo.c, in.c, mw.c, mb.c, N, C, OC)
	g.MatmulForward(mo.g, in.g, mw.g, mb.g, N, C, OC)
	r.check("MatmulForward", mo, tx)
	mdo, mdx, mdw, mdb := r.randAs(N*OC, 1, x), r.randAs(N*C, 1, x), r.randAs(OC*C, 1, gd), r.randAs(OC, 1, gd)
	r.cpu.MatmulBackward(mdx.c, mdw.c, mdb.c, mdo.c, in.c, mw.c, N, C, OC)
	g.MatmulBackward(mdx.g, mdw.g, mdb.g, mdo.g, in.g, mw.g, N, C, OC)
	r.check("MatmulBackward dinp", mdx, tx)
	r.check("MatmulBackward dweight", mdw, tg)
	r.check("MatmulBackward dbias", mdb, tg)

	// Head sizes 24 (no tiled kernel: the one-row kernels), 32, 48 and 16 (the tiled kernels,
	// which fp16 runs on V100/T4 take).
	for _, mode := range []string{"tiled", "two-lane", "naive"} {
		g.naiveAttention, g.noAttentionMM = mode == "naive", mode == "two-lane"
		for _, mk := range attentionMaskKinds {
			for _, NH := range []int{NH, 3, 2, 6} {
				name := fmt.Sprintf("%s %s HS=%d", mode, mk.name, C/NH)
				maskC, maskG := r.attentionMasks(mk.causal, mk.padded, B, T)
				qkv, att, lse := r.randAs(N*3*C, 1, x), r.randAs(N*C, 1, x), r.rand(B*NH*T, 1)
				r.cpu.AttentionForward(att.c, lse.c, qkv.c, B, T, C, NH, maskC)
				g.AttentionForward(att.g, lse.g, qkv.g, B, T, C, NH, maskG)
				r.check("AttentionForward out "+name, att, tx)
				r.check("AttentionForward lse "+name, lse, f32)
				dqkv := r.randAs(N*3*C, 1, x)
				r.cpu.AttentionBackward(dqkv.c, dout.c, qkv.c, att.c, lse.c, B, T, C, NH, maskC)
				g.AttentionBackward(dqkv.g, dout.g, qkv.g, att.g, lse.g, B, T, C, NH, maskG)
				r.check("AttentionBackward dqkv "+name, dqkv, tx)
			}
		}
	}
	g.naiveAttention, g.noAttentionMM = false, false

	maxT := T + 5
	kc, vc := r.randAs(B*maxT*C, 1, x), r.randAs(B*maxT*C, 1, x)
	cq, co := r.randAs(B*7*3*C, 1, x), r.randAs(B*7*C, 1, x)
	r.cpu.AttentionForwardCached(co.c, kc.c, vc.c, cq.c, B, 7, 0, maxT, C, NH)
	g.AttentionForwardCached(co.g, kc.g, vc.g, cq.g, B, 7, 0, maxT, C, NH)
	r.check("AttentionForwardCached out", co, tx)
	r.check("AttentionForwardCached kcache", kc, 0)

	h, hg, hd := r.randAs(N*4*C, 3, x), r.randAs(N*4*C, 1, x), r.randAs(N*4*C, 1, x)
	r.cpu.GeluForward(hg.c, h.c, N*4*C)
	g.GeluForward(hg.g, h.g, N*4*C)
	r.check("GeluForward", hg, tx)
	r.cpu.GeluBackward(hd.c, h.c, hg.c, N*4*C)
	g.GeluBackward(hd.g, h.g, hg.g, N*4*C)
	r.check("GeluBackward", hd, tx)
	r.cpu.GeluErfForward(hg.c, h.c, N*4*C)
	g.GeluErfForward(hg.g, h.g, N*4*C)
	r.check("GeluErfForward", hg, tx)
	r.cpu.GeluErfBackward(hd.c, h.c, hg.c, N*4*C)
	g.GeluErfBackward(hd.g, h.g, hg.g, N*4*C)
	r.check("GeluErfBackward", hd, tx)

	r.cpu.ResidualForward(res.c, in.c, a2.c, N*C)
	g.ResidualForward(res.g, in.g, a2.g, N*C)
	r.check("ResidualForward", res, tx)
	r.cpu.ResidualBackward(in.c, a2.c, res.c, N*C)
	g.ResidualBackward(in.g, a2.g, res.g, N*C)
	r.check("ResidualBackward da", in, tx)
	r.check("ResidualBackward db", a2, tx)

	logits, losses, clse := r.randAs(N*Vp, 4, x), r.rand(N, 1), r.rand(N, 1)
	tgt := r.tokens(N, V)
	r.cpu.CrossEntropyForward(losses.c, clse.c, logits.c, tgt.c, N, V, Vp)
	g.CrossEntropyForward(losses.g, clse.g, logits.g, tgt.g, N, V, Vp)
	r.check("CrossEntropyForward losses", losses, f32)
	r.check("CrossEntropyForward lse", clse, f32)
	r.cpu.CrossEntropyBackward(logits.c, logits.c, clse.c, tgt.c, 1/float32(N), N, V, Vp)
	g.CrossEntropyBackward(logits.g, logits.g, clse.g, tgt.g, 1/float32(N), N, V, Vp)
	r.check("CrossEntropyBackward (in place)", logits, tx)

	const P = 100_003
	pp, pg, pm, pv := r.rand(P, 1), r.randAs(P, 1, gd), r.rand(P, 0.1), r.rand(P, 0.1)
	for i := range pv.host { // second moments are never negative
		pv.host[i] = float32(math.Abs(float64(pv.host[i])))
	}
	r.cpu.Upload(pv.c, pv.host)
	g.Upload(pv.g, pv.host)
	for step := 1; step <= 3; step++ {
		h := backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 0.7, Step: step}
		r.cpu.AdamW(pp.c, pg.c, pm.c, pv.c, P, h)
		g.AdamW(pp.g, pg.g, pm.g, pv.g, P, h)
	}
	r.check("AdamW params", pp, f32)
	r.check("AdamW m", pm, f32)
	r.check("AdamW v", pv, f32)

	want, got := r.cpu.SumSquares(pg.c, P), g.SumSquares(pg.g, P)
	if d := math.Abs(got-want) / want; d > 1e-12 {
		t.Errorf("SumSquares: %v vs %v (rel %.1e)", got, want, d)
	}
}

// convertInputs are fp32 values for Convert: normal values at many scales, both formats'
// boundaries and fp16's subnormals, infinities, zeros and NaN.
func convertInputs(n int) []float32 {
	rng := rand.New(rand.NewPCG(5, 6))
	vals := []float32{0, float32(math.Copysign(0, -1)), 65504, 65519.99, 65520, -7e4, 0x1p-14, 0x1.ffcp-15, 0x1p-24, 0x1p-25,
		0x1.8p-25, 3e-9, float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, 0x1.fffep127, float32(math.NaN())}
	for len(vals) < n {
		vals = append(vals, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(50)-35))))
	}
	return vals
}

// Convert gives the CPU's bits exactly: fp32 to bf16 and fp16 rounded to nearest even (seed 0)
// and stochastically (three seeds), and back to fp32. Stochastic rounding draws
// backend.StochasticBits(seed, i) for element i on both backends, so it too is bit for bit;
// ConvertSeeded, the seed read on the device, gives Convert's bits.
func TestConvertMatchesCPUBits(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	const N = 300_007
	vals := convertInputs(N)
	srcC, srcG := c.Alloc(N), g.Alloc(N)
	c.Upload(srcC, vals)
	g.Upload(srcG, vals)
	for _, dt := range []backend.DType{backend.BF16, backend.F16} {
		dstC, dstG := c.AllocDType(N, dt), g.AllocDType(N, dt)
		for _, seed := range []uint64{0, 1, 0x9e3779b97f4a7c15, math.MaxUint64} {
			c.Convert(dstC, srcC, N, seed)
			g.Convert(dstG, srcG, N, seed)
			if err := g.Sync(); err != nil {
				t.Fatal(err)
			}
			want, got := make([]float32, N), make([]float32, N)
			c.Download(want, dstC)
			g.Download(got, dstG)
			for i := range want {
				if want[i] != want[i] && got[i] != got[i] {
					continue // NaN (the CPU keeps a NaN's payload, 16 bits cannot)
				}
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%v seed %#x: element %d (%v) is %v (%08x) on the GPU, %v (%08x) on the CPU", dt, seed, i, vals[i],
						got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
			// ConvertSeeded reads the same seed from the device, here from a view at an odd
			// element (4-byte aligned only).
			var seedHost [1 + backend.SeedLen]float32
			backend.PutBits64(seedHost[1:], seed)
			seedBuf, seeded := g.Alloc(len(seedHost)), g.AllocDType(N, dt)
			g.Upload(seedBuf, seedHost[:])
			g.ConvertSeeded(seeded, srcG, N, g.View(seedBuf, 1, backend.SeedLen))
			fromDevice := make([]float32, N)
			g.Download(fromDevice, seeded)
			for i := range got {
				if math.Float32bits(fromDevice[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%v seed %#x: ConvertSeeded gives element %d %v, Convert %v", dt, seed, i, fromDevice[i], got[i])
				}
			}
			// Widening back to fp32 is exact.
			back := g.Alloc(N)
			g.Convert(back, dstG, N, 0)
			wide := make([]float32, N)
			g.Download(wide, back)
			for i := range wide {
				if math.Float32bits(wide[i]) != math.Float32bits(got[i]) && !(wide[i] != wide[i] && got[i] != got[i]) {
					t.Fatalf("%v: element %d widens to %v, stored %v", dt, i, wide[i], got[i])
				}
			}
		}
	}
}
