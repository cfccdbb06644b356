package cpu

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/cpu"
)

// This file is the float32 gemm for CPUs with AVX2 and FMA: the same scheme as gemm.go (packed
// panels, a register-tiled micro-kernel, output blocks as the parallel tasks) with a 6x16 assembly
// micro-kernel (gemm_amd64.s). Each output element is one lane of one accumulator and gets one FMA
// per k, in order; the partial sums are stored and reloaded exactly between depth blocks, and edge
// tiles run the same kernel on a padded copy. So the bits depend neither on the blocking nor on the
// thread count, and the block sizes below may be tuned freely. On CPUs with AVX-512F, full 12x32
// tiles run on a second kernel that reads the same packed panels (two of each) and does the same
// FMAs in the same order, so it changes the speed but not the bits.

const (
	sgemmMR = 6    // rows of the micro-tile
	sgemmNR = 16   // columns of the micro-tile (two YMM registers)
	sgemmKC = 256  // depth of a packed block: a 16-column B panel (16 KiB) stays in L1
	sgemmMC = 144  // most rows of a task's packed A block (144 KiB at KC=256: fits L2)
	sgemmNC = 3072 // most columns of the shared packed B block (3 MiB at KC=256: fits L3)

	sgemmTasksPerThread = 8 // at least this many compute tasks per thread and block
	sgemmPackGroup      = 4 // panels per packing task
	// Up to this many rows (4 MiB packed), A is packed once per block for all tasks when several
	// tasks share a row block; above, each task packs its own rows.
	sgemmSharedRows = 4096
)

// useSgemmKernel says whether gemm runs float32 through the assembly kernel; tests turn it off to
// compare with the portable path.
var useSgemmKernel = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// useSgemm512 says whether full 12x32 tiles run on the AVX-512 kernel (the rest stays on the
// 6x16 one). It needs AVX-512F (x/sys/cpu also checks that the OS saves the ZMM registers), can be
// turned off with GPT2GO_SGEMM=avx2, and the kernel must first pass a self-check on this CPU;
// sgemm512Note says why it is off when the CPU has AVX-512F.
var useSgemm512, sgemm512Note = sgemm512Enabled()

// sgemm12x32 is the 12x32 kernel that gemm calls; tests swap in an emulation built from 6x16 calls
// to run the 12x32 tiling (and the self-check) on CPUs without AVX-512.
var sgemm12x32 = sgemmKernel12x32

func sgemm512Enabled() (bool, string) {
	switch {
	case !useSgemmKernel || !cpu.X86.HasAVX512F:
		return false, ""
	case os.Getenv("GPT2GO_SGEMM") == "avx2":
		return false, "AVX-512 kernel off (GPT2GO_SGEMM=avx2)"
	}
	if err := sgemm512SelfCheck(); err != nil {
		return false, "AVX-512 kernel off: " + err.Error()
	}
	return true, ""
}

// sgemm512SelfCheck runs the 12x32 kernel once on random panels, with init from c and from a
// bias row, and requires the exact bits of four 6x16 kernel calls and no write outside the tile.
func sgemm512SelfCheck() error {
	const kc, ldc, guard = 37, 40, float32(-7.25)
	var seed uint32 = 1
	next := func() float32 { // a small LCG: values in [-1, 1)
		seed = seed*1664525 + 1013904223
		return float32(int32(seed)>>8) / (1 << 23)
	}
	a := make([]float32, 2*sgemmMR*kc)
	b := make([]float32, 2*sgemmNR*kc)
	bias := make([]float32, 2*sgemmNR)
	c0 := make([]float32, 2*sgemmMR*ldc)
	for _, x := range [][]float32{a, b, bias, c0} {
		for i := range x {
			x[i] = next()
		}
	}
	for _, fromBias := range []bool{false, true} {
		want, got := append([]float32(nil), c0...), make([]float32, len(c0)+2*ldc)
		copy(got[ldc:], c0)
		for i := range got {
			if i < ldc || i >= ldc+len(c0) || (i-ldc)%ldc >= 2*sgemmNR {
				got[i] = guard
			}
		}
		for r := 0; r < 2*sgemmMR; r += sgemmMR {
			for j := 0; j < 2*sgemmNR; j += sgemmNR {
				init, stride := &want[r*ldc+j], ldc
				if fromBias {
					init, stride = &bias[j], 0
				}
				sgemmKernel6x16(kc, &a[r*kc], &b[j*kc], &want[r*ldc+j], ldc, init, stride)
			}
		}
		init, stride := &got[ldc], ldc
		if fromBias {
			init, stride = &bias[0], 0
		}
		sgemm12x32(kc, &a[0], &b[0], &got[ldc], ldc, init, stride)
		for i, v := range got {
			w := guard // outside the tile
			if i >= ldc && i < ldc+len(c0) && (i-ldc)%ldc < 2*sgemmNR {
				w = want[i-ldc]
			}
			if math.Float32bits(v) != math.Float32bits(w) {
				return fmt.Errorf("self-check: element %d is %g, want %g (bias init %v)", i, v, w, fromBias)
			}
		}
	}
	return nil
}

