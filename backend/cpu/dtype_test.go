package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// The 16-bit ops are the float32 ops with each output rounded once, where it is stored. Given the
// same inputs (values representable in the format, as 16-bit buffers only ever hold), every
// element an op stores in a bf16 or fp16 buffer must therefore be exactly dt.Round of what the same
// op stores in a float32 buffer. That is the format's own bound and nothing more: an error of at
// most half a unit in the last place, |y16 - y32| <= u*|y32| with u = 2^-8 for bf16 and 2^-11 for
// fp16 in the normal range, at most 2^-25 in fp16's subnormal range (|y| < 2^-14), and +-Inf in fp16
// beyond 65504 (65520 and up). The tests check the exact equality, which implies the bound, and the
// bound itself as a second statement of it.

// twin holds an fp32 buffer and a buffer of format dt with the same contents.
type twin struct {
	ref, low backend.Buf
}

// newTwin uploads vals, rounded to dt, into an fp32 buffer and a dt buffer.
func newTwin(be *Backend, dt backend.DType, vals []float32) twin {
	rounded := make([]float32, len(vals))
	for i, v := range vals {
		rounded[i] = dt.Round(v)
	}
	tw := twin{ref: be.Alloc(len(vals)), low: be.AllocDType(len(vals), dt)}
	be.Upload(tw.ref, rounded)
	be.Upload(tw.low, rounded)
	return tw
}

// checkRoundedOnce requires low == dt.Round(ref) element by element, bit for bit, and the
// format's error bound between them.
func checkRoundedOnce(t *testing.T, name string, dt backend.DType, tw twin) {
	t.Helper()
	ref, low := Floats(tw.ref), Floats(tw.low)
	u := dt.Epsilon()
	for i := range ref {
		want := dt.Round(ref[i])
		if math.Float32bits(low[i]) != math.Float32bits(want) && !(low[i] != low[i] && want != want) {
			t.Fatalf("%s %v: element %d = %g, want the fp32 op's %g rounded once = %g", name, dt, i, low[i], ref[i], want)
		}
		y, err := math.Abs(float64(ref[i])), math.Abs(float64(low[i])-float64(ref[i]))
		bound := u * y
		if dt == backend.F16 && y < 0x1p-14 {
			bound = 0x1p-25
		}
		if dt == backend.F16 && y >= 65520 {
			continue // overflowed to Inf, checked by the equality above
		}
		if err > bound {
			t.Fatalf("%s %v: element %d: |%g - %g| = %g exceeds the format's bound %g", name, dt, i, low[i], ref[i], err, bound)
		}
	}
}

// randVals returns n normal random values times scale.
func randVals(seed uint64, n int, scale float64) []float32 {
	r := newRand(seed)
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * scale)
	}
	return out
}

var dtypes16 = []backend.DType{backend.BF16, backend.F16}

