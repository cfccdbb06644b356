package cpu

import (
	"math"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// The assembly rounding kernels give the bits of the Go reference for random bit patterns (NaNs,
// infinities and subnormals among them), values around every power of two and their halfway
// points, and ragged lengths (the tail runs in Go).
func TestRoundKernelsMatchGo(t *testing.T) {
	if !useRoundBF16AVX2 || !useRoundF16C {
		t.Skip("no AVX2/F16C")
	}
	r := newRand(11)
	var x []float32
	for range 100003 {
		x = append(x, math.Float32frombits(r.Uint32()))
	}
	for e := -150; e <= 128; e++ {
		base := math.Float32bits(float32(math.Ldexp(1, e)))
		for _, d := range []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x3000, 0x7fff, 0x8000, 0x8001, 0x18000} {
			x = append(x, math.Float32frombits(base+d), math.Float32frombits((base+d)|0x8000_0000))
		}
	}
	x = append(x, 65504, 65519, 65520, -65520, 0x1p-25, 0x1.8p-24, float32(math.Inf(1)), float32(math.NaN()))
	for _, c := range []struct {
		name string
		span func(dst, src []float32)
		ref  func(float32) float32
	}{{"bf16", roundBF16Span, backend.RoundBF16}, {"fp16", roundF16Span, backend.RoundF16}} {
		got := make([]float32, len(x))
		c.span(got, x)
		for i, v := range x {
			want := c.ref(v)
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("%s: %g (%#08x) rounds to %#08x, the Go reference to %#08x", c.name, v, math.Float32bits(v), math.Float32bits(got[i]), math.Float32bits(want))
			}
		}
	}
}
