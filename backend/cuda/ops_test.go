package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// Every kernel file has its list of kernel names. (TestEveryKernelCompiles checks each list against
// the kernels the compiled file defines: the names come from macros, one per storage format.)
func TestKernelNamesMatchSources(t *testing.T) {
	for _, f := range KernelFiles() {
		if len(kernelNames[f]) == 0 {
			t.Errorf("no kernel names for %s", f)
		}
	}
	if len(kernelNames) != len(KernelFiles()) {
		t.Errorf("kernelNames has %d files, %d embedded", len(kernelNames), len(KernelFiles()))
	}
}

// RequireGPUEnv makes GPU tests fail instead of skipping (set by scripts/gpu-check.sh).
const requireGPUEnv = "GPT2GO_REQUIRE_GPU"

// gpu returns a CUDA backend or skips the test, saying why.
func gpu(t *testing.T, tf32 bool) *Backend {
	t.Helper()
	be, err := New(Options{TF32: tf32, SyncEachOp: true})
	if err != nil {
		if os.Getenv(requireGPUEnv) != "" {
			t.Fatalf("%s is set but the CUDA backend did not start: %v", requireGPUEnv, err)
		}
		t.Skipf("no usable GPU, CUDA op tests skipped: %v", err)
	}
	return be
}

// pair holds the same tensor on the CPU and on the GPU.
type pair struct {
	host []float32
	ints []int32
	c, g backend.Buf
}

type rig struct {
	t   *testing.T
	cpu backend.Backend
	gpu *Backend
	rng *rand.Rand
}

// rand makes a tensor of n values uniform in [-scale, scale) (never zeros) on both backends.
func (r *rig) rand(n int, scale float64) *pair {
	p := &pair{host: make([]float32, n)}
	for i := range p.host {
		p.host[i] = float32((2*r.rng.Float64() - 1) * scale)
	}
	p.c, p.g = r.cpu.Alloc(n), r.gpu.Alloc(n)
	r.cpu.Upload(p.c, p.host)
	r.gpu.Upload(p.g, p.host)
	return p
}

func (r *rig) tokens(n, vocab int) *pair {
	p := &pair{ints: make([]int32, n)}
	for i := range p.ints {
		p.ints[i] = int32(r.rng.IntN(vocab))
	}
	p.c, p.g = r.cpu.AllocInt32(n), r.gpu.AllocInt32(n)
	r.cpu.UploadInt32(p.c, p.ints)
	r.gpu.UploadInt32(p.g, p.ints)
	return p
}

// check compares the GPU tensor with the CPU one by relative L2 error.
func (r *rig) check(name string, p *pair, tol float64) {
	r.t.Helper()
	if err := r.gpu.Sync(); err != nil {
		r.t.Fatalf("%s: %v", name, err)
	}
	n := p.c.Len()
	want, got := make([]float32, n), make([]float32, n)
	r.cpu.Download(want, p.c)
	r.gpu.Download(got, p.g)
	near(r.t, name, want, got, tol)
}

// download returns a GPU buffer's values, after waiting for the queue.
func download(r *rig, b backend.Buf) []float32 {
	r.t.Helper()
	if err := r.gpu.Sync(); err != nil {
		r.t.Fatal(err)
	}
	v := make([]float32, b.Len())
	r.gpu.Download(v, b)
	return v
}

func sameBits(t *testing.T, name string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: element %d is %v, then %v", name, i, a[i], b[i])
		}
	}
}

// near fails when got has a NaN or differs from want by more than tol in relative L2.
func near(t *testing.T, name string, want, got []float32, tol float64) {
	t.Helper()
	var num, den float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: NaN at %d", name, i)
		}
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	rel := math.Sqrt(num / max(den, 1e-30))
	if rel > tol {
		t.Errorf("%s: relative L2 error %.2e > %.0e", name, rel, tol)
	} else {
		t.Logf("%s: relative L2 error %.2e", name, rel)
	}
}

