package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// The masks of an encoder (bidirectional, with and without padding) and of a padded decoder, on
// top of the causal tests in attention_test.go. lengths gives B sequence lengths as functions of
// T, so every shape gets a sequence of length 1, one of length T and one in between.

// maskCases are the masks tested for a batch of B = 3 sequences of T tokens.
func maskCases(T int) []struct {
	name string
	mask attentionMask
} {
	padded := []int32{1, int32(T), int32(max(1, (T+1)/2))}
	return []struct {
		name string
		mask attentionMask
	}{
		{"bidirectional", attentionMask{}},
		{"bidirectional,padded", attentionMask{lengths: padded}},
		{"causal,padded", attentionMask{causal: true, lengths: padded}},
	}
}

// maskedShapes: odd lengths across the key and query blocks and the whole-block path's limit,
// head sizes 16 to 64.
var maskedShapes = []struct{ T, C, NH int }{
	{1, 32, 2}, {5, 48, 3}, {37, 64, 1}, {130, 64, 4}, {200, 96, 2},
}

func TestAttentionMaskedForward(t *testing.T) {
	const B = 3
	for _, s := range maskedShapes {
		for _, m := range maskCases(s.T) {
			t.Run(fmt.Sprintf("T=%d,C=%d,NH=%d,%s", s.T, s.C, s.NH, m.name), func(t *testing.T) {
				r := newRand(21)
				qkv := randoms[float64](r, B*s.T*3*s.C)
				out, lse := randoms[float64](r, B*s.T*s.C), randoms[float64](r, B*s.NH*s.T)
				attentionForward(testPool, out, lse, qkv, B, s.T, s.C, s.NH, m.mask)
				wantOut, wantLse := maskedAttentionReference(qkv, B, s.T, s.C, s.NH, m.mask)
				checkClose(t, "out", out, wantOut, 1e-12)
				checkClose(t, "lse", lse, wantLse, 1e-12)
			})
		}
	}
}

// TestAttentionMaskedBackward checks dqkv by finite differences, padded keys' zero gradient
// included, on shapes small enough to difference every input: one inside a key block, one
// across two (T = 70).
func TestAttentionMaskedBackward(t *testing.T) {
	const B = 3
	for _, s := range []struct{ T, C, NH int }{{5, 32, 2}, {70, 8, 2}} {
		for _, m := range maskCases(s.T) {
			t.Run(fmt.Sprintf("T=%d,C=%d,NH=%d,%s", s.T, s.C, s.NH, m.name), func(t *testing.T) {
				r := newRand(22)
				T, C, NH := s.T, s.C, s.NH
				qkv := randoms[float64](r, B*T*3*C)
				R := randoms[float64](r, B*T*C)
				out, lse := make([]float64, B*T*C), make([]float64, B*NH*T)
				loss := func() float64 {
					attentionForward(testPool, out, lse, qkv, B, T, C, NH, m.mask)
					return dot(out, R)
				}
				loss()
				dqkv := randoms[float64](r, len(qkv)) // overwritten: its random start must not show
				attentionBackward(testPool, dqkv, R, qkv, out, lse, B, T, C, NH, m.mask)
				checkGrad(t, "dqkv", qkv, dqkv, loss)
			})
		}
	}
}

// TestAttentionMaskedFloat32 runs float32 attention under each mask, on the whole-block path
// (T <= 128, where the CPU has the kernels) and the flash path, against the float64 path, and
// requires one thread to give the bits of three.
func TestAttentionMaskedFloat32(t *testing.T) {
	const B = 3
	for _, s := range maskedShapes {
		for _, m := range maskCases(s.T) {
			t.Run(fmt.Sprintf("T=%d,C=%d,NH=%d,%s", s.T, s.C, s.NH, m.name), func(t *testing.T) {
				checkAttentionFloat32(t, newRand(23), B, s.T, s.C, s.NH, m.mask)
			})
		}
	}
}

// TestAttentionMaskedBackend runs the op through the Backend with a lengths buffer, in float32
// and in the 16-bit formats (outputs rounded to their buffers' format), against the float64
// reference; padded keys' dk and dv must be exactly zero in every format.
func TestAttentionMaskedBackend(t *testing.T) {
	const B, T, C, NH = 3, 37, 64, 2
	lengths := []int32{1, T, 20}
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		t.Run(dt.String(), func(t *testing.T) {
			be := New(3)
			r := newRand(24)
			qkv64, dout64 := randoms[float64](r, B*T*3*C), randoms[float64](r, B*T*C)
			mask := attentionMask{lengths: lengths}
			want, _ := maskedAttentionReference(qkv64, B, T, C, NH, mask)
			up := func(x []float64) backend.Buf {
				b := be.AllocDType(len(x), dt)
				be.Upload(b, to32(x))
				return b
			}
			qkv, dout := up(qkv64), up(dout64)
			out, lse, dqkv := be.AllocDType(B*T*C, dt), be.Alloc(B*NH*T), up(randoms[float64](r, B*T*3*C))
			lens := be.AllocInt32(B)
			be.UploadInt32(lens, lengths)
			m := backend.AttentionMask{Lengths: lens}
			be.AttentionForward(out, lse, qkv, B, T, C, NH, m)
			be.AttentionBackward(dqkv, dout, qkv, out, lse, B, T, C, NH, m)
			got := make([]float32, B*T*C)
			be.Download(got, out)
			tol := 1e-5
			if dt != backend.F32 {
				tol = 3e-2
			}
			checkClose(t, "out", got, to32(want), tol)
			grads := make([]float32, B*T*3*C)
			be.Download(grads, dqkv)
			for b, n := range lengths {
				for tt := int(n); tt < T; tt++ {
					for c := C; c < 3*C; c++ { // dk and dv of a padded key
						if g := grads[(b*T+tt)*3*C+c]; g != 0 {
							t.Fatalf("sequence %d (length %d): padded key %d has gradient %g at column %d", b, n, tt, g, c)
						}
					}
				}
			}
			for i, g := range grads {
				if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
					t.Fatalf("dqkv[%d] = %g", i, g)
				}
			}
		})
	}
}
