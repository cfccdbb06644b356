package cpu

import (
	"fmt"
	"math"
	"testing"
)

func TestMatmulBackward(t *testing.T) {
	r := newRand(5)
	N, C, OC := tB*tT, 7, 9
	ws := newGemmWorkspace[float64](testPool.threads)
	inp, weight, bias := randoms[float64](r, N*C), randoms[float64](r, OC*C), randoms[float64](r, OC)
	R := randoms[float64](r, N*OC)
	out := make([]float64, N*OC)
	for _, withBias := range []bool{true, false} {
		b := bias
		if !withBias {
			b = nil
		}
		loss := func() float64 {
			matmulForward(testPool, &ws, out, inp, weight, b, N, C, OC)
			return dot(out, R)
		}
		dinp0, dweight0, dbias0 := randoms[float64](r, N*C), randoms[float64](r, OC*C), randoms[float64](r, OC)
		dinp, dweight, dbias := clone(dinp0), clone(dweight0), clone(dbias0)
		if !withBias {
			dbias = nil
		}
		matmulBackward(testPool, &ws, dinp, dweight, dbias, R, inp, weight, N, C, OC)
		checkGrad(t, "dinp", inp, dinp, loss) // overwritten: its random start must not show
		checkGrad(t, "dweight", weight, sub(dweight, dweight0), loss)
		if withBias {
			checkGrad(t, "dbias", bias, sub(dbias, dbias0), loss)
		}

		// With dinp nil the weight gradient is unchanged.
		dweight2 := clone(dweight0)
		matmulBackward(testPool, &ws, nil, dweight2, nil, R, inp, weight, N, C, OC)
		checkClose(t, "dweight with nil dinp", dweight2, dweight, 0)
	}
}

// matmulShapes are (N, C, OC) triples with ragged edges around the micro-tile and block sizes.
func matmulShapes() [][3]int {
	sizes := []int{1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 33, 37}
	var shapes [][3]int
	for i, n := range sizes {
		for j, c := range sizes {
			// Every N with every C, and a few OC per pair, keeps the test fast.
			shapes = append(shapes, [3]int{n, c, sizes[(i+j)%len(sizes)]}, [3]int{n, c, sizes[(i*j+3)%len(sizes)]})
		}
	}
	// Cross the packed block sizes in each dimension; C = 0 (out is the bias) on both the few-row
	// and the gemm path.
	return append(shapes,
		[3]int{3, 0, 4}, [3]int{matvecMaxRows + 1, 0, 4},
		[3]int{gemmMC + 5, gemmKC + 3, 37},
		[3]int{9, 2*gemmKC + 1, gemmNC + 3},
		[3]int{70, 300, 45},
	)
}

// guarded returns a copy of values inside a larger allocation whose edges hold a sentinel. The copy's
// capacity ends with it, so a kernel that reslices past the end panics even when it would write back
// an unchanged value (as a zero-padded tile does).
const guardLen, guardValue = 64, float32(-12345.5)

func guarded(values []float32) (inner, whole []float32) {
	whole = make([]float32, len(values)+2*guardLen)
	for i := range whole {
		whole[i] = guardValue
	}
	copy(whole[guardLen:], values)
	return whole[guardLen : guardLen+len(values) : guardLen+len(values)], whole
}

func checkGuards(t *testing.T, name string, whole []float32) {
	t.Helper()
	for i := range guardLen {
		if whole[i] != guardValue || whole[len(whole)-1-i] != guardValue {
			t.Fatalf("%s: write outside the buffer", name)
		}
	}
}

