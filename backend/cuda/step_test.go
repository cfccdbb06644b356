package cuda

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// The optimizer step on the GPU (GradStats, AdamWAll), the vectorised elementwise kernels and
// the asynchronous copies back (async.go). GPU only: they skip without one.

func randomHost(seed uint64, n int, scale float64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

// GradStats: the bits of backend.StepStatsOf over backend.SumBlockSums of the GPU's own block
// sums (the definition, so a data-parallel run's host path agrees), the CPU's norm to 1e-12,
// and a NaN gradient flagged.
func TestGradStatsOnGPU(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	const block = 4096
	N := 300*block + 77 // 301 blocks: five groups of 64, the last one short
	host := randomHost(1, N, 1e-3)
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		xg, xc := g.AllocDType(N, dt), c.AllocDType(N, dt)
		g.Upload(xg, host)
		c.Upload(xc, host)
		sums := make([]float64, (N+block-1)/block)
		g.SumSquaresBlocks(sums, xg, N, block)
		stats, cstats := g.Alloc(backend.StepStatsLen), c.Alloc(backend.StepStatsLen)
		raw, craw := make([]float32, backend.StepStatsLen), make([]float32, backend.StepStatsLen)
		for _, k := range []struct{ clip, scale float64 }{{0, 1}, {1e-3, 1}, {1, 1024}} {
			g.GradStats(stats, xg, N, block, k.clip, k.scale)
			c.GradStats(cstats, xc, N, block, k.clip, k.scale)
			g.Download(raw, stats)
			c.Download(craw, cstats)
			got, want := backend.DecodeStepStats(raw), backend.StepStatsOf(backend.SumBlockSums(sums), k.clip, k.scale)
			if got != want {
				t.Errorf("%v clip %g scale %g: GPU %+v, its block sums give %+v", dt, k.clip, k.scale, got, want)
			}
			if cs := backend.DecodeStepStats(craw); math.Abs(got.Norm-cs.Norm) > 1e-12*cs.Norm || !got.Finite {
				t.Errorf("%v clip %g scale %g: GPU norm %.17g, CPU %.17g", dt, k.clip, k.scale, got.Norm, cs.Norm)
			}
		}
		host[N/3] = float32(math.Inf(1))
		g.Upload(xg, host)
		g.GradStats(stats, xg, N, block, 1, 1)
		g.Download(raw, stats)
		if got := backend.DecodeStepStats(raw); got.Finite || got.Scale != 0 {
			t.Errorf("%v with an inf: %+v, want not finite, scale 0", dt, got)
		}
		host[N/3] = 0
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}

// AdamWAll: each element the bits of per-tensor AdamW on the GPU (odd tensor lengths, so the
// 8-element groups straddle tensors; fp32 and bf16 gradients) and of the CPU's AdamWAll (both
// round each operation in one order), and nothing written when the stats say not finite.
func TestAdamWAllOnGPU(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	segs := []backend.AdamWSegment{{Len: 768 * 3, Decay: true}, {Len: 7}, {Len: 1}, {Len: 4099, Decay: true}, {Len: 768}, {Len: 13, Decay: true}}
	N := backend.SegmentsLen(segs)
	h := backend.AdamWParams{LR: 6e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 5}
	p0, g0, m0 := randomHost(2, N, 0.02), randomHost(3, N, 1e-2), randomHost(4, N, 1e-3)
	v0 := randomHost(5, N, 1e-3)
	for i := range v0 {
		v0[i] *= v0[i]
	}
	st := backend.StepStats{Norm: 2, Scale: 0.5, Finite: true}
	enc := make([]float32, backend.StepStatsLen)
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		// The step's scalars come from the step buffer only: AdamWAll gets h without them.
		stale := h
		stale.LR, stale.WeightDecay, stale.Step = 1, 0.5, 1
		load := func(be backend.Backend) (p, gr, m, v, stats, step backend.Buf) {
			p, gr, m, v, stats = be.Alloc(N), be.AllocDType(N, dt), be.Alloc(N), be.Alloc(N), be.Alloc(backend.StepStatsLen)
			be.Upload(p, p0)
			be.Upload(gr, g0)
			be.Upload(m, m0)
			be.Upload(v, v0)
			st.Encode(enc)
			be.Upload(stats, enc)
			step = be.Alloc(backend.AdamWStepLen)
			sc := make([]float32, backend.AdamWStepLen)
			h.EncodeStep(sc)
			be.Upload(step, sc)
			return
		}
		p, gr, m, v, stats, step := load(g)
		g.AdamWAll(p, gr, m, v, segs, stale, step, stats)
		wp, wg, wm, wv, _, _ := load(g)
		cp, cg, cm, cv, cstats, cstep := load(c)
		c.AdamWAll(cp, cg, cm, cv, segs, stale, cstep, cstats)
		hs := h
		hs.GradScale = st.Scale
		backend.AdamWEach(g, wp, wg, wm, wv, segs, hs)
		for _, b := range []struct {
			name          string
			got, want, cb backend.Buf
		}{{"params", p, wp, cp}, {"m", m, wm, cm}, {"v", v, wv, cv}} {
			got, want, ch := make([]float32, N), make([]float32, N), make([]float32, N)
			g.Download(got, b.got)
			g.Download(want, b.want)
			c.Download(ch, b.cb)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v %s[%d]: AdamWAll %v, per-tensor AdamW %v", dt, b.name, i, got[i], want[i])
				}
				if math.Float32bits(got[i]) != math.Float32bits(ch[i]) {
					t.Fatalf("%v %s[%d]: GPU %v, CPU %v", dt, b.name, i, got[i], ch[i])
				}
			}
		}
		backend.StepStats{Norm: math.NaN()}.Encode(enc)
		g.Upload(stats, enc)
		for _, b := range []struct {
			buf  backend.Buf
			host []float32
		}{{p, p0}, {m, m0}, {v, v0}} {
			g.Upload(b.buf, b.host)
		}
		g.AdamWAll(p, gr, m, v, segs, h, step, stats)
		for _, b := range []struct {
			name string
			buf  backend.Buf
			host []float32
		}{{"params", p, p0}, {"m", m, m0}, {"v", v, v0}} {
			got := make([]float32, N)
			g.Download(got, b.buf)
			for i := range got {
				if got[i] != b.host[i] {
					t.Fatalf("%v not finite: %s[%d] changed from %v to %v", dt, b.name, i, b.host[i], got[i])
				}
			}
		}
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}

