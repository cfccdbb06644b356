package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// TestInt8MatchesCPUBits runs MatmulForwardInt8 on both backends, in fp32 and in the 16-bit
// formats, over shapes with ragged rows (C not a multiple of the 16-byte pieces), partial groups
// of input rows (N not a multiple of INT8_ROWS), partial blocks of weight rows, an all-zero input
// row, rows at the extremes (every quantized value ±127), rows of ones whose sums (1999*127^2)
// round when made float32, input rows holding a NaN, an Inf or only values below 2^-64, and a
// weight row holding a NaN: the outputs must be the CPU's bits (any NaN matching any NaN), as
// the int32 sums are exact and both take the same rounded steps around them. The bytes
// QuantizeInt8 reports are checked, and a weight of the wrong shape is refused.
func TestInt8MatchesCPUBits(t *testing.T) {
	g := gpu(t, false)
	c := cpu.New(0)
	rng := rand.New(rand.NewPCG(8, 8))
	shapes := [][3]int{{1, 768, 2304}, {1, 3072, 768}, {3, 64, 50}, {8, 40, 203}, {2, 7, 13}, {9, 65, 129},
		{37, 200, 70}, {4, 3072, 17}, {1, 1, 1}, {130, 96, 1000}, {3, 1999, 33}}
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
		if g.CheckDType(dt) != nil {
			t.Logf("%v: not on this GPU", dt)
			continue
		}
		for si, s := range shapes {
			N, C, OC := s[0], s[1], s[2]
			inp, weight, bias := make([]float32, N*C), make([]float32, OC*C), make([]float32, OC)
			for _, v := range [][]float32{inp, weight, bias} {
				for i := range v {
					v[i] = float32(2*rng.Float64() - 1)
				}
			}
			if si%3 == 0 { // extremes: every quantized value ±127
				for i := range inp {
					inp[i] = float32(math.Copysign(1, float64(inp[i])))
				}
				for i := range weight {
					weight[i] = float32(math.Copysign(1, float64(weight[i])))
				}
			}
			if C == 1999 { // ones: every sum 1999*127^2 = 32241871, which float32 rounds
				for _, v := range [][]float32{inp, weight} {
					for i := range v {
						v[i] = 1
					}
				}
			}
			if N > 2 {
				clear(inp[C : 2*C]) // an all-zero row: scale 0
			}
			if N >= 8 { // rows with a NaN and an Inf (outputs NaN), a tiny one; a weight row with a NaN
				inp[2*C+C/2] = float32(math.NaN())
				inp[3*C] = float32(math.Inf(1))
				for i := 4 * C; i < 5*C; i++ {
					inp[i] *= 1e-38
				}
				weight[C+C/3] = float32(math.NaN())
			}
			for _, withBias := range []bool{true, false} {
				name := fmt.Sprintf("%v N=%d C=%d OC=%d bias=%v", dt, N, C, OC, withBias)
				outs := make([][]float32, 2)
				for i, be := range []backend.Backend{c, g} {
					x, w, out := be.AllocDType(N*C, dt), be.AllocDType(OC*C, dt), be.AllocDType(N*OC, dt)
					be.Upload(x, inp)
					be.Upload(w, weight)
					var b backend.Buf
					if withBias {
						b = be.AllocDType(OC, dt)
						be.Upload(b, bias)
					}
					qw, err := be.QuantizeInt8(w, OC, C)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if be == g {
						if got, want := qw.(*int8Weight).Bytes(), int64(OC*((C+15)/16*16)+4*OC); got != want {
							t.Errorf("%s: weight of %d bytes, want %d", name, got, want)
						}
					}
					be.MatmulForwardInt8(out, x, qw, b, N, C, OC)
					if err := be.Sync(); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					outs[i] = make([]float32, N*OC)
					be.Download(outs[i], out)
				}
				for i := range outs[0] {
					a, b := outs[0][i], outs[1][i]
					if math.Float32bits(a) != math.Float32bits(b) && !(math.IsNaN(float64(a)) && math.IsNaN(float64(b))) {
						t.Fatalf("%s: out[%d,%d] is %v on the CPU, %v on the GPU", name, i/OC, i%OC, a, b)
					}
				}
			}
		}
	}
	// A weight quantized for another shape is refused with an error, not read out of bounds.
	w := g.Alloc(6)
	qw, err := g.QuantizeInt8(w, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	g.MatmulForwardInt8(g.Alloc(3), g.Alloc(1), qw, nil, 1, 1, 3) // the last use of g: its errors stick
	if err := g.Sync(); err == nil {
		t.Error("a (2,3) int8 weight used as (3,1): no error")
	}
}

// BenchmarkMatmulInt8 times MatmulForwardInt8 against the fp32 and bf16 MatmulForward (cuBLASLt)
// at GPT-2 124M's shapes: one token (KV-cached generation, memory-bound: GB/s of weight bytes
// read) and a 1024-token prompt (TOPS as 2*N*C*OC operations per second).
func BenchmarkMatmulInt8(b *testing.B) {
	g, err := New(Options{})
	if err != nil {
		b.Skipf("no usable GPU: %v", err)
	}
	for _, N := range []int{1, 1024} {
		for _, s := range [][2]int{{768, 2304}, {768, 3072}, {3072, 768}, {768, 50304}} {
			C, OC := s[0], s[1]
			for _, kind := range []string{"int8", "fp32", "bf16"} {
				b.Run(fmt.Sprintf("N=%d/C=%d,OC=%d/%s", N, C, OC, kind), func(b *testing.B) {
					dt := backend.F32
					if kind == "bf16" {
						dt = backend.BF16
					}
					x, w, out := g.AllocDType(N*C, dt), g.AllocDType(OC*C, dt), g.AllocDType(N*OC, dt)
					vals := make([]float32, OC*C)
					for i := range vals {
						vals[i] = float32(i%251)/125 - 1
					}
					g.Upload(w, vals)
					g.Upload(x, vals[:N*C])
					run := func() { g.MatmulForward(out, x, w, nil, N, C, OC) }
					weightBytes := float64(OC*C) * float64(dt.Bytes())
					if kind == "int8" {
						qw, err := g.QuantizeInt8(w, OC, C)
						if err != nil {
							b.Fatal(err)
						}
						run = func() { g.MatmulForwardInt8(out, x, qw, nil, N, C, OC) }
						weightBytes = float64(qw.(*int8Weight).Bytes())
					}
					run()
					if err := g.Sync(); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for range b.N {
						run()
					}
					if err := g.Sync(); err != nil {
						b.Fatal(err)
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					if N == 1 {
						b.ReportMetric(weightBytes/sec/1e9, "GB/s")
					} else {
						b.ReportMetric(2*float64(N)*float64(C)*float64(OC)/sec/1e12, "TOPS")
					}
				})
			}
		}
	}
}