// TestMatmulFast checks the float32 blocked matmul against a float64 triple loop, with the error
// bound of a float32 sum: K*eps*sum|terms|.
func TestMatmulFast(t *testing.T) {
	r := newRand(6)
	for _, threads := range []int{1, 3} {
		be := New(threads)
		for _, s := range matmulShapes() {
			N, C, OC := s[0], s[1], s[2]
			name := fmt.Sprintf("threads=%d N=%d C=%d OC=%d", threads, N, C, OC)
			inp, weight, bias := randoms[float32](r, N*C), randoms[float32](r, OC*C), randoms[float32](r, OC)
			dout := randoms[float32](r, N*OC)
			dinp0, dweight0, dbias0 := randoms[float32](r, N*C), randoms[float32](r, OC*C), randoms[float32](r, OC)

			out, outWhole := guarded(make([]float32, N*OC))
			matmulForward(&be.pool, &be.gemm, out, inp, weight, bias, N, C, OC)
			checkGuards(t, name+" out", outWhole)
			dinp, dinpWhole := guarded(dinp0)
			dweight, dweightWhole := guarded(dweight0)
			dbias, dbiasWhole := guarded(dbias0)
			matmulBackward(&be.pool, &be.gemm, dinp, dweight, dbias, dout, inp, weight, N, C, OC)
			checkGuards(t, name+" dinp", dinpWhole)
			checkGuards(t, name+" dweight", dweightWhole)
			checkGuards(t, name+" dbias", dbiasWhole)

			// ref(i,j) = init + sum_k a(i,k)*b(k,j), checked within K*eps*(|init| + sum|a*b|).
			check := func(what string, got, init []float32, M, Ncol, K int, a, b func(i, j, k int) float32) {
				t.Helper()
				for i := range M {
					for j := range Ncol {
						ref := float64(init[i*Ncol+j])
						scale := math.Abs(ref)
						for k := range K {
							term := float64(a(i, j, k)) * float64(b(i, j, k))
							ref += term
							scale += math.Abs(term)
						}
						tol := float64(K+1)*6e-8*scale + 1e-30
						if d := math.Abs(float64(got[i*Ncol+j]) - ref); !(d <= tol) {
							t.Fatalf("%s %s[%d,%d] = %g, want %g", name, what, i, j, got[i*Ncol+j], ref)
						}
					}
				}
			}
			check("out", out, bias2D(bias, N), N, OC, C,
				func(i, j, k int) float32 { return inp[i*C+k] },
				func(i, j, k int) float32 { return weight[j*C+k] })
			check("dinp", dinp, make([]float32, N*C), N, C, OC, // overwritten
				func(i, j, k int) float32 { return dout[i*OC+k] },
				func(i, j, k int) float32 { return weight[k*C+j] })
			check("dweight", dweight, dweight0, OC, C, N,
				func(i, j, k int) float32 { return dout[k*OC+i] },
				func(i, j, k int) float32 { return inp[k*C+j] })
			check("dbias", dbias, dbias0, 1, OC, N,
				func(i, j, k int) float32 { return dout[k*OC+j] },
				func(i, j, k int) float32 { return 1 })
		}
	}
}

// bias2D repeats bias(OC) for N rows.
func bias2D(bias []float32, N int) []float32 {
	out := make([]float32, 0, N*len(bias))
	for range N {
		out = append(out, bias...)
	}
	return out
}

// TestMatmulBiasBackwardIsInOrderSum: the bias gradient is exactly the in-order float32 sum of
// each column (its bits do not depend on the kernel or the thread count), including widths that
// leave a partial vector.
func TestMatmulBiasBackwardIsInOrderSum(t *testing.T) {
	const N = 100
	for _, OC := range []int{1, 7, 65, 128, 200} {
		r := newRand(uint64(OC))
		dout, dbias := randoms[float32](r, N*OC), randoms[float32](r, OC)
		want := clone(dbias)
		for n := range N {
			for o := range OC {
				want[o] += dout[n*OC+o]
			}
		}
		for _, p := range []*pool{{threads: 1}, testPool} {
			got := clone(dbias)
			matmulBiasBackward(p, got, dout, N, OC)
			checkClose(t, fmt.Sprintf("OC=%d threads=%d", OC, p.threads), got, want, 0)
		}
	}
}