// The elementwise kernels take 8 elements per thread with 16-byte accesses when every buffer
// is aligned: the same bits as one element at a time (the same values in views that start one
// element into their buffers, so not aligned), a ragged tail included, and close to the CPU.
func TestElementwiseVectorised(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	const N = 8*1000 + 5
	in := [][]float32{randomHost(6, N+1, 1), randomHost(7, N+1, 1), randomHost(8, N+1, 1)}
	ops := map[string]func(be backend.Backend, out, x, y, z backend.Buf){
		"GeluForward":     func(be backend.Backend, out, x, _, _ backend.Buf) { be.GeluForward(out, x, N) },
		"GeluBackward":    func(be backend.Backend, out, x, y, _ backend.Buf) { be.GeluBackward(out, x, y, N) },
		"GeluErfForward":  func(be backend.Backend, out, x, _, _ backend.Buf) { be.GeluErfForward(out, x, N) },
		"GeluErfBackward": func(be backend.Backend, out, x, y, _ backend.Buf) { be.GeluErfBackward(out, x, y, N) },
		"ResidualForward": func(be backend.Backend, out, x, y, _ backend.Buf) { be.ResidualForward(out, x, y, N) },
		"ResidualBackward": func(be backend.Backend, out, x, y, z backend.Buf) {
			be.ResidualBackward(z, y, x, N)
			be.ResidualForward(out, z, y, N)
		},
		"AdamW": func(be backend.Backend, out, x, y, _ backend.Buf) { // params out (zeros), grads x, m y, v zeros
			be.AdamW(out, x, y, be.Alloc(N), N, backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, GradScale: 1, Step: 2})
		},
	}
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		for name, op := range ops {
			odt := dt
			if name == "AdamW" {
				odt = backend.F32 // fp32 params and moments, 16-bit gradients
			}
			// run places in[i][skip:] at element off of fresh buffers and runs op on views of N.
			run := func(be backend.Backend, off, skip int) []float32 {
				bufs := make([]backend.Buf, 4)
				for i := range bufs {
					dti := odt
					if i == 1 {
						dti = dt
					}
					full := be.AllocDType(N+1, dti)
					if i > 0 {
						be.Upload(be.View(full, off, N), in[i-1][skip:skip+N])
					}
					bufs[i] = be.View(full, off, N)
				}
				if be == g && (ewVec(bufs...) == 1) != (off == 0) {
					t.Fatalf("%v %s: views at element %d take the 16-byte path: %v", dt, name, off, off == 0)
				}
				op(be, bufs[0], bufs[1], bufs[2], bufs[3])
				out := make([]float32, N)
				be.Download(out, bufs[0])
				return out
			}
			// GPU against CPU: the kernels round differently (GELU's tanh, say), and a 16-bit
			// output may then round a value either side of a midpoint: one ulp of the format.
			tol := map[backend.DType]float64{backend.F32: 2e-3, backend.BF16: 0x1p-7, backend.F16: 0x1p-10}[odt]
			vec, scalar, ref := run(g, 0, 1), run(g, 1, 1), run(c, 0, 1)
			for i := range vec {
				if math.Float32bits(vec[i]) != math.Float32bits(scalar[i]) {
					t.Fatalf("%v %s[%d]: 16-byte path %v, one at a time %v", dt, name, i, vec[i], scalar[i])
				}
				if d := math.Abs(float64(vec[i] - ref[i])); d > tol*math.Abs(float64(ref[i]))+1e-6 {
					t.Fatalf("%v %s[%d]: GPU %v, CPU %v", dt, name, i, vec[i], ref[i])
				}
			}
		}
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}

// DownloadAsync into page-locked memory, read after the fence: the values, and fences whose
// events are reused.
func TestAsyncDownload(t *testing.T) {
	if _, err := New(Options{}); err != nil && os.Getenv(requireGPUEnv) == "" {
		t.Skipf("no usable GPU: %v", err)
	}
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	const N = 1 << 20
	x := g.Alloc(N)
	dst := g.HostBuffer(N)
	for round := range 3 {
		host := randomHost(uint64(10+round), N, 1)
		g.Upload(x, host)
		g.ResidualForward(x, x, x, N) // queued work before the copy: x = 2*host
		g.DownloadAsync(dst, x)
		if err := g.Fence().Wait(); err != nil {
			t.Fatal(err)
		}
		for i := range dst {
			if dst[i] != 2*host[i] {
				t.Fatalf("round %d: dst[%d] = %v, want %v", round, i, dst[i], 2*host[i])
			}
		}
	}
	if len(g.events) != 1 {
		t.Errorf("%d events in the pool after three fences, want 1 (reused)", len(g.events))
	}
}
