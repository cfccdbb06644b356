package cpu

import "testing"

// The VNNI kernel runs only where AVX-512 F, BW, VL and VNNI all are: its four-row form sums in
// Y24-Y27, which need VL (EVEX at 256 bits), and a CPU that reports VNNI but not VL (a virtual
// machine hiding one) would stop at its first int8 product with an illegal instruction.
// GPT2GO_INT8 picks a slower kernel, never a faster one than the CPU has.
func TestBestInt8(t *testing.T) {
	all := int8Features{avx2: true, avx512f: true, avx512bw: true, avx512vl: true, avx512vnni: true}
	noVL := all
	noVL.avx512vl = false
	noBW := all
	noBW.avx512bw = false
	for _, c := range []struct {
		f    int8Features
		env  string
		want int8Kernel
	}{
		{all, "", int8VNNI},
		{noVL, "", int8AVX2},
		{noBW, "", int8AVX2},
		{int8Features{avx2: true}, "", int8AVX2},
		{int8Features{}, "", int8Go},
		{all, "avx2", int8AVX2},
		{all, "go", int8Go},
		{int8Features{}, "avx2", int8Go},
	} {
		if got := bestInt8(c.f, c.env); got != c.want {
			t.Errorf("features %+v, GPT2GO_INT8=%q: %v, want %v", c.f, c.env, got, c.want)
		}
	}
}
