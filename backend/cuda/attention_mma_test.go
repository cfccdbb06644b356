package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// The tensor-core attention kernels (attention_mma.cu: bf16 and fp16, and fp32 with TF32 products,
// at head size 64) match the CPU (its exact emulation of the 16-bit formats; fp32) and the
// fp32-FMA tiled kernels on the same inputs: causal and bidirectional, with and without padded
// sequences, at sequence lengths below, at and across the 64-row tiles, on flat and peaked
// softmaxes. They write every output element (the outputs start as noise) and give the same bits
// when run again.
//
// Bounds: 16-bit, tol16 (four units in the last place): the kernels also round p and dS to the
// format before their second products (as FlashAttention does), which adds at most half a unit
// to each term of a sum whose errors are independent, well under one unit of the result. TF32,
// 5e-3 on flat softmaxes only (scale 1): q and k rounded to a 10-bit mantissa move each score by
// about 1e-3 of its terms' magnitude, and exp turns that into a relative error of p; on peaked
// softmaxes (scale 4) the same rounding moves p by percents, as it does in any TF32 attention.
func TestAttentionTensorCores(t *testing.T) {
	g := gpu(t, false)
	if g.g.Info.Major < 8 {
		t.Skipf("tensor-core attention needs sm_80 or newer; this GPU is %s", g.g.Info.Arch())
	}
	for _, x := range []backend.DType{backend.BF16, backend.F16} {
		t.Run(x.String(), func(t *testing.T) { testAttentionTensorCores(t, g, x, []float64{1, 4}, tol16(x)) })
	}
	g.noTensorCores = false
	t.Run("tf32", func(t *testing.T) { testAttentionTensorCores(t, gpu(t, true), backend.F32, []float64{1}, 5e-3) })
}

func testAttentionTensorCores(t *testing.T, g *Backend, x backend.DType, scales []float64, tol float64) {
	if !g.useTensorCores(x, 64) {
		t.Fatalf("%v (TF32 %v) at head size 64 does not take the tensor-core kernels on %s", x, g.opts.TF32, g.g.Info.Arch())
	}
	r := &rig{t: t, cpu: cpu.New(0), gpu: g, rng: rand.New(rand.NewPCG(21, uint64(x)))}
	type shape struct{ B, T, NH int }
	const HS = 64
	for _, s := range []shape{{2, 1, 2}, {2, 37, 2}, {2, 64, 2}, {2, 130, 2}, {1, 300, 2}, {3, 200, 1}} {
		for _, mk := range attentionMaskKinds {
			for _, scale := range scales {
				B, T, NH, C := s.B, s.T, s.NH, s.NH*HS
				name := fmt.Sprintf("%v %s B=%d T=%d NH=%d scale=%g", x, mk.name, B, T, NH, scale)
				maskC, maskG := r.attentionMasks(mk.causal, mk.padded, B, T)
				qkv, dout := r.randAs(B*T*3*C, scale, x), r.randAs(B*T*C, 1, x)
				out, lse, dqkv := r.randAs(B*T*C, 1, x), r.rand(B*NH*T, 1), r.randAs(B*T*3*C, 1, x)

				g.noTensorCores = false
				r.cpu.AttentionForward(out.c, lse.c, qkv.c, B, T, C, NH, maskC)
				g.AttentionForward(out.g, lse.g, qkv.g, B, T, C, NH, maskG)
				r.check(name+" out", out, tol)
				r.check(name+" lse", lse, max(tol16(backend.F32), tol/10))
				r.cpu.AttentionBackward(dqkv.c, dout.c, qkv.c, out.c, lse.c, B, T, C, NH, maskC)
				g.AttentionBackward(dqkv.g, dout.g, qkv.g, out.g, lse.g, B, T, C, NH, maskG)
				r.check(name+" dqkv", dqkv, tol)
				tcOut, tcDqkv := download(r, out.g), download(r, dqkv.g)

				// Again, from noise: the same bits.
				g.Upload(out.g, r.rand(B*T*C, 1).host)
				g.Upload(dqkv.g, r.rand(B*T*3*C, 1).host)
				g.AttentionForward(out.g, lse.g, qkv.g, B, T, C, NH, maskG)
				g.AttentionBackward(dqkv.g, dout.g, qkv.g, out.g, lse.g, B, T, C, NH, maskG)
				sameBits(t, name+" out, run again", tcOut, download(r, out.g))
				sameBits(t, name+" dqkv, run again", tcDqkv, download(r, dqkv.g))

				// The fp32-FMA kernels on the same inputs.
				g.noTensorCores = true
				g.AttentionForward(out.g, lse.g, qkv.g, B, T, C, NH, maskG)
				g.AttentionBackward(dqkv.g, dout.g, qkv.g, out.g, lse.g, B, T, C, NH, maskG)
				near(t, name+" out vs fp32-FMA kernels", tcOut, download(r, out.g), tol)
				near(t, name+" dqkv vs fp32-FMA kernels", tcDqkv, download(r, dqkv.g), tol)
				g.noTensorCores = false
			}
		}
	}
}
