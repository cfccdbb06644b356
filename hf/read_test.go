package hf

import (
	"math"
	"testing"
)

func TestHalfToFloat(t *testing.T) {
	for _, c := range []struct {
		bits uint16
		want float32
	}{
		{0x3C00, 1}, {0xC000, -2}, {0x3555, 0.333251953125}, {0x7BFF, 65504},
		{0x0400, 1.0 / (1 << 14)},     // smallest normal
		{0x0001, 1.0 / (1 << 24)},     // smallest subnormal
		{0x83FF, -1023.0 / (1 << 24)}, // largest subnormal, negative
		{0x0000, 0}, {0x7C00, float32(math.Inf(1))}, {0xFC00, float32(math.Inf(-1))},
	} {
		if got := halfToFloat(c.bits); got != c.want {
			t.Errorf("halfToFloat(%#04x) = %g, want %g", c.bits, got, c.want)
		}
	}
	if got := halfToFloat(0x8000); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("halfToFloat(0x8000) = %g, want -0", got)
	}
	if got := halfToFloat(0x7E00); !math.IsNaN(float64(got)) {
		t.Errorf("halfToFloat(0x7e00) = %g, want NaN", got)
	}
}

func TestDecodeDTypes(t *testing.T) {
	dst := make([]float32, 2)
	decode(dst, []byte{0x00, 0x3C, 0x00, 0xC0}, "F16")
	if dst[0] != 1 || dst[1] != -2 {
		t.Errorf("F16: %v", dst)
	}
	decode(dst, []byte{0x80, 0x3F, 0x40, 0xC0}, "BF16") // 1, -3
	if dst[0] != 1 || dst[1] != -3 {
		t.Errorf("BF16: %v", dst)
	}
	decode(dst[:1], []byte{0, 0, 0, 0, 0, 0, 0xF8, 0x3F}, "F64") // 1.5
	if dst[0] != 1.5 {
		t.Errorf("F64: %v", dst)
	}
}
