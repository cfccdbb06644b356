package cpu

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// gemmCase is one gemm call of TestGemm: c(M,N) (row stride ldc) = init + a(M,K) @ b(K,N).
type gemmCase struct {
	M, N, K        int
	transA, transB bool // a stored (K,M), b stored (N,K)
	accumulate     bool
	bias           bool
}

func (g gemmCase) String() string {
	return fmt.Sprintf("M=%d N=%d K=%d transA=%v transB=%v accumulate=%v bias=%v",
		g.M, g.N, g.K, g.transA, g.transB, g.accumulate, g.bias)
}

// operands returns random a and b for case g, stored as the case says with pad elements after
// each row (or column), and a random bias when the case has one.
func (g gemmCase) operands(r *rand.Rand, pad int) (a, b strided[float32], bias []float32) {
	// a(i,k) is a.data[i*a.rowStride+k*a.colStride].
	a = strided[float32]{rowStride: g.K + pad, colStride: 1}
	if g.transA {
		a = strided[float32]{rowStride: 1, colStride: g.M + pad}
	}
	a.data = randoms[float32](r, max(g.M*a.rowStride, g.K*a.colStride))
	b = strided[float32]{rowStride: g.N + pad, colStride: 1}
	if g.transB {
		b = strided[float32]{rowStride: 1, colStride: g.K + pad}
	}
	b.data = randoms[float32](r, max(g.K*b.rowStride, g.N*b.colStride))
	if g.bias {
		bias = randoms[float32](r, g.N)
	}
	return a, b, bias
}

// gemmCases crosses ragged sizes around the 6x16 and 4x2 tiles (0 and 1 included) with both
// transpositions and every init, and adds shapes that cross the block sizes of both paths.
func gemmCases() []gemmCase {
	var shapes [][3]int
	for _, m := range []int{1, 5, 6, 7, 13, 50} {
		for _, n := range []int{1, 15, 16, 17, 40} {
			for _, k := range []int{0, 1, 3, 4, 5, 17} {
				shapes = append(shapes, [3]int{m, n, k})
			}
		}
	}
	shapes = append(shapes,
		[3]int{200, 35, 300},              // rows past one row block, depth past one depth block
		[3]int{9, 3100, 5},                // columns past one column block of the assembly path
		[3]int{151, 51, 520},              // several row and depth blocks, ragged everywhere
		[3]int{36, 96, 33},                // whole 12x32 tiles of the AVX-512 kernel only
		[3]int{gemmMC + 5, gemmNC + 3, 9}, // the portable path's blocks
	)
	var cases []gemmCase
	for _, s := range shapes {
		for _, trans := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, init := range [][2]bool{{true, false}, {false, false}, {false, true}} {
				cases = append(cases, gemmCase{s[0], s[1], s[2], trans[0], trans[1], init[0], init[1]})
			}
		}
	}
	return cases
}

