package cpu

import (
	"fmt"
	"math"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// TestSgemmPackA6 checks the assembly six-row interleave against packPanels, exactly, for depths
// around its 4-wide steps, and that it writes nothing past the panel.
func TestSgemmPackA6(t *testing.T) {
	if !useSgemmKernel {
		t.Skip("no assembly gemm kernel on this CPU")
	}
	r := newRand(12)
	for kc := range 14 {
		const stride = 19
		src := randoms[float32](r, 5*stride+kc+1)
		want := make([]float32, sgemmMR*kc)
		packPanels(want, strided[float32]{data: src, rowStride: stride, colStride: 1}, 0, 0, sgemmMR, kc, sgemmMR)
		got, whole := guarded(make([]float32, sgemmMR*kc))
		sgemmPackA6(kc, &src[0], stride, &whole[guardLen]) // &whole: got may be empty
		checkGuards(t, fmt.Sprint("kc=", kc), whole)
		checkClose(t, fmt.Sprint("kc=", kc), got, want, 0)
	}
}

// TestSgemm512SelfCheck fails, on a CPU with AVX-512F, when the AVX-512 kernel failed its
// self-check (the backend then quietly runs the AVX2 kernel, so only a test can make it loud).
func TestSgemm512SelfCheck(t *testing.T) {
	if !useSgemmKernel || !cpu.X86.HasAVX512F {
		t.Skip("the CPU has no AVX-512F: the AVX-512 gemm kernel cannot run here")
	}
	if err := sgemm512SelfCheck(); err != nil {
		t.Fatal(err)
	}
	if !useSgemm512 && os.Getenv("GPT2GO_SGEMM") != "avx2" {
		t.Fatalf("AVX-512 kernel not in use: %s", sgemm512Note)
	}
	t.Logf("matmul kernel: %s", MatmulKernel())
}

// emulate12x32 is sgemmKernel12x32 made of four calls of the 6x16 kernel, which give the same
// bits: it lets the 12x32 tiling run on CPUs without AVX-512.
func emulate12x32(kc int, a, b, c *float32, ldc int, init *float32, initStride int) {
	for r := 0; r < 2; r++ {
		for h := 0; h < 2; h++ {
			ar := (*float32)(unsafe.Add(unsafe.Pointer(a), 4*r*sgemmMR*kc))
			bh := (*float32)(unsafe.Add(unsafe.Pointer(b), 4*h*sgemmNR*kc))
			ch := (*float32)(unsafe.Add(unsafe.Pointer(c), 4*(r*sgemmMR*ldc+h*sgemmNR)))
			ih := (*float32)(unsafe.Add(unsafe.Pointer(init), 4*(r*sgemmMR*initStride+h*sgemmNR)))
			sgemmKernel6x16(kc, ar, bh, ch, ldc, ih, initStride)
		}
	}
}

// with12x32 runs f with gemm's 12x32 tiles on kernel k.
func with12x32(k func(kc int, a, b, c *float32, ldc int, init *float32, initStride int), f func()) {
	defer func(use bool, saved func(int, *float32, *float32, *float32, int, *float32, int)) {
		useSgemm512, sgemm12x32 = use, saved
	}(useSgemm512, sgemm12x32)
	useSgemm512, sgemm12x32 = true, k
	f()
}

// TestSgemm512SelfCheckCatches runs the self-check on the emulated kernel, which must pass, and on
// broken ones (a wrong bit, a write past the tile), which must fail.
func TestSgemm512SelfCheckCatches(t *testing.T) {
	if !useSgemmKernel {
		t.Skip("no assembly gemm kernel on this CPU")
	}
	check := func(k func(int, *float32, *float32, *float32, int, *float32, int)) (err error) {
		with12x32(k, func() { err = sgemm512SelfCheck() })
		return err
	}
	if err := check(emulate12x32); err != nil {
		t.Fatalf("the emulated kernel fails the self-check: %v", err)
	}
	flip := func(kc int, a, b, c *float32, ldc int, init *float32, initStride int) {
		emulate12x32(kc, a, b, c, ldc, init, initStride)
		p := (*float32)(unsafe.Add(unsafe.Pointer(c), 4*(7*ldc+20)))
		*p = math.Nextafter32(*p, 2)
	}
	spill := func(kc int, a, b, c *float32, ldc int, init *float32, initStride int) {
		emulate12x32(kc, a, b, c, ldc, init, initStride)
		*(*float32)(unsafe.Add(unsafe.Pointer(c), 4*(11*ldc+32))) = 0
	}
	for name, k := range map[string]func(int, *float32, *float32, *float32, int, *float32, int){"flip": flip, "spill": spill} {
		if err := check(k); err == nil {
			t.Errorf("the self-check passed a kernel that %ss", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestGemm12x32Tiling runs every TestGemm case with the 12x32 tiles on (through emulate12x32 where
// the CPU has no AVX-512) and requires the AVX2 kernel's bits and untouched guards, on 1 and 3
// threads: it checks the tiling around the 12x32 kernel, not the kernel's instructions.
func TestGemm12x32Tiling(t *testing.T) {
	if !useSgemmKernel {
		t.Skip("no assembly gemm kernel on this CPU")
	}
	k := sgemm12x32
	if !useSgemm512 {
		k = emulate12x32
	}
	r := newRand(81)
	for _, p := range []*pool{{threads: 1}, testPool} {
		ws := newGemmWorkspace[float32](p.threads)
		for _, g := range gemmCases() {
			M, N, K := g.M, g.N, g.K
			a, b, bias := g.operands(r, 1)
			c0 := randoms[float32](r, M*N)
			saved := useSgemm512
			useSgemm512 = false
			want, _ := guarded(c0)
			gemm(p, &ws, M, N, K, a, b, want, N, g.accumulate, bias)
			useSgemm512 = saved
			got, whole := guarded(c0)
			with12x32(k, func() { gemm(p, &ws, M, N, K, a, b, got, N, g.accumulate, bias) })
			name := fmt.Sprintf("%v threads=%d", g, p.threads)
			checkGuards(t, name, whole)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: element %d is %g with 12x32 tiles, %g without", name, i, got[i], want[i])
				}
			}
		}
	}
}
