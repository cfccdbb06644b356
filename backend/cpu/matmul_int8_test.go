package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// int8Kernels are the integer kernels this CPU runs: the portable loop and every faster one up
// to int8Best.
func int8Kernels() []int8Kernel {
	var ks []int8Kernel
	for k := int8Go; k <= int8Best; k++ {
		ks = append(ks, k)
	}
	return ks
}

// TestMatmulForwardInt8 runs MatmulForwardInt8 on every kernel and thread count over shapes with
// ragged rows (C not a multiple of the 32/64-byte steps, blocks of weight rows with short ends)
// and checks: the same float32 bits as the portable kernel on one thread, no write outside out,
// each output equal to an int64 dot product of the quantized values computed here, scaled in the
// documented order, and close to the fp32 product. Extreme rows (every value ±max, so every q is
// ±127) catch a kernel that saturates.
func TestMatmulForwardInt8(t *testing.T) {
	defer func(saved int8Kernel) { int8Force = saved }(int8Force)
	r := newRand(23)
	shapes := [][3]int{{1, 768, 2304}, {1, 3072, 768}, {3, 64, 50}, {8, 40, 203}, {2, 7, 13}, {5, 136, 4*64 + 3},
		{1, 1, 1}, {9, 65, 129}, {37, 200, 70}, {4, 3072, 17}}
	for si, s := range shapes {
		N, C, OC := s[0], s[1], s[2]
		inp, weight, bias := randoms[float32](r, N*C), randoms[float32](r, OC*C), randoms[float32](r, OC)
		if si%3 == 0 { // extremes: every quantized value ±127
			for i := range inp {
				inp[i] = float32(math.Copysign(1, float64(inp[i])))
			}
			for i := range weight {
				weight[i] = float32(math.Copysign(1, float64(weight[i])))
			}
		}
		if N >= 8 { // a row with a NaN, one with an Inf (their outputs NaN), a tiny one (x 1e-38)
			inp[2*C+C/2] = float32(math.NaN())
			inp[3*C] = float32(math.Inf(-1))
			for i := 4 * C; i < 5*C; i++ {
				inp[i] *= 1e-38
			}
		}
		var first []float32
		for _, withBias := range []bool{true, false} {
			first = nil
			for _, kernel := range int8Kernels() {
				for _, threads := range []int{1, 2, 3} {
					int8Force = kernel
					be := New(threads)
					name := fmt.Sprintf("N=%d C=%d OC=%d bias=%v kernel=%v threads=%d", N, C, OC, withBias, kernel, threads)
					x, w := be.Alloc(N*C), be.Alloc(OC*C)
					be.Upload(x, inp)
					be.Upload(w, weight)
					var b backend.Buf
					if withBias {
						b = be.Alloc(OC)
						be.Upload(b, bias)
					}
					qw, err := be.QuantizeInt8(w, OC, C)
					if err != nil {
						t.Fatal(err)
					}
					out, whole := guarded(make([]float32, N*OC))
					be.MatmulForwardInt8(&floatBuf{data: out}, x, qw, b, N, C, OC)
					checkGuards(t, name, whole)
					for i, v := range out {
						if n := i / OC; N >= 8 && (n == 2 || n == 3) != math.IsNaN(float64(v)) {
							t.Fatalf("%s: out[%d,%d] = %g: want NaN exactly in the rows holding a NaN or an Inf", name, n, i%OC, v)
						}
					}
					if first == nil {
						first = out
						checkInt8Reference(t, name, out, inp, weight, bias, qw.(*int8Buf), N, C, OC, withBias)
						continue
					}
					for i := range out {
						if math.Float32bits(out[i]) != math.Float32bits(first[i]) {
							t.Fatalf("%s: out[%d] = %g, the portable kernel on one thread gives %g", name, i, out[i], first[i])
						}
					}
				}
			}
		}
	}
}