// TestOpsMatchCPU runs every op on random inputs on both backends (fp32: 1e-5 relative L2;
// TF32 matmuls: 2e-3, their 10-bit mantissa products).
func TestOpsMatchCPU(t *testing.T) {
	for _, tf32 := range []bool{false, true} {
		t.Run(fmt.Sprintf("tf32=%v", tf32), func(t *testing.T) {
			g := gpu(t, tf32)
			r := &rig{t: t, cpu: cpu.New(0), gpu: g, rng: rand.New(rand.NewPCG(7, uint64(len(t.Name()))))}
			const B, T, C, NH, V, Vp = 3, 67, 96, 4, 1000, 1024
			N := B * T
			tol, mmTol := 1e-5, 1e-5
			if tf32 {
				mmTol = 2e-3
			}

			tok := r.tokens(N, V)
			wte, wpe := r.rand(Vp*C, 1), r.rand(T*C, 1)
			enc := r.rand(N*C, 1)
			r.cpu.EncoderForward(enc.c, tok.c, wte.c, wpe.c, B, T, C)
			g.EncoderForward(enc.g, tok.g, wte.g, wpe.g, B, T, C)
			r.check("EncoderForward", enc, tol)
			dout := r.rand(N*C, 1)
			dwte, dwpe := r.rand(Vp*C, 1), r.rand(T*C, 1)
			r.cpu.EncoderBackward(dwte.c, dwpe.c, dout.c, tok.c, B, T, C)
			g.EncoderBackward(dwte.g, dwpe.g, dout.g, tok.g, B, T, C)
			r.check("EncoderBackward dwte", dwte, tol)
			r.check("EncoderBackward dwpe", dwpe, tol)

			x, w, bias := r.rand(N*C, 2), r.rand(C, 1), r.rand(C, 1)
			out, mean, rstd := r.rand(N*C, 1), r.rand(N, 1), r.rand(N, 1)
			r.cpu.LayerNormForward(out.c, mean.c, rstd.c, x.c, w.c, bias.c, N, C)
			g.LayerNormForward(out.g, mean.g, rstd.g, x.g, w.g, bias.g, N, C)
			r.check("LayerNormForward out", out, tol)
			r.check("LayerNormForward mean", mean, tol)
			r.check("LayerNormForward rstd", rstd, tol)
			dx, dw, db := r.rand(N*C, 1), r.rand(C, 1), r.rand(C, 1)
			r.cpu.LayerNormBackward(dx.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c, N, C)
			g.LayerNormBackward(dx.g, dw.g, db.g, dout.g, x.g, w.g, mean.g, rstd.g, N, C)
			r.check("LayerNormBackward dinp", dx, tol)
			r.check("LayerNormBackward dweight", dw, tol)
			r.check("LayerNormBackward dbias", db, tol)

			a2, res := r.rand(N*C, 1), r.rand(N*C, 1)
			r.cpu.ResidualLayerNormForward(res.c, out.c, mean.c, rstd.c, x.c, a2.c, w.c, bias.c, N, C)
			g.ResidualLayerNormForward(res.g, out.g, mean.g, rstd.g, x.g, a2.g, w.g, bias.g, N, C)
			r.check("ResidualLayerNormForward residual", res, tol)
			r.check("ResidualLayerNormForward out", out, tol)

			const OC = 3 * C
			mw, mb, mo := r.rand(OC*C, 0.2), r.rand(OC, 1), r.rand(N*OC, 1)
			r.cpu.MatmulForward(mo.c, x.c, mw.c, mb.c, N, C, OC)
			g.MatmulForward(mo.g, x.g, mw.g, mb.g, N, C, OC)
			r.check("MatmulForward", mo, mmTol)
			mdo, mdx, mdw, mdb := r.rand(N*OC, 1), r.rand(N*C, 1), r.rand(OC*C, 1), r.rand(OC, 1)
			r.cpu.MatmulBackward(mdx.c, mdw.c, mdb.c, mdo.c, x.c, mw.c, N, C, OC)
			g.MatmulBackward(mdx.g, mdw.g, mdb.g, mdo.g, x.g, mw.g, N, C, OC)
			r.check("MatmulBackward dinp", mdx, mmTol)
			r.check("MatmulBackward dweight", mdw, mmTol)
			r.check("MatmulBackward dbias", mdb, tol)

			qkv, att, lse := r.rand(N*3*C, 1), r.rand(N*C, 1), r.rand(B*NH*T, 1)
			r.cpu.AttentionForward(att.c, lse.c, qkv.c, B, T, C, NH, backend.AttentionMask{Causal: true})
			g.AttentionForward(att.g, lse.g, qkv.g, B, T, C, NH, backend.AttentionMask{Causal: true})
			r.check("AttentionForward out", att, tol)
			r.check("AttentionForward lse", lse, tol)
			dqkv := r.rand(N*3*C, 1)
			r.cpu.AttentionBackward(dqkv.c, dout.c, qkv.c, att.c, lse.c, B, T, C, NH, backend.AttentionMask{Causal: true})
			g.AttentionBackward(dqkv.g, dout.g, qkv.g, att.g, lse.g, B, T, C, NH, backend.AttentionMask{Causal: true})
			r.check("AttentionBackward dqkv", dqkv, 1e-4)

			h, hg := r.rand(N*4*C, 3), r.rand(N*4*C, 1)
			hd := r.rand(N*4*C, 1)
			r.cpu.GeluForward(hg.c, h.c, N*4*C)
			g.GeluForward(hg.g, h.g, N*4*C)
			r.check("GeluForward", hg, tol)
			r.cpu.GeluBackward(hd.c, h.c, hg.c, N*4*C)
			g.GeluBackward(hd.g, h.g, hg.g, N*4*C)
			r.check("GeluBackward", hd, tol)
			r.cpu.GeluErfForward(hg.c, h.c, N*4*C)
			g.GeluErfForward(hg.g, h.g, N*4*C)
			r.check("GeluErfForward", hg, tol)
			r.cpu.GeluErfBackward(hd.c, h.c, hg.c, N*4*C)
			g.GeluErfBackward(hd.g, h.g, hg.g, N*4*C)
			r.check("GeluErfBackward", hd, tol)

			r.cpu.ResidualForward(res.c, x.c, a2.c, N*C)
			g.ResidualForward(res.g, x.g, a2.g, N*C)
			r.check("ResidualForward", res, tol)
			r.cpu.ResidualBackward(x.c, a2.c, res.c, N*C)
			g.ResidualBackward(x.g, a2.g, res.g, N*C)
			r.check("ResidualBackward da", x, tol)
			r.check("ResidualBackward db", a2, tol)

			logits, losses, clse := r.rand(N*Vp, 4), r.rand(N, 1), r.rand(N, 1)
			tgt := r.tokens(N, V)
			r.cpu.CrossEntropyForward(losses.c, clse.c, logits.c, tgt.c, N, V, Vp)
			g.CrossEntropyForward(losses.g, clse.g, logits.g, tgt.g, N, V, Vp)
			r.check("CrossEntropyForward losses", losses, tol)
			r.check("CrossEntropyForward lse", clse, tol)
			r.cpu.CrossEntropyBackward(logits.c, logits.c, clse.c, tgt.c, 1/float32(N), N, V, Vp)
			g.CrossEntropyBackward(logits.g, logits.g, clse.g, tgt.g, 1/float32(N), N, V, Vp)
			r.check("CrossEntropyBackward (in place)", logits, tol)

			const P = 100_003
			pp, pg, pm, pv := r.rand(P, 1), r.rand(P, 1), r.rand(P, 0.1), r.rand(P, 0.1)
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
			r.check("AdamW params", pp, tol)
			r.check("AdamW m", pm, tol)
			r.check("AdamW v", pv, tol)

			want, got := r.cpu.SumSquares(pg.c, P), g.SumSquares(pg.g, P)
			if d := math.Abs(got-want) / want; d > 1e-12 {
				t.Errorf("SumSquares: %v vs %v (rel %.1e)", got, want, d)
			}
			if again := g.SumSquares(pg.g, P); again != got {
				t.Errorf("SumSquares is not deterministic: %v then %v", got, again)
			}
		})
	}
}