// sgemmKernel6x16 sets the 6x16 tile c (row stride ldc) to init + a @ b, where a and b are packed
// panels of depth kc (6 and 16 values per k) and init's rows are initStride apart (0 repeats one
// row; init may be c itself).
//
//go:noescape
func sgemmKernel6x16(kc int, a, b, c *float32, ldc int, init *float32, initStride int)

// sgemmKernel12x32 sets the 12x32 tile c to init + A @ B on AVX-512, where A is the two 6-row
// panels at a and a+6*kc and B the two 16-column panels at b and b+16*kc; otherwise as
// sgemmKernel6x16, whose bits it gives.
//
//go:noescape
func sgemmKernel12x32(kc int, a, b, c *float32, ldc int, init *float32, initStride int)

// sgemmPackBT16 sets dst[16k+j] = src[j*stride+k] for j < 16 and k < 8*k8.
//
//go:noescape
func sgemmPackBT16(k8 int, src *float32, stride int, dst *float32)

// sgemmCopy16 sets dst[16k+j] = src[k*stride+j] for j < 16 and k < kc.
//
//go:noescape
func sgemmCopy16(kc int, src *float32, stride int, dst *float32)

// sgemmPackA6 sets dst[6k+r] = src[r*stride+k] for r < 6 and k < kc.
//
//go:noescape
func sgemmPackA6(kc int, src *float32, stride int, dst *float32)

// sgemmCopy6 sets dst[6k+r] = src[k*stride+r] for r < 6 and k < kc.
//
//go:noescape
func sgemmCopy6(kc int, src *float32, stride int, dst *float32)

// sgemmZeros is the init row of a tile that starts from zero (up to 32 columns wide).
var sgemmZeros [2 * sgemmNR]float32

// accelWorkspace is the assembly path's packing space, allocated on first use, and the current
// call's parameters, which the task functions (built once, so calls allocate nothing) read.
type accelWorkspace struct {
	packA  [][]float32 // per worker: sgemmMC rows by sgemmKC
	packB  []float32   // shared: the (kc, nc) block of B as 16-column panels
	shared []float32   // shared: the (M, kc) block of A as 6-row panels, when sharedA
	self   *accelWorkspace
	packFn func(worker, task int)
	taskFn func(worker, task int)

	// The call: c(M,N) = a(M,K) @ b(K,N) + init (see gemm).
	M, N, K    int
	a, b       strided[float32]
	c          []float32
	ldc        int
	accumulate bool
	bias       []float32
	// The current block: columns [j0, j0+nc), depth [k0, k0+kc); tasks are mBlocks row blocks of
	// mc rows times nChunks column chunks of cw columns.
	j0, nc, k0, kc           int
	mc, mBlocks, cw, nChunks int
	// sharedA says that A is packed once per block into shared, with B, rather than by every
	// task: when row blocks are few, several tasks share each one (see sgemmSharedRows).
	sharedA bool
}