// TestGemm checks the float32 gemm (on the assembly kernel where the CPU has one, and on the
// portable path) against a float64 triple loop within the error bound of a float32 sum,
// K*eps*(|init| + sum|a*b|). a and b have padded strides, c has padding columns and guard values
// around it that must stay untouched, and 1 and 3 threads must give the same bits.
func TestGemm(t *testing.T) {
	type path struct{ asm, avx512 bool }
	paths := []path{{}}
	if useSgemmKernel {
		paths = append(paths, path{asm: true})
	} else {
		t.Log("no assembly gemm kernel on this CPU: testing the portable path only")
	}
	if useSgemm512 {
		paths = append(paths, path{asm: true, avx512: true})
	} else {
		t.Logf("AVX-512 gemm kernel not tested: %s", cmp.Or(sgemm512Note, "the CPU has no AVX-512F"))
	}
	defer func(asm, avx512 bool) { useSgemmKernel, useSgemm512 = asm, avx512 }(useSgemmKernel, useSgemm512)
	r := newRand(8)
	pools := []*pool{{threads: 1}, testPool} // one thread starts no workers
	workspaces := []*gemmWorkspace[float32]{}
	for _, p := range pools {
		ws := newGemmWorkspace[float32](p.threads)
		workspaces = append(workspaces, &ws)
	}
	for _, g := range gemmCases() {
		M, N, K := g.M, g.N, g.K
		a, b, bias := g.operands(r, 3)
		ldc := N + 2
		c0 := randoms[float32](r, M*ldc)
		for i := range M {
			for j := N; j < ldc; j++ {
				c0[i*ldc+j] = guardValue
			}
		}
		c0 = c0[:(M-1)*ldc+N] // c ends with its last element
		var avx2 []float32    // the AVX2 kernel's result, whose bits the AVX-512 kernel must give
		for _, path := range paths {
			useSgemmKernel, useSgemm512 = path.asm, path.avx512
			var first []float32 // every thread count must give the bits of the first
			if path.avx512 {
				first = avx2
			}
			for pi, p := range pools {
				name := fmt.Sprintf("%v asm=%v avx512=%v threads=%d", g, path.asm, path.avx512, p.threads)
				c, whole := guarded(c0)
				gemm(p, workspaces[pi], M, N, K, a, b, c, ldc, g.accumulate, bias)
				checkGuards(t, name, whole)
				for i := range M {
					for j := N; j < ldc && i*ldc+j < len(c); j++ {
						if c[i*ldc+j] != guardValue {
							t.Fatalf("%s: wrote the padding at row %d column %d", name, i, j)
						}
					}
				}
				if first == nil {
					first = c
					checkGemm(t, name, g, a, b, bias, c0, c, ldc)
					continue
				}
				for i, v := range c {
					if math.Float32bits(v) != math.Float32bits(first[i]) {
						t.Fatalf("%s: element %d is %g, %g with %d thread (or on the AVX2 kernel)", name, i, v, first[i], pools[0].threads)
					}
				}
			}
			if path.asm && !path.avx512 {
				avx2 = first
			}
		}
	}
}

// checkGemm compares c with the float64 reference of case g, c0 being c before the call.
func checkGemm(t *testing.T, name string, g gemmCase, a, b strided[float32], bias, c0, c []float32, ldc int) {
	t.Helper()
	for i := range g.M {
		for j := range g.N {
			var ref float64
			switch {
			case g.accumulate:
				ref = float64(c0[i*ldc+j])
			case bias != nil:
				ref = float64(bias[j])
			}
			scale := math.Abs(ref)
			for k := range g.K {
				term := float64(a.data[i*a.rowStride+k*a.colStride]) * float64(b.data[k*b.rowStride+j*b.colStride])
				ref += term
				scale += math.Abs(term)
			}
			tol := float64(g.K+1) * 6e-8 * scale
			if got := c[i*ldc+j]; !(math.Abs(float64(got)-ref) <= tol) {
				t.Fatalf("%s: c[%d,%d] = %g, want %g", name, i, j, got, ref)
			}
		}
	}
}

// TestMatmulAllocs checks that the float32 matmuls, on two threads, allocate nothing once the
// packing space exists, on the assembly kernel (where the CPU has it) and on the portable path.
func TestMatmulAllocs(t *testing.T) {
	defer func(saved bool) { useSgemmKernel = saved }(useSgemmKernel)
	for _, asm := range []bool{false, useSgemmKernel} {
		useSgemmKernel = asm
		const N, C, OC = 20, 300, 40
		be := New(2)
		inp, weight, bias, out := be.Alloc(N*C), be.Alloc(OC*C), be.Alloc(OC), be.Alloc(N*OC)
		dinp, dweight, dbias := be.Alloc(N*C), be.Alloc(OC*C), be.Alloc(OC)
		allocs := testing.AllocsPerRun(3, func() {
			be.MatmulForward(out, inp, weight, bias, N, C, OC)
			be.MatmulForward(out, inp, weight, nil, N, C, OC)
			be.MatmulBackward(dinp, dweight, dbias, out, inp, weight, N, C, OC)
		})
		be.Close()
		if allocs != 0 {
			t.Fatalf("assembly kernel %v: %v allocations per forward and backward", asm, allocs)
		}
	}
}
