package cpu

import (
	"fmt"
	"math"
	"testing"
)

// TestMatvec checks matmulForward's few-row path against a float64 loop (within the float32 sum's
// error bound K*eps*sum|terms|) over lengths that cross the assembly's 8-lane and 4-row steps and
// the blocks of weight rows, on the assembly and on the portable loops, and checks that its bits
// do not depend on the thread count. TestMatmulFast covers it at small ragged shapes too.
func TestMatvec(t *testing.T) {
	defer func(saved bool) { useVecKernels = saved }(useVecKernels)
	r := newRand(17)
	shapes := [][3]int{{1, 768, 2304}, {1, 3072, 768}, {3, 64, 50}, {8, 40, 203}, {2, 7, 13}, {5, 136, 4*64 + 3}}
	for _, s := range shapes {
		N, C, OC := s[0], s[1], s[2]
		inp, weight, bias := randoms[float32](r, N*C), randoms[float32](r, OC*C), randoms[float32](r, OC)
		for _, accelerated := range []bool{useVecKernels, false} {
			useVecKernels = accelerated
			var first []float32
			for _, threads := range []int{1, 2, 3} {
				name := fmt.Sprintf("N=%d C=%d OC=%d asm=%v threads=%d", N, C, OC, accelerated, threads)
				p := &pool{threads: threads}
				out, whole := guarded(make([]float32, N*OC))
				matvec(p, out, inp, weight, bias, N, C, OC)
				checkGuards(t, name, whole)
				if first == nil {
					first = out
					for i := range N {
						for o := range OC {
							ref, scale := float64(bias[o]), math.Abs(float64(bias[o]))
							for k := range C {
								term := float64(inp[i*C+k]) * float64(weight[o*C+k])
								ref += term
								scale += math.Abs(term)
							}
							if d := math.Abs(float64(out[i*OC+o]) - ref); !(d <= float64(C+1)*6e-8*scale) {
								t.Fatalf("%s: out[%d,%d] = %g, want %g", name, i, o, out[i*OC+o], ref)
							}
						}
					}
				} else {
					checkClose(t, name+" against 1 thread", out, first, 0)
				}
			}
		}
	}
}

// BenchmarkMatvec times one token's matmuls of GPT-2 124M (N=1) on the matrix-vector path and on
// the blocked gemm it replaces; GB/s counts the weight read once.
func BenchmarkMatvec(b *testing.B) {
	for _, s := range []struct{ C, OC int }{{bC, 3 * bC}, {bC, 4 * bC}, {4 * bC, bC}, {bC, bVp}} {
		be := New(0)
		inp, weight, bias := benchBuf(be, s.C), benchBuf(be, s.OC*s.C), benchBuf(be, s.OC)
		out := be.Alloc(s.OC)
		bytes := 4 * float64(s.OC*s.C)
		b.Run(fmt.Sprintf("matvec/C=%d,OC=%d", s.C, s.OC), func(b *testing.B) {
			for b.Loop() {
				be.MatmulForward(out, inp, weight, bias, 1, s.C, s.OC)
			}
			report(b, 0, bytes)
		})
		b.Run(fmt.Sprintf("gemm/C=%d,OC=%d", s.C, s.OC), func(b *testing.B) {
			for b.Loop() {
				gemm(&be.pool, &be.gemm, 1, s.OC, s.C,
					strided[float32]{data: Floats(inp), rowStride: s.C, colStride: 1},
					strided[float32]{data: Floats(weight), rowStride: 1, colStride: s.C},
					Floats(out), s.OC, false, Floats(bias))
			}
			report(b, 0, bytes)
		})
	}
}
