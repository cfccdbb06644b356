package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// attentionShapes for the tests: the small odd shape and one long enough to span several query
// and key blocks, with the causal diagonal crossing blocks at different offsets.
var attentionShapes = []struct{ B, T, C, NH int }{
	{tB, tT, tC, tNH},
	{1, 2*attnKeyBlock + 7, 8, 2},
}

// attentionReference computes out(B,T,C) and lse(B,NH,T) naively: all scores of a query, softmax
// with the maximum subtracted, weighted sum of values.
func attentionReference(qkv []float64, B, T, C, NH int) (out, lse []float64) {
	return maskedAttentionReference(qkv, B, T, C, NH, causalMask)
}

// maskedAttentionReference is attentionReference under any mask: query t of sequence b sees the
// keys t2 < len[b], and only t2 <= t when causal.
func maskedAttentionReference(qkv []float64, B, T, C, NH int, mask attentionMask) (out, lse []float64) {
	HS := C / NH
	out, lse = make([]float64, B*T*C), make([]float64, B*NH*T)
	at := func(b, t, part, h, i int) float64 { return qkv[(b*T+t)*3*C+part*C+h*HS+i] }
	for b := range B {
		for h := range NH {
			for t := range T {
				seen := T
				if mask.lengths != nil {
					seen = int(mask.lengths[b])
				}
				if mask.causal {
					seen = min(seen, t+1)
				}
				scores := make([]float64, seen)
				maxScore := math.Inf(-1)
				for t2 := range scores {
					for i := range HS {
						scores[t2] += at(b, t, 0, h, i) * at(b, t2, 1, h, i)
					}
					scores[t2] /= math.Sqrt(float64(HS))
					maxScore = max(maxScore, scores[t2])
				}
				var sum float64
				for _, s := range scores {
					sum += math.Exp(s - maxScore)
				}
				lse[(b*NH+h)*T+t] = maxScore + math.Log(sum)
				for t2, s := range scores {
					p := math.Exp(s-maxScore) / sum
					for i := range HS {
						out[(b*T+t)*C+h*HS+i] += p * at(b, t2, 2, h, i)
					}
				}
			}
		}
	}
	return out, lse
}

func TestAttentionForward(t *testing.T) {
	for _, s := range attentionShapes {
		t.Run(fmt.Sprintf("B=%d,T=%d,C=%d,NH=%d", s.B, s.T, s.C, s.NH), func(t *testing.T) {
			r := newRand(7)
			qkv := randoms[float64](r, s.B*s.T*3*s.C)
			// Outputs start as garbage: the op must overwrite them.
			out, lse := randoms[float64](r, s.B*s.T*s.C), randoms[float64](r, s.B*s.NH*s.T)
			attentionForward(testPool, out, lse, qkv, s.B, s.T, s.C, s.NH, causalMask)
			wantOut, wantLse := attentionReference(qkv, s.B, s.T, s.C, s.NH)
			checkClose(t, "out", out, wantOut, 1e-12)
			checkClose(t, "lse", lse, wantLse, 1e-12)
		})
	}
}

func TestAttentionBackward(t *testing.T) {
	for _, s := range attentionShapes {
		t.Run(fmt.Sprintf("B=%d,T=%d,C=%d,NH=%d", s.B, s.T, s.C, s.NH), func(t *testing.T) {
			r := newRand(8)
			B, T, C, NH := s.B, s.T, s.C, s.NH
			qkv := randoms[float64](r, B*T*3*C)
			R := randoms[float64](r, B*T*C)
			out, lse := make([]float64, B*T*C), make([]float64, B*NH*T)
			loss := func() float64 {
				attentionForward(testPool, out, lse, qkv, B, T, C, NH, causalMask)
				return dot(out, R)
			}
			loss()
			dqkv0 := randoms[float64](r, len(qkv))
			dqkv := clone(dqkv0)
			attentionBackward(testPool, dqkv, R, qkv, out, lse, B, T, C, NH, causalMask)
			checkGrad(t, "dqkv", qkv, dqkv, loss) // overwritten: its random start must not show
		})
	}
}

// TestAttentionFloat32 runs the float32 path at a GPT-2 head size against the float64 path, with
// the assembly kernels (where the CPU has them) and with the portable loops, and checks that one
// thread gives the same bits as three.
func TestAttentionFloat32(t *testing.T) {
	defer func(saved bool) { useVecKernels = saved }(useVecKernels)
	for _, accelerated := range []bool{useVecKernels, false} {
		useVecKernels = accelerated
		t.Run(fmt.Sprintf("accelerated=%v", accelerated), testAttentionFloat32)
	}
}