// The tiled attention kernels (head sizes 16, 32, 48, 64) and the one-row-per-block kernels (any
// head size) match the CPU on sequence lengths below, at and across the 64-row tiles, on flat and
// on peaked softmaxes, causal and bidirectional, with and without padded sequences (lengths 1, T
// and one between), write every output element, and give the same bits when run again.
func TestAttentionShapes(t *testing.T) {
	g := gpu(t, false)
	r := &rig{t: t, cpu: cpu.New(0), gpu: g, rng: rand.New(rand.NewPCG(11, 12))}
	type shape struct{ B, T, NH, HS int }
	var shapes []shape
	for _, hs := range []int{16, 24, 32, 48, 64} {
		for _, T := range []int{1, 37, 64, 130} {
			shapes = append(shapes, shape{2, T, 3, hs})
		}
	}
	shapes = append(shapes, shape{1, 300, 2, 64}, shape{1, 64, 1, 64}, shape{2, 200, 1, 64}, shape{3, 5, 1, 32})
	for _, mode := range []string{"tiled", "two-lane", "naive"} {
		g.naiveAttention, g.noAttentionMM = mode == "naive", mode == "two-lane"
		for _, s := range shapes {
			for _, mk := range attentionMaskKinds {
				for _, scale := range []float64{1, 4} {
					B, T, NH, C := s.B, s.T, s.NH, s.NH*s.HS
					name := fmt.Sprintf("%s %s B=%d T=%d NH=%d HS=%d scale=%g", mode, mk.name, B, T, NH, s.HS, scale)
					maskC, maskG := r.attentionMasks(mk.causal, mk.padded, B, T)
					qkv, out, lse := r.rand(B*T*3*C, scale), r.rand(B*T*C, 1), r.rand(B*NH*T, 1)
					if T == 37 && s.HS == 64 { // a view 4 bytes past alignment takes the one-row kernels
						q := r.rand(B*T*3*C+1, scale)
						qkv = &pair{c: r.cpu.View(q.c, 1, B*T*3*C), g: g.View(q.g, 1, B*T*3*C)}
					}
					r.cpu.AttentionForward(out.c, lse.c, qkv.c, B, T, C, NH, maskC)
					g.AttentionForward(out.g, lse.g, qkv.g, B, T, C, NH, maskG)
					r.check(name+" out", out, 1e-5)
					r.check(name+" lse", lse, 1e-5)
					dout, dqkv := r.rand(B*T*C, 1), r.rand(B*T*3*C, 1)
					r.cpu.AttentionBackward(dqkv.c, dout.c, qkv.c, out.c, lse.c, B, T, C, NH, maskC)
					g.AttentionBackward(dqkv.g, dout.g, qkv.g, out.g, lse.g, B, T, C, NH, maskG)
					r.check(name+" dqkv", dqkv, 1e-4)
					first := download(r, dqkv.g)
					g.Upload(dqkv.g, r.rand(B*T*3*C, 1).host) // poison, then again
					g.AttentionBackward(dqkv.g, dout.g, qkv.g, out.g, lse.g, B, T, C, NH, maskG)
					sameBits(t, name+" dqkv on the same inputs", first, download(r, dqkv.g))
				}
			}
		}
	}
}