// Every op, with every float input and output in dt except the fp32 statistics of the model's
// plan (LayerNorm mean and rstd, the log-sum-exps, the losses): each dt output is the fp32 op's
// output rounded once. Gradients that ops accumulate into start non-zero, so the accumulation
// (read, add in fp32, round on store) is covered too.
func TestOps16BitAreFP32RoundedOnce(t *testing.T) {
	be := New(3)
	defer be.Close()
	const B, T, C, NH, Vp, V = 2, 37, 32, 2, 72, 65
	const N = B * T
	for _, dt := range dtypes16 {
		t.Run(dt.String(), func(t *testing.T) {
			seed := uint64(1)
			tw := func(n int, scale float64) twin { seed++; return newTwin(be, dt, randVals(seed, n, scale)) }
			f32 := func(n int, scale float64) twin { seed++; return newTwin(be, backend.F32, randVals(seed, n, scale)) }
			tokens := be.AllocInt32(N)
			be.UploadInt32(tokens, randTokens(newRand(9), N, V))

			// Encoder.
			wte, wpe, enc := tw(Vp*C, 0.5), tw(T*C, 0.5), tw(N*C, 0)
			be.EncoderForward(enc.ref, tokens, wte.ref, wpe.ref, B, T, C)
			be.EncoderForward(enc.low, tokens, wte.low, wpe.low, B, T, C)
			checkRoundedOnce(t, "EncoderForward out", dt, enc)
			dwte, dwpe, dout := tw(Vp*C, 0.01), tw(T*C, 0.01), tw(N*C, 1)
			be.EncoderBackward(dwte.ref, dwpe.ref, dout.ref, tokens, B, T, C)
			be.EncoderBackward(dwte.low, dwpe.low, dout.low, tokens, B, T, C)
			checkRoundedOnce(t, "EncoderBackward dwte", dt, dwte)
			checkRoundedOnce(t, "EncoderBackward dwpe", dt, dwpe)

			// LayerNorm, plain and fused with the residual add.
			inp, w, b := tw(N*C, 3), tw(C, 1), tw(C, 1)
			out, mean, rstd := tw(N*C, 0), f32(N, 0), f32(N, 0)
			be.LayerNormForward(out.ref, mean.ref, rstd.ref, inp.ref, w.ref, b.ref, N, C)
			be.LayerNormForward(out.low, mean.low, rstd.low, inp.low, w.low, b.low, N, C)
			checkRoundedOnce(t, "LayerNormForward out", dt, out)
			checkRoundedOnce(t, "LayerNormForward mean", backend.F32, mean)
			checkRoundedOnce(t, "LayerNormForward rstd", backend.F32, rstd)
			dinp, dw, db, dy := tw(N*C, 0.1), tw(C, 0.1), tw(C, 0.1), tw(N*C, 1)
			be.LayerNormBackward(dinp.ref, dw.ref, db.ref, dy.ref, inp.ref, w.ref, mean.ref, rstd.ref, N, C)
			be.LayerNormBackward(dinp.low, dw.low, db.low, dy.low, inp.low, w.low, mean.low, rstd.low, N, C)
			checkRoundedOnce(t, "LayerNormBackward dinp", dt, dinp)
			checkRoundedOnce(t, "LayerNormBackward dweight", dt, dw)
			checkRoundedOnce(t, "LayerNormBackward dbias", dt, db)

			// The fused op stores a 16-bit residual, and normalises the stored (rounded) values:
			// its fp32 reference is the residual add, rounded, then LayerNorm.
			a, bb, res := tw(N*C, 1), tw(N*C, 1), tw(N*C, 0)
			be.ResidualLayerNormForward(res.low, out.low, mean.low, rstd.low, a.low, bb.low, w.low, b.low, N, C)
			be.ResidualForward(res.ref, a.ref, bb.ref, N*C)
			checkRoundedOnce(t, "ResidualLayerNormForward residual", dt, res)
			rounded := newTwin(be, dt, Floats(res.low))
			be.LayerNormForward(out.ref, mean.ref, rstd.ref, rounded.ref, w.ref, b.ref, N, C)
			checkRoundedOnce(t, "ResidualLayerNormForward out", dt, out)
			if !equalBits(Floats(mean.ref), Floats(mean.low)) || !equalBits(Floats(rstd.ref), Floats(rstd.low)) {
				t.Errorf("ResidualLayerNormForward %v: the statistics are not those of the rounded residual", dt)
			}

			// Matmul with bias, and its backward (dinp overwritten, dweight and dbias accumulated).
			const OC = 48
			x, wt, bias, y := tw(N*C, 1), tw(OC*C, 0.2), tw(OC, 0.2), tw(N*OC, 0)
			be.MatmulForward(y.ref, x.ref, wt.ref, bias.ref, N, C, OC)
			be.MatmulForward(y.low, x.low, wt.low, bias.low, N, C, OC)
			checkRoundedOnce(t, "MatmulForward out", dt, y)
			dx, dwt, dbias, dyy := tw(N*C, 0), tw(OC*C, 0.1), tw(OC, 0.1), tw(N*OC, 1)
			be.MatmulBackward(dx.ref, dwt.ref, dbias.ref, dyy.ref, x.ref, wt.ref, N, C, OC)
			be.MatmulBackward(dx.low, dwt.low, dbias.low, dyy.low, x.low, wt.low, N, C, OC)
			checkRoundedOnce(t, "MatmulBackward dinp", dt, dx)
			checkRoundedOnce(t, "MatmulBackward dweight", dt, dwt)
			checkRoundedOnce(t, "MatmulBackward dbias", dt, dbias)

			// Attention (flash path at this T; the short-sequence path is covered below).
			for _, TT := range []int{T, 8} {
				qkv, att, lse := tw(B*TT*3*C, 1), tw(B*TT*C, 0), f32(B*NH*TT, 0)
				be.AttentionForward(att.ref, lse.ref, qkv.ref, B, TT, C, NH, backend.AttentionMask{Causal: true})
				be.AttentionForward(att.low, lse.low, qkv.low, B, TT, C, NH, backend.AttentionMask{Causal: true})
				checkRoundedOnce(t, fmt.Sprintf("AttentionForward T=%d out", TT), dt, att)
				checkRoundedOnce(t, fmt.Sprintf("AttentionForward T=%d lse", TT), backend.F32, lse)
				// The backward reads the stored (rounded) output, on both sides.
				attOut := newTwin(be, dt, Floats(att.low))
				dqkv, datt := tw(B*TT*3*C, 0), tw(B*TT*C, 1)
				be.AttentionBackward(dqkv.ref, datt.ref, qkv.ref, attOut.ref, lse.ref, B, TT, C, NH, backend.AttentionMask{Causal: true})
				be.AttentionBackward(dqkv.low, datt.low, qkv.low, attOut.low, lse.low, B, TT, C, NH, backend.AttentionMask{Causal: true})
				checkRoundedOnce(t, fmt.Sprintf("AttentionBackward T=%d dqkv", TT), dt, dqkv)
			}

			// GELU and the residual add.
			g, gy := tw(N*C, 2), tw(N*C, 0)
			be.GeluForward(gy.ref, g.ref, N*C)
			be.GeluForward(gy.low, g.low, N*C)
			checkRoundedOnce(t, "GeluForward out", dt, gy)
			gdx, gdy := tw(N*C, 0), tw(N*C, 1)
			be.GeluBackward(gdx.ref, g.ref, gdy.ref, N*C)
			be.GeluBackward(gdx.low, g.low, gdy.low, N*C)
			checkRoundedOnce(t, "GeluBackward dinp", dt, gdx)
			be.GeluErfForward(gy.ref, g.ref, N*C)
			be.GeluErfForward(gy.low, g.low, N*C)
			checkRoundedOnce(t, "GeluErfForward out", dt, gy)
			be.GeluErfBackward(gdx.ref, g.ref, gdy.ref, N*C)
			be.GeluErfBackward(gdx.low, g.low, gdy.low, N*C)
			checkRoundedOnce(t, "GeluErfBackward dinp", dt, gdx)
			ra, rb, ro := tw(N*C, 1), tw(N*C, 1e-3), tw(N*C, 0)
			be.ResidualForward(ro.ref, ra.ref, rb.ref, N*C)
			be.ResidualForward(ro.low, ra.low, rb.low, N*C)
			checkRoundedOnce(t, "ResidualForward out", dt, ro)
			da, dbb := tw(N*C, 1), tw(N*C, 1e-3)
			be.ResidualBackward(da.ref, dbb.ref, ra.ref, N*C)
			be.ResidualBackward(da.low, dbb.low, ra.low, N*C)
			checkRoundedOnce(t, "ResidualBackward da", dt, da)
			checkRoundedOnce(t, "ResidualBackward db", dt, dbb)

			// Cross-entropy: 16-bit logits, fp32 lse and losses; the backward overwrites the
			// logits with dlogits (the model's in-place use).
			logits, losses, clse := tw(N*Vp, 3), f32(N, 0), f32(N, 0)
			targets := be.AllocInt32(N)
			be.UploadInt32(targets, randTokens(newRand(10), N, V))
			be.CrossEntropyForward(losses.ref, clse.ref, logits.ref, targets, N, V, Vp)
			be.CrossEntropyForward(losses.low, clse.low, logits.low, targets, N, V, Vp)
			checkRoundedOnce(t, "CrossEntropyForward losses", backend.F32, losses)
			checkRoundedOnce(t, "CrossEntropyForward lse", backend.F32, clse)
			be.CrossEntropyBackward(logits.ref, logits.ref, clse.ref, targets, 1.0/N, N, V, Vp)
			be.CrossEntropyBackward(logits.low, logits.low, clse.low, targets, 1.0/N, N, V, Vp)
			checkRoundedOnce(t, "CrossEntropyBackward dlogits", dt, logits)

			// Convert, the 16-bit parameter copy: round to nearest even.
			master := f32(N*C, 0.02)
			cp := tw(N*C, 0)
			be.Convert(cp.low, master.ref, N*C, 0)
			be.Convert(cp.ref, master.ref, N*C, 0)
			checkRoundedOnce(t, "Convert", dt, cp)
		})
	}
}

func equalBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// fp16's range: a residual add whose fp32 sum passes 65504 stores +-Inf, one that underflows
// stores fp16 subnormals (multiples of 2^-24) exactly.
func TestF16RangeInOps(t *testing.T) {
	be := New(2)
	defer be.Close()
	a := newTwin(be, backend.F16, []float32{60000, -60000, 65504, 0x1p-20, 3 * 0x1p-25, 1})
	b := newTwin(be, backend.F16, []float32{10000, -5520, 0x1p-1, 0x1p-22, 0, 0})
	out := newTwin(be, backend.F16, make([]float32, 6))
	be.ResidualForward(out.low, a.low, b.low, 6)
	want := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), 65504, 0x1.4p-20, 0x1p-23, 1}
	if got := Floats(out.low); !equalBits(got, want) {
		t.Errorf("fp16 residual = %v, want %v", got, want)
	}
}

// The end-to-end bound of a matmul in a 16-bit format: with inputs a, w rounded to dt (relative
// error <= u each) and the output rounded once, |y16 - y| <= (2u + u^2 + gamma) * sum|a||w| + u|y|
// per element, where gamma = C*2^-24 covers fp32 accumulation over C terms. Checked against the
// float64 product of the unrounded inputs.
func TestMatmul16BitBound(t *testing.T) {
	be := New(2)
	defer be.Close()
	const N, C, OC = 33, 96, 40
	av, wv := randVals(3, N*C, 1), randVals(4, OC*C, 0.3)
	for _, dt := range dtypes16 {
		a, w, y := newTwin(be, dt, av), newTwin(be, dt, wv), newTwin(be, dt, make([]float32, N*OC))
		be.MatmulForward(y.low, a.low, w.low, nil, N, C, OC)
		u := dt.Epsilon()
		got := Floats(y.low)
		for n := range N {
			for o := range OC {
				var exact, abs float64
				for c := range C {
					p := float64(av[n*C+c]) * float64(wv[o*C+c])
					exact += p
					abs += math.Abs(p)
				}
				bound := (2*u+u*u+C*0x1p-24)*abs + u*math.Abs(exact)
				if e := math.Abs(float64(got[n*OC+o]) - exact); e > bound {
					t.Fatalf("%v: y[%d,%d] = %g, exact %g: error %g exceeds the bound %g", dt, n, o, got[n*OC+o], exact, e, bound)
				}
			}
		}
	}
}