// checkInt8Reference checks out against the quantized product computed independently (int64
// sums) and, loosely, against the float product it approximates.
func checkInt8Reference(t *testing.T, name string, out, inp, weight, bias []float32, qw *int8Buf, N, C, OC int, withBias bool) {
	t.Helper()
	xq := make([]int8, C)
	for n := range N {
		xs := backend.QuantizeRowInt8(xq, inp[n*C:(n+1)*C])
		for o := range OC {
			var sum int64
			exact, scale := 0.0, 0.0
			for i := range C {
				sum += int64(xq[i]) * int64(qw.q[o*qw.stride+i])
				term := float64(inp[n*C+i]) * float64(weight[o*C+i])
				exact += term
				scale += math.Abs(term)
			}
			want := float32(float32(sum) * float32(xs*qw.scales[o]))
			if withBias {
				want += bias[o]
				exact += float64(bias[o])
			}
			got := out[n*OC+o]
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s: out[%d,%d] = %g, the int64 reference gives %g", name, n, o, got, want)
			}
			// Each factor is off by at most half a step of its row's max/127 (a NaN or an Inf
			// in the row makes both NaN).
			if math.IsNaN(exact) || math.IsInf(exact, 0) {
				continue
			}
			if d := math.Abs(float64(got) - exact); !(d <= 0.02*scale+1e-6) {
				t.Fatalf("%s: out[%d,%d] = %g, far from the float product %g (scale %g)", name, n, o, got, exact, scale)
			}
		}
	}
}

// TestQuantizeInt8 checks a weight's quantization: values round to nearest, the row's largest
// magnitude maps to ±127, ties go to even, padding is zero, an all-zero row has scale 0, and
// rowSums match.
func TestQuantizeInt8(t *testing.T) {
	be := New(1)
	w := be.Alloc(4 * 5)
	be.Upload(w, []float32{1, -2, 0.5, 0.25, 0, 0, 0, 0, 0, 0, -4, 1, 3.9, 2, -0.01, 127, 2.5, -3.5, 0.5, 1})
	qb, err := be.QuantizeInt8(w, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	q := qb.(*int8Buf)
	want := [][]int8{{64, -127, 32, 16, 0}, {0, 0, 0, 0, 0}, {-127, 32, 124, 64, 0}, {127, 2, -4, 0, 1}}
	wantScales := []float32{2.0 / 127, 0, 4.0 / 127, 1}
	for o := range 4 {
		row := q.q[o*q.stride : (o+1)*q.stride]
		var sum int32
		for i, v := range row {
			if i < 5 && v != want[o][i] || i >= 5 && v != 0 {
				t.Fatalf("row %d: q = %v, want %v then zeros", o, row, want[o])
			}
			sum += int32(v)
		}
		if q.scales[o] != wantScales[o] || q.rowSums[o] != sum {
			t.Fatalf("row %d: scale %g rowSum %d, want %g %d", o, q.scales[o], q.rowSums[o], wantScales[o], sum)
		}
	}
	if q.stride%int8Align != 0 || qb.DType() != backend.I8 || qb.Len() != 20 {
		t.Fatalf("stride %d dtype %v len %d", q.stride, qb.DType(), qb.Len())
	}
	if _, err := be.QuantizeInt8(be.Alloc(backend.Int8MaxC+1), 1, backend.Int8MaxC+1); err == nil {
		t.Errorf("rows of %d values, whose int32 sums may overflow: no error", backend.Int8MaxC+1)
	}
}

// TestQuantizeRowInt8EdgeCases: a row holding a NaN or an Inf quantizes to zeros with a NaN
// scale; a row whose values are all below 2^-64 quantizes as the same row made 2^64 times
// larger, with its own scale (127/max would overflow otherwise, and 0*Inf make NaNs).
func TestQuantizeRowInt8EdgeCases(t *testing.T) {
	q := make([]int8, 5)
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		q[0] = 9
		scale := backend.QuantizeRowInt8(q, []float32{1, bad, -2, 0, 0.5})
		if !math.IsNaN(float64(scale)) || q[0] != 0 || q[1] != 0 || q[2] != 0 {
			t.Errorf("row with %v: q = %v, scale %v; want zeros and NaN", bad, q, scale)
		}
	}
	tiny := []float32{1e-38, 0, 5e-39, -1e-38, 2.5e-39}
	big := make([]float32, len(tiny))
	for i, v := range tiny {
		big[i] = v * 0x1p64
	}
	want := make([]int8, len(big))
	backend.QuantizeRowInt8(want, big)
	scale := backend.QuantizeRowInt8(q, tiny)
	if !slices.Equal(q, want) || scale != float32(1e-38)/127 {
		t.Errorf("tiny row: q = %v, scale %g; want %v (the row x 2^64), scale %g", q, scale, want, float32(1e-38)/127)
	}
	if want[1] != 0 || want[0] != 127 || want[3] != -127 {
		t.Errorf("the row x 2^64 quantizes to %v", want)
	}
}