func testAttentionFloat32(t *testing.T) {
	checkAttentionFloat32(t, newRand(9), 2, 2*attnKeyBlock+9, 128, 2, causalMask)
}

// checkAttentionFloat32 runs float32 attention forward and backward with mask on random inputs,
// with outputs that start as garbage, against the float64 path, and requires one thread to give the
// bits of testPool's three.
func checkAttentionFloat32(t *testing.T, r *rand.Rand, B, T, C, NH int, mask attentionMask) {
	t.Helper()
	qkv64, dout64 := randoms[float64](r, B*T*3*C), randoms[float64](r, B*T*C)
	dqkv0 := randoms[float64](r, B*T*3*C) // garbage that the op must overwrite
	out64, lse64, dqkv64 := make([]float64, B*T*C), make([]float64, B*NH*T), clone(dqkv0)
	attentionForward(testPool, out64, lse64, qkv64, B, T, C, NH, mask)
	attentionBackward(testPool, dqkv64, dout64, qkv64, out64, lse64, B, T, C, NH, mask)

	qkv, dout := to32(qkv64), to32(dout64)
	out, lse, dqkv := to32(randoms[float64](r, B*T*C)), make([]float32, B*NH*T), to32(dqkv0)
	attentionForward(testPool, out, lse, qkv, B, T, C, NH, mask)
	attentionBackward(testPool, dqkv, dout, qkv, out, lse, B, T, C, NH, mask)
	checkClose(t, "out", out, to32(out64), 1e-5)
	checkClose(t, "lse", lse, to32(lse64), 1e-5)
	checkClose(t, "dqkv", dqkv, to32(dqkv64), 1e-4)

	one := &pool{threads: 1}
	out1, lse1, dqkv1 := make([]float32, B*T*C), make([]float32, B*NH*T), to32(dqkv0)
	attentionForward(one, out1, lse1, qkv, B, T, C, NH, mask)
	attentionBackward(one, dqkv1, dout, qkv, out1, lse1, B, T, C, NH, mask)
	checkClose(t, "out with 1 thread", out1, out, 0)
	checkClose(t, "lse with 1 thread", lse1, lse, 0)
	checkClose(t, "dqkv with 1 thread", dqkv1, dqkv, 0)
}

// TestAttentionPropagatesNaN: a NaN in a query must reach that query's output (the trainer stops
// on a NaN loss), in float32 on the kernels the model uses.
func TestAttentionPropagatesNaN(t *testing.T) {
	const B, T, C, NH = 1, 5, 16, 2
	qkv := randoms[float32](newRand(10), B*T*3*C)
	qkv[2*3*C] = float32(math.NaN()) // query 2, head 0
	out, lse := make([]float32, B*T*C), make([]float32, B*NH*T)
	attentionForward(testPool, out, lse, qkv, B, T, C, NH, causalMask)
	for i, v := range out[2*C : 2*C+C/NH] {
		if !math.IsNaN(float64(v)) {
			t.Errorf("out[2, head 0][%d] = %g, want NaN", i, v)
		}
	}
	if !math.IsNaN(float64(lse[2])) {
		t.Errorf("lse[head 0, 2] = %g, want NaN", lse[2])
	}
	if math.IsNaN(float64(out[3*C])) {
		t.Error("the NaN leaked into query 3")
	}
}

// TestAttentionShortFloat32 runs float32 attention on sequences short enough for the whole-block
// path (attention_amd64.go, where the CPU has the kernels) against the float64 path, including
// lengths that leave partial 6-row and 16-column tiles, and checks that one thread gives the same
// bits as three.
func TestAttentionShortFloat32(t *testing.T) {
	for _, s := range []struct{ B, T, C, NH int }{{2, 64, 128, 4}, {1, 37, 64, 4}, {3, 1, 32, 1}, {1, 128, 128, 2}, {2, 23, 96, 2}} {
		t.Run(fmt.Sprintf("B=%d,T=%d,C=%d,NH=%d", s.B, s.T, s.C, s.NH), func(t *testing.T) {
			checkAttentionFloat32(t, newRand(11), s.B, s.T, s.C, s.NH, causalMask)
		})
	}
}

// BenchmarkAttentionShortPaths compares the whole-block path with the flash path at nanoGPT's
// char-level shape.
func BenchmarkAttentionShortPaths(b *testing.B) {
	defer func(saved bool) { useSmallAttention = saved }(useSmallAttention)
	for _, small := range []bool{true, false} {
		useSmallAttention = small
		b.Run(fmt.Sprintf("small=%v", small), BenchmarkAttention)
	}
}