// Stochastic Convert depends only on the seed and the index: the same bits for any thread count,
// different bits for another seed, and every value one of the two neighbours. ConvertSeeded,
// with the seed in a buffer, gives Convert's bits.
func TestConvertStochastic(t *testing.T) {
	vals := randVals(5, 100000, 0.02)
	var first []float32
	for _, threads := range []int{1, 3} {
		be := New(threads)
		src, dst := be.Alloc(len(vals)), be.AllocDType(len(vals), backend.BF16)
		be.Upload(src, vals)
		be.Convert(dst, src, len(vals), 42)
		got := append([]float32(nil), Floats(dst)...)
		for i, v := range got {
			if backend.RoundBF16(v) != v || math.Abs(float64(v-vals[i])) > 2*backend.BF16.Epsilon()*math.Abs(float64(vals[i])) {
				t.Fatalf("element %d: %g rounded stochastically to %g", i, vals[i], v)
			}
		}
		if first == nil {
			first = got
		} else if !equalBits(first, got) {
			t.Error("stochastic Convert depends on the thread count")
		}
		be.Convert(dst, src, len(vals), 43)
		if equalBits(first, Floats(dst)) {
			t.Error("stochastic Convert ignores its seed")
		}
		// ConvertSeeded reads seed 42 from a buffer (a view, as the trainer passes).
		seed := be.Alloc(1 + backend.SeedLen)
		backend.PutBits64(Floats(seed)[1:], 42)
		be.ConvertSeeded(dst, src, len(vals), be.View(seed, 1, backend.SeedLen))
		if !equalBits(first, Floats(dst)) {
			t.Error("ConvertSeeded does not read the seed Convert was given")
		}
		be.Close()
	}
}

// A 16-bit View keeps its format; Upload rounds.
func TestDTypeBuffers(t *testing.T) {
	be := New(1)
	b := be.AllocDType(4, backend.F16)
	v := be.View(b, 1, 2)
	if b.DType() != backend.F16 || v.DType() != backend.F16 || be.Alloc(1).DType() != backend.F32 || be.AllocInt32(1).DType() != backend.I32 {
		t.Fatal("buffers report the wrong formats")
	}
	be.Upload(v, []float32{1 + 0x1p-12, 70000})
	if got := Floats(b); got[1] != 1 || !math.IsInf(float64(got[2]), 1) {
		t.Errorf("Upload into fp16 stored %v", got)
	}
}

func BenchmarkRound16(b *testing.B) {
	be := New(1)
	defer be.Close()
	for _, dt := range dtypes16 {
		b.Run(dt.String(), func(b *testing.B) {
			buf := be.AllocDType(1<<16, dt)
			copy(Floats(buf), randVals(1, 1<<16, 1))
			b.SetBytes(4 << 16)
			for b.Loop() {
				be.round(buf, 1<<16)
			}
		})
	}
}

// Words is a 16-bit buffer's float32 array as an fp32 buffer: the same elements, written through.
func TestWords(t *testing.T) {
	be := New(1)
	b := be.AllocDType(5, backend.BF16)
	be.Upload(b, []float32{1, 2, 3, 4, 5})
	w := be.Words(b)
	if w.DType() != backend.F32 || w.Len() != 5 || !slices.Equal(Floats(w), Floats(b)) {
		t.Fatalf("words %v %d %v", w.DType(), w.Len(), Floats(w))
	}
	Floats(w)[2] = 9
	if Floats(b)[2] != 9 {
		t.Error("writing the words did not write the buffer")
	}
}