// BenchmarkMatvecInt8 times one token's matmuls of GPT-2 124M (N=1) in int8 on each kernel and in
// fp32 (the matvec path) beside them; GB/s counts the weight read once (1 or 4 bytes a value).
func BenchmarkMatvecInt8(b *testing.B) {
	defer func(saved int8Kernel) { int8Force = saved }(int8Force)
	for _, s := range []struct{ C, OC int }{{bC, 3 * bC}, {bC, 4 * bC}, {4 * bC, bC}, {bC, bVp}} {
		be := New(0)
		inp, weight, bias := benchBuf(be, s.C), benchBuf(be, s.OC*s.C), benchBuf(be, s.OC)
		out := be.Alloc(s.OC)
		qw, err := be.QuantizeInt8(weight, s.OC, s.C)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("fp32/C=%d,OC=%d", s.C, s.OC), func(b *testing.B) {
			for b.Loop() {
				be.MatmulForward(out, inp, weight, bias, 1, s.C, s.OC)
			}
			report(b, 0, 4*float64(s.OC*s.C))
		})
		for _, kernel := range int8Kernels() {
			int8Force = kernel
			b.Run(fmt.Sprintf("int8-%v/C=%d,OC=%d", kernel, s.C, s.OC), func(b *testing.B) {
				for b.Loop() {
					be.MatmulForwardInt8(out, inp, qw, bias, 1, s.C, s.OC)
				}
				report(b, 0, float64(s.OC*s.C))
			})
		}
	}
}

// BenchmarkMatmulInt8 times a batch of rows (eval, a prompt: N=256) through GPT-2 124M's matmuls
// in int8 on each kernel and in fp32 (sgemm) beside them, in GOP/s (2*N*C*OC operations).
func BenchmarkMatmulInt8(b *testing.B) {
	defer func(saved int8Kernel) { int8Force = saved }(int8Force)
	const N = 256
	for _, s := range []struct{ C, OC int }{{bC, 3 * bC}, {bC, 4 * bC}, {4 * bC, bC}} {
		be := New(0)
		inp, weight, bias := benchBuf(be, N*s.C), benchBuf(be, s.OC*s.C), benchBuf(be, s.OC)
		out := be.Alloc(N * s.OC)
		qw, err := be.QuantizeInt8(weight, s.OC, s.C)
		if err != nil {
			b.Fatal(err)
		}
		ops := 2 * float64(N) * float64(s.C) * float64(s.OC)
		b.Run(fmt.Sprintf("fp32/N=%d,C=%d,OC=%d", N, s.C, s.OC), func(b *testing.B) {
			for b.Loop() {
				be.MatmulForward(out, inp, weight, bias, N, s.C, s.OC)
			}
			b.ReportMetric(ops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
		})
		for _, kernel := range int8Kernels() {
			int8Force = kernel
			b.Run(fmt.Sprintf("int8-%v/N=%d,C=%d,OC=%d", kernel, N, s.C, s.OC), func(b *testing.B) {
				for b.Loop() {
					be.MatmulForwardInt8(out, inp, qw, bias, N, s.C, s.OC)
				}
				b.ReportMetric(ops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
			})
		}
	}
}
