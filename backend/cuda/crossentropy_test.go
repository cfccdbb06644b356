package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// The cross-entropy kernels on both of their paths (8 columns per 16-byte access when Vp is a
// multiple of 8 and the logits are 16-byte aligned, single columns otherwise) and in every
// format: the fused kernel gives the bits of the forward and the in-place backward, and all
// agree with the CPU.
func TestCrossEntropyPaths(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	r := &rig{t: t, cpu: c, gpu: g, rng: rand.New(rand.NewPCG(21, 22))}
	const N = 37
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		if g.CheckDType(dt) != nil {
			continue
		}
		for _, sh := range []struct {
			V, Vp, off int
			vec        bool
		}{{250, 256, 0, true}, {256, 256, 0, true}, {50, 52, 0, false}, {250, 256, 1, false}, {7, 8, 0, true}} {
			name := fmt.Sprintf("%v V=%d Vp=%d offset %d", dt, sh.V, sh.Vp, sh.off)
			base := r.randAs(N*sh.Vp+sh.off, 6, dt)
			logits := &pair{c: c.View(base.c, sh.off, N*sh.Vp), g: g.View(base.g, sh.off, N*sh.Vp)}
			if got := ceVec(sh.Vp, logits.g) == 1; got != sh.vec {
				t.Fatalf("%s: vec %v, want %v", name, got, sh.vec)
			}
			tgt := r.tokens(N, sh.V)
			losses, lse := r.rand(N, 1), r.rand(N, 1)
			// The pair on a copy of the logits, then the fused op on the logits themselves.
			copyBuf := g.AllocDType(N*sh.Vp+sh.off, dt)
			g.fail(g.g.DtoD(ptrOf(copyBuf), ptrOf(base.g), int64(N*sh.Vp+sh.off)*int64(dt.Bytes())))
			pairLogits := g.View(copyBuf, sh.off, N*sh.Vp)
			pl, ps := g.Alloc(N), g.Alloc(N)
			g.CrossEntropyForward(pl, ps, pairLogits, tgt.g, N, sh.V, sh.Vp)
			g.CrossEntropyBackward(pairLogits, pairLogits, ps, tgt.g, 1/float32(N), N, sh.V, sh.Vp)

			c.CrossEntropyFused(losses.c, lse.c, logits.c, tgt.c, 1/float32(N), N, sh.V, sh.Vp)
			g.CrossEntropyFused(losses.g, lse.g, logits.g, tgt.g, 1/float32(N), N, sh.V, sh.Vp)
			r.check(name+" losses", losses, tol16(backend.F32))
			r.check(name+" lse", lse, tol16(backend.F32))
			r.check(name+" dlogits", logits, tol16(dt))
			sameBits(t, name+" losses: fused vs forward", download(r, pl), download(r, losses.g))
			sameBits(t, name+" lse: fused vs forward", download(r, ps), download(r, lse.g))
			sameBits(t, name+" dlogits: fused vs backward", download(r, pairLogits), download(r, logits.g))
		}
	}
}

// BenchmarkClassifier times GPT-2's classifier at B*T = 16384 over 50304 padded columns: the
// forward and backward kernels one after the other against the fused kernel, in GB/s of the
// logits' bytes the pair moves (read twice, written once), so the two figures compare directly.
func BenchmarkClassifier(b *testing.B) {
	g, err := New(Options{})
	if err != nil {
		b.Skipf("no usable GPU: %v", err)
	}
	const N, V, Vp = 16384, 50257, 50304
	rng := rand.New(rand.NewPCG(3, 5))
	tokens := make([]int32, N)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(V))
	}
	tgt := g.AllocInt32(N)
	g.UploadInt32(tgt, tokens)
	losses, lse := g.Alloc(N), g.Alloc(N)
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		if g.CheckDType(dt) != nil {
			continue
		}
		// The logits: 64 random rows repeated, kept in src and copied in before every run (a run
		// leaves dlogits behind).
		const rows = 64
		vals := make([]float32, rows*Vp)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		src, logits := g.AllocDType(N*Vp, dt), g.AllocDType(N*Vp, dt)
		for off := 0; off < N; off += rows {
			g.Upload(g.View(src, off*Vp, rows*Vp), vals)
		}
		bytes := int64(N*Vp) * int64(dt.Bytes())
		for _, fused := range []bool{false, true} {
			name := dt.String() + map[bool]string{false: "/forward+backward", true: "/fused"}[fused]
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					g.fail(g.g.DtoD(ptrOf(logits), ptrOf(src), bytes))
					if err := g.Sync(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if fused {
						g.CrossEntropyFused(losses, lse, logits, tgt, 1.0/N, N, V, Vp)
					} else {
						g.CrossEntropyForward(losses, lse, logits, tgt, N, V, Vp)
						g.CrossEntropyBackward(logits, logits, lse, tgt, 1.0/N, N, V, Vp)
					}
					if err := g.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(3*float64(N*Vp*dt.Bytes())*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// MatchTargets flags the rows whose first largest real logit is the target, as the CPU's
// argmax picks it: bf16 logits of 64 levels make ties across threads and warps common, and half
// the targets are the first column of the row's maximum, half another column that has it too
// where there is one.
func TestMatchTargets(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	r := &rig{t: t, cpu: c, gpu: g, rng: rand.New(rand.NewPCG(23, 24))}
	const N, V, Vp = 300, 1000, 1008
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		if g.CheckDType(dt) != nil {
			continue
		}
		host := make([]float32, N*Vp)
		for i := range host {
			host[i] = float32(r.rng.IntN(64)) / 8
		}
		logits := &pair{host: host, c: c.AllocDType(N*Vp, dt), g: g.AllocDType(N*Vp, dt)}
		c.Upload(logits.c, host)
		g.Upload(logits.g, host)
		targets, want, ties := make([]int32, N), make([]float32, N), 0
		for i := range N {
			row := host[i*Vp : i*Vp+V]
			first, last := 0, 0
			for j, v := range row {
				if v > row[first] {
					first, last = j, j
				} else if v == row[first] {
					last = j
				}
			}
			targets[i] = int32(first)
			want[i] = 1
			if i%2 == 1 && last != first {
				targets[i], want[i] = int32(last), 0
				ties++
			}
		}
		tg, hits := g.AllocInt32(N), g.Alloc(N)
		g.UploadInt32(tg, targets)
		g.MatchTargets(hits, logits.g, tg, N, V, Vp)
		got := make([]float32, N)
		g.Download(got, hits)
		if g.err != nil {
			t.Fatal(g.err)
		}
		for i := range N {
			if got[i] != want[i] {
				t.Fatalf("%v row %d: hit %v, want %v (target %d)", dt, i, got[i], want[i], targets[i])
			}
		}
		if ties < N/4 {
			t.Fatalf("%v: only %d rows test a tie", dt, ties)
		}
	}
}