// gemmAccelerated runs gemm on the assembly kernel when F is float32 and the CPU has AVX2 and FMA,
// and reports whether it did.
func gemmAccelerated[F Float](p *pool, ws *gemmWorkspace[F], M, N, K int, a, b strided[F], c []F, ldc int, accumulate bool, bias []F) bool {
	if !useSgemmKernel {
		return false
	}
	ws32, ok := any(ws).(*gemmWorkspace[float32])
	if !ok {
		return false
	}
	sgemm(p, &ws32.accel, M, N, K, any(a).(strided[float32]), any(b).(strided[float32]), any(c).([]float32), ldc, accumulate, any(bias).([]float32))
	return true
}

// sgemm is gemm for float32 on the assembly kernel. For each block of columns and depth it packs B
// (and, when M is small, A) once, in parallel, into shared buffers; then every task packs its rows
// of A (unless shared) and runs the kernel over its part of the block.
func sgemm(p *pool, s *accelWorkspace, M, N, K int, a, b strided[float32], c []float32, ldc int, accumulate bool, bias []float32) {
	if K == 0 {
		if !accumulate {
			gemmInit(p, M, N, c, ldc, bias)
		}
		return
	}
	s.prepare(p.threads)
	s.M, s.N, s.K, s.a, s.b, s.c, s.ldc, s.accumulate, s.bias = M, N, K, a, b, c, ldc, accumulate, bias
	// Row blocks of equal height (a multiple of the tile), as few as sgemmMC allows; then the
	// columns are cut into chunks until there are a few tasks per thread: tasks are handed out
	// dynamically, so small ones keep both threads busy when a neighbour takes one's core.
	s.mBlocks = (M + sgemmMC - 1) / sgemmMC
	s.mc = roundUp((M+s.mBlocks-1)/s.mBlocks, sgemmMR)
	s.mBlocks = (M + s.mc - 1) / s.mc
	s.sharedA = false
	aPanels := 0
	for s.j0 = 0; s.j0 < N; s.j0 += sgemmNC {
		s.nc = min(sgemmNC, N-s.j0)
		s.nChunks = max(1, (sgemmTasksPerThread*p.threads+s.mBlocks-1)/s.mBlocks)
		s.cw = roundUp((s.nc+s.nChunks-1)/s.nChunks, sgemmNR)
		s.nChunks = (s.nc + s.cw - 1) / s.cw
		if s.nChunks > 1 && M <= sgemmSharedRows && !s.sharedA {
			s.sharedA, aPanels = true, (M+sgemmMR-1)/sgemmMR
			if need := aPanels * sgemmMR * sgemmKC; len(s.shared) < need {
				s.shared = make([]float32, need) // kept for later calls
			}
		}
		for s.k0 = 0; s.k0 < K; s.k0 += sgemmKC {
			s.kc = min(sgemmKC, K-s.k0)
			panels := aPanels + (s.nc+sgemmNR-1)/sgemmNR
			p.parallelTasks((panels+sgemmPackGroup-1)/sgemmPackGroup, s.packFn)
			p.parallelTasks(s.mBlocks*s.nChunks, s.taskFn)
		}
	}
	s.a, s.b, s.c, s.bias = strided[float32]{}, strided[float32]{}, nil, nil // drop the caller's buffers
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// prepare allocates the packing space for workers and builds the task functions, once.
func (s *accelWorkspace) prepare(workers int) {
	if s.self != s {
		s.self = s
		s.packFn = s.packPanels
		s.taskFn = s.task
	}
	for len(s.packA) < workers {
		s.packA = append(s.packA, make([]float32, sgemmMC*sgemmKC))
	}
	if s.packB == nil {
		s.packB = make([]float32, roundUp(sgemmNC, sgemmNR)*sgemmKC)
	}
}

// packPanels packs the group task of sgemmPackGroup panels of the current block: with sharedA,
// the first ceil(M/6) panels are the 6-row panels of A, the rest the 16-column panels of B.
func (s *accelWorkspace) packPanels(_, task int) {
	aPanels := 0
	if s.sharedA {
		aPanels = (s.M + sgemmMR - 1) / sgemmMR
	}
	panels := aPanels + (s.nc+sgemmNR-1)/sgemmNR
	for q := task * sgemmPackGroup; q < min((task+1)*sgemmPackGroup, panels); q++ {
		if q < aPanels {
			i := q * sgemmMR
			sgemmPackA(s.shared[i*s.kc:(i+sgemmMR)*s.kc], s.a, i, s.k0, min(sgemmMR, s.M-i), s.kc)
			continue
		}
		j := (q - aPanels) * sgemmNR
		sgemmPackB(s.packB[j*s.kc:(j+sgemmNR)*s.kc], s.b, s.k0, s.j0+j, s.kc, min(sgemmNR, s.nc-j))
	}
}

// task computes one row block by column chunk of the current block.
func (s *accelWorkspace) task(worker, task int) {
	i0, jc := task/s.nChunks*s.mc, task%s.nChunks*s.cw
	rows, cols := min(s.mc, s.M-i0), min(s.cw, s.nc-jc)
	var packA []float32
	if s.sharedA {
		packA = s.shared[i0*s.kc:]
	} else {
		packA = s.packA[worker]
		for ip := 0; ip < rows; ip += sgemmMR {
			sgemmPackA(packA[ip*s.kc:(ip+sgemmMR)*s.kc], s.a, i0+ip, s.k0, min(sgemmMR, rows-ip), s.kc)
		}
	}
	first := s.k0 == 0 && !s.accumulate // this block sets c rather than adding to it
	kc, ldc, c := s.kc, s.ldc, s.c
	for jr := 0; jr < cols; {
		// With AVX-512, 32 columns at a time: 12x32 tiles where they fit, the rows left over as
		// pairs of 6x16 tiles.
		halves := 1
		ir := 0
		if useSgemm512 && cols-jr >= 2*sgemmNR {
			halves = 2
			for ; ir+2*sgemmMR <= rows; ir += 2 * sgemmMR {
				s.tile12x32(packA, i0+ir, ir, jc+jr, first)
			}
		}
		for ; ir < rows; ir += sgemmMR {
			for h := range halves {
				jb := jc + jr + h*sgemmNR
				if rows-ir < sgemmMR || cols-jr-h*sgemmNR < sgemmNR {
					s.edge6x16(packA, i0, ir, jb, rows, cols-jr-h*sgemmNR, first)
					continue
				}
				j := s.j0 + jb
				off := (i0+ir)*ldc + j
				_ = c[off+(sgemmMR-1)*ldc+sgemmNR-1] // the kernel writes up to here
				init, initStride := s.tileInit(off, j, sgemmNR, first)
				sgemmKernel6x16(kc, &packA[ir*kc : (ir+sgemmMR)*kc][0], &s.packB[jb*kc : (jb+sgemmNR)*kc][0], &c[off], ldc, init, initStride)
			}
		}
		jr += halves * sgemmNR
	}
}

// tile12x32 computes the full 12x32 tile at rows i (ir within the task's packed A) and columns
// j0+jb of C on the AVX-512 kernel.
func (s *accelWorkspace) tile12x32(packA []float32, i, ir, jb int, first bool) {
	kc, ldc, c := s.kc, s.ldc, s.c
	j := s.j0 + jb
	off := i*ldc + j
	_ = packA[(ir+2*sgemmMR)*kc-1]           // the kernel reads two A panels
	_ = s.packB[(jb+2*sgemmNR)*kc-1]         // and two B panels
	_ = c[off+(2*sgemmMR-1)*ldc+2*sgemmNR-1] // and writes up to here
	init, initStride := s.tileInit(off, j, 2*sgemmNR, first)
	sgemm12x32(kc, &packA[ir*kc], &s.packB[jb*kc], &c[off], ldc, init, initStride)
}

// tileInit returns what a full tile at c[off:] (columns j to j+cols-1 of C) starts from, and the
// stride of its rows: c itself when the block adds to c, else the bias or zeros, one row repeated.
func (s *accelWorkspace) tileInit(off, j, cols int, first bool) (*float32, int) {
	switch {
	case !first:
		return &s.c[off], s.ldc
	case s.bias != nil:
		return &s.bias[j : j+cols][0], 0
	default:
		return &sgemmZeros[0], 0
	}
}

// edge6x16 computes the ragged 6x16 tile at rows i0+ir and columns j0+jb of C, cut to the task's
// rows and to colsLeft columns, by running the 6x16 kernel on a padded copy.
func (s *accelWorkspace) edge6x16(packA []float32, i0, ir, jb, rows, colsLeft int, first bool) {
	kc, ldc, c := s.kc, s.ldc, s.c
	panelA := packA[ir*kc : (ir+sgemmMR)*kc]
	panelB := s.packB[jb*kc : (jb+sgemmNR)*kc]
	j := s.j0 + jb
	off := (i0+ir)*ldc + j
	tileRows, tileCols := min(sgemmMR, rows-ir), min(sgemmNR, colsLeft)
	var tile [sgemmMR * sgemmNR]float32
	for r := range tileRows {
		dst := tile[r*sgemmNR : r*sgemmNR+tileCols]
		switch {
		case !first:
			copy(dst, c[off+r*ldc:])
		case s.bias != nil:
			copy(dst, s.bias[j:])
		}
	}
	sgemmKernel6x16(kc, &panelA[0], &panelB[0], &tile[0], sgemmNR, &tile[0], sgemmNR)
	for r := range tileRows {
		copy(c[off+r*ldc:off+r*ldc+tileCols], tile[r*sgemmNR:])
	}
}

// sgemmPackA packs rows [i0, i0+rows) (rows <= 6) and columns [k0, k0+kc) of a into the 6-row
// panel dst: element (r,k) at dst[6k+r], rows past the end zero.
func sgemmPackA(dst []float32, a strided[float32], i0, k0, rows, kc int) {
	dst = dst[:sgemmMR*kc]
	base, rs, cs := i0*a.rowStride+k0*a.colStride, a.rowStride, a.colStride
	switch {
	case rows == sgemmMR && cs == 1: // rows contiguous along k: interleave six rows
		_ = a.data[base+(sgemmMR-1)*rs+kc-1] // the last value read
		sgemmPackA6(kc, &a.data[base], rs, &dst[0])
	case rows == sgemmMR && rs == 1: // columns contiguous: copy six values per k
		_ = a.data[base+(kc-1)*cs+sgemmMR-1] // the last value read
		sgemmCopy6(kc, &a.data[base], cs, &dst[0])
	default: // a partial panel, or strides that need a gather
		packPanels(dst, a, i0, k0, rows, kc, sgemmMR)
	}
}

// sgemmPackB packs rows [k0, k0+kc) and columns [j0, j0+cols) (cols <= 16) of b into the
// 16-column panel dst: element (k,j) at dst[16k+j], columns past the end zero.
func sgemmPackB(dst []float32, b strided[float32], k0, j0, kc, cols int) {
	dst = dst[:sgemmNR*kc]
	base, rs, cs := k0*b.rowStride+j0*b.colStride, b.rowStride, b.colStride
	switch {
	case cols == sgemmNR && cs == 1: // rows of b contiguous: copy 16 values per k
		_ = b.data[base+(kc-1)*rs+sgemmNR-1] // the last value read
		sgemmCopy16(kc, &b.data[base], rs, &dst[0])
	case cols == sgemmNR && rs == 1: // columns of b contiguous along k: transpose
		_ = b.data[base+(sgemmNR-1)*cs+kc-1] // the last value read
		k8 := kc / 8
		if k8 > 0 {
			sgemmPackBT16(k8, &b.data[base], cs, &dst[0])
		}
		for k := 8 * k8; k < kc; k++ {
			d := dst[16*k : 16*k+16]
			for j := range d {
				d[j] = b.data[base+j*cs+k]
			}
		}
	default: // a partial panel, or strides that need a gather
		packPanels(dst, b.transpose(), j0, k0, cols, kc, sgemmNR)
	}
}