// attentionMaskKinds are the masks TestAttentionShapes runs: GPT-2's, and an encoder's with and
// without padding, and a padded decoder's.
var attentionMaskKinds = []struct {
	name           string
	causal, padded bool
}{
	{"causal", true, false},
	{"bidirectional", false, false},
	{"bidirectional-padded", false, true},
	{"causal-padded", true, true},
}

// attentionMasks returns the mask on the CPU and on the GPU; padded, the B sequences have lengths
// 1, T, (T+1)/2, 1, T, ...
func (r *rig) attentionMasks(causal, padded bool, B, T int) (onCPU, onGPU backend.AttentionMask) {
	onCPU, onGPU = backend.AttentionMask{Causal: causal}, backend.AttentionMask{Causal: causal}
	if padded {
		lengths := make([]int32, B)
		for b := range lengths {
			lengths[b] = []int32{1, int32(T), int32(max(1, (T+1)/2))}[b%3]
		}
		onCPU.Lengths, onGPU.Lengths = r.cpu.AllocInt32(B), r.gpu.AllocInt32(B)
		r.cpu.UploadInt32(onCPU.Lengths, lengths)
		r.gpu.UploadInt32(onGPU.Lengths, lengths)
	}
	return onCPU, onGPU
}

// BenchmarkAttention times forward and backward at GPT-2 124M's shape (B=8 T=1024 NH=12 HS=64,
// causal) in each storage format and kernel family: fp32 tiled (head size 64 as matrix products),
// two-lane and one row per block; bf16 and fp16 on tensor cores (sm_80 and later) and on the
// fp32-FMA tiled kernels; fp32 with TF32 on tensor cores. TFLOP/s counts FlashAttention's FLOPs,
// so that the figures compare with its published ones: 4*HS per (query, key) pair forward
// (q k^T and p v), 10*HS backward (five products). gpt2go's backward does seven (dq and dkv each
// recompute s and dp).
func BenchmarkAttention(b *testing.B) {
	be, err := New(Options{})
	if err != nil {
		b.Skipf("no usable GPU: %v", err)
	}
	modes := map[backend.DType][]string{
		backend.F32:  {"tiled", "two-lane", "naive"},
		backend.BF16: {"tensor-core", "tiled"},
		backend.F16:  {"tensor-core", "tiled"},
	}
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		if be.CheckDType(dt) != nil {
			continue
		}
		for _, mode := range modes[dt] {
			if mode == "tensor-core" && !be.useTensorCores(dt, 64) {
				continue
			}
			benchAttention(b, be, dt, dt.String(), mode)
		}
	}
	be.naiveAttention, be.noAttentionMM, be.noTensorCores = false, false, false
	if tf, err := New(Options{TF32: true}); err == nil && tf.useTensorCores(backend.F32, 64) {
		benchAttention(b, tf, backend.F32, "tf32", "tensor-core")
	}
}

func benchAttention(b *testing.B, be *Backend, dt backend.DType, format, mode string) {
	const B, T, NH, HS = 8, 1024, 12, 64
	const C = NH * HS
	be.naiveAttention, be.noAttentionMM, be.noTensorCores = mode == "naive", mode == "two-lane", mode != "tensor-core"
	bufs := map[string]backend.Buf{}
	for name, n := range map[string]int{"qkv": B * T * 3 * C, "out": B * T * C, "lse": B * NH * T, "dout": B * T * C, "dqkv": B * T * 3 * C} {
		host := make([]float32, n)
		for i := range host {
			host[i] = float32(i%13)/13 - 0.5
		}
		if name == "lse" {
			bufs[name] = be.Alloc(n)
		} else {
			bufs[name] = be.AllocDType(n, dt)
		}
		be.Upload(bufs[name], host)
	}
	pairs := float64(B*NH) * float64(T) * float64(T+1) / 2
	mask := backend.AttentionMask{Causal: true}
	b.Run(fmt.Sprintf("forward/%s/%s", format, mode), func(b *testing.B) {
		for b.Loop() {
			be.AttentionForward(bufs["out"], bufs["lse"], bufs["qkv"], B, T, C, NH, mask)
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(pairs*4*HS*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
	})
	b.Run(fmt.Sprintf("backward/%s/%s", format, mode), func(b *testing.B) {
		for b.Loop() {
			be.AttentionBackward(bufs["dqkv"], bufs["dout"], bufs["qkv"], bufs["out"], bufs["lse"], B, T, C, NH, mask)
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(pairs*10*HS*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
	})
}

// The GELUs and their gradients stay accurate in the negative tail, where 1 + tanh(u) and
// 1 + erf(x/sqrt(2)) lose every digit (the kernels use x*sigmoid(2u) and erfc): on x in [-12, 12]
// every value within 1e-4 of the float64 formula, relative to its terms' magnitudes (or 1e-30).
// The CPU backend, whose float32 kernels use the same forms, is checked first, so the reference
// and the tolerance are tried here too; then the GPU.
func TestGeluTails(t *testing.T) {
	const N = 2401
	xs := make([]float32, N)
	for i := range xs {
		xs[i] = float32(-12 + 0.01*float64(i))
	}
	ones := make([]float32, N)
	for i := range ones {
		ones[i] = 1
	}
	// Each reference returns the value and the sum of its terms' magnitudes, the scale of the
	// rounding errors (the gradients cross zero near x = -0.75, where the value alone is not).
	sqrt2pi := math.Sqrt(2 / math.Pi)
	ref := map[string]func(x float64) (want, mag float64){
		"GeluForward": func(x float64) (float64, float64) {
			v := x / (1 + math.Exp(-2*sqrt2pi*(x+0.044715*x*x*x)))
			return v, math.Abs(v)
		},
		"GeluBackward": func(x float64) (float64, float64) {
			e := math.Exp(-2 * sqrt2pi * (x + 0.044715*x*x*x))
			s := 1 / (1 + e)
			d := x * (e * s) * s * 2 * sqrt2pi * (1 + 3*0.044715*x*x)
			return s + d, s + math.Abs(d)
		},
		"GeluErfForward": func(x float64) (float64, float64) {
			v := 0.5 * x * math.Erfc(-x/math.Sqrt2)
			return v, math.Abs(v)
		},
		"GeluErfBackward": func(x float64) (float64, float64) {
			cdf, d := 0.5*math.Erfc(-x/math.Sqrt2), x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
			return cdf + d, cdf + math.Abs(d)
		},
	}
	run := map[string]func(be backend.Backend, out, x, dout backend.Buf){
		"GeluForward":     func(be backend.Backend, out, x, _ backend.Buf) { be.GeluForward(out, x, N) },
		"GeluBackward":    func(be backend.Backend, out, x, dout backend.Buf) { be.GeluBackward(out, x, dout, N) },
		"GeluErfForward":  func(be backend.Backend, out, x, _ backend.Buf) { be.GeluErfForward(out, x, N) },
		"GeluErfBackward": func(be backend.Backend, out, x, dout backend.Buf) { be.GeluErfBackward(out, x, dout, N) },
	}
	check := func(be backend.Backend, where string) {
		for name, op := range run {
			x, dout, out := be.Alloc(N), be.Alloc(N), be.Alloc(N)
			be.Upload(x, xs)
			be.Upload(dout, ones)
			op(be, out, x, dout)
			got := make([]float32, N)
			be.Download(got, out)
			if err := be.Sync(); err != nil {
				t.Fatal(err)
			}
			for i, xi := range xs {
				want, mag := ref[name](float64(xi))
				if d := math.Abs(float64(got[i]) - want); !(d <= 1e-4*mag+1e-30) {
					t.Errorf("%s %s(%v) = %v, want %v", where, name, xi, got[i], want)
					break
				}
			}
		}
	}
	check(cpu.New(0), "CPU")
	check(gpu(t, false), "GPU")
}
