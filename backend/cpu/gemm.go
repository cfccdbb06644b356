package cpu

// This file holds the blocked matrix multiply behind the matmul ops. A (M,K) and B (K,N) blocks are
// packed into contiguous panels (gemmMR rows of A, gemmNR columns of B, interleaved along K) that a
// register-tiled micro-kernel streams through. Blocks of the output are the parallel tasks. Every
// output element is accumulated over k = 0..K-1 in order in one register (stored and reloaded
// exactly between depth blocks), so the result does not depend on the blocking, on the thread
// count or on scheduling, and block sizes may be chosen freely per call.
//
// This is the portable path, written for float32 and float64 alike (the finite-difference tests run
// it in float64). On amd64 with AVX2 and FMA, float32 runs instead on the same scheme with an
// assembly micro-kernel (gemm_amd64.go, gemm_amd64.s), several times faster.

const (
	gemmMR = 4   // rows of the micro-tile
	gemmNR = 2   // columns of the micro-tile
	gemmMC = 256 // most rows of an output block (a multiple of gemmMR)
	gemmNC = 256 // most columns of an output block (a multiple of gemmNR)
	gemmKC = 256 // depth of a packed block
)

// strided is a matrix view: element (i,j) is data[i*rowStride+j*colStride].
type strided[F Float] struct {
	data                 []F
	rowStride, colStride int
}

// transpose returns the view of m's transpose.
func (m strided[F]) transpose() strided[F] {
	return strided[F]{data: m.data, rowStride: m.colStride, colStride: m.rowStride}
}

// gemmWorkspace is per-worker packing space, allocated once, and the assembly path's own
// (gemm_amd64.go; empty on other architectures).
type gemmWorkspace[F Float] struct {
	packA, packB [][]F
	accel        accelWorkspace
}

func newGemmWorkspace[F Float](workers int) gemmWorkspace[F] {
	ws := gemmWorkspace[F]{packA: make([][]F, workers), packB: make([][]F, workers)}
	for w := range workers {
		ws.packA[w] = make([]F, gemmMC*gemmKC)
		ws.packB[w] = make([]F, gemmKC*gemmNC)
	}
	return ws
}

// gemm computes c(M,N) = init + a(M,K) @ b(K,N), where init is c itself when accumulate is set,
// else bias(N) in every row, or zero when bias is nil; c is row-major with row stride ldc. float32
// runs on an assembly kernel where there is one (gemmAccelerated), everything else here.
func gemm[F Float](p *pool, ws *gemmWorkspace[F], M, N, K int, a, b strided[F], c []F, ldc int, accumulate bool, bias []F) {
	if M == 0 || N == 0 || gemmAccelerated(p, ws, M, N, K, a, b, c, ldc, accumulate, bias) {
		return
	}
	if !accumulate {
		gemmInit(p, M, N, c, ldc, bias)
	}
	if K == 0 {
		return
	}
	// Tall blocks keep repacking of B low; when that leaves too few tasks to balance the threads
	// (GPT-2 has M = 256 rows in most matmuls), the columns are cut finer.
	mBlocks := (M + gemmMC - 1) / gemmMC
	nBlocks := max((N+gemmNC-1)/gemmNC, (4*p.threads+mBlocks-1)/mBlocks)
	nc := (N + nBlocks - 1) / nBlocks
	nc = min(gemmNC, max(16, (nc+gemmNR-1)/gemmNR*gemmNR))
	nBlocks = (N + nc - 1) / nc
	job := reuse[gemmJob[F]](p)
	*job = gemmJob[F]{ws: ws, M: M, N: N, K: K, nc: nc, nBlocks: nBlocks, a: a, b: b, c: c, ldc: ldc}
	p.forTasks(mBlocks*nBlocks, job)
	*job = gemmJob[F]{}
}

// gemmJob is the portable gemm's loop: task t is the output block of row block t/nBlocks and
// column block t%nBlocks (a struct from reuse rather than a closure, so a call allocates nothing).
type gemmJob[F Float] struct {
	ws          *gemmWorkspace[F]
	M, N, K     int
	nc, nBlocks int
	a, b        strided[F]
	c           []F
	ldc         int
}

func (j *gemmJob[F]) runTask(worker, task int) {
	i0, j0 := task/j.nBlocks*gemmMC, task%j.nBlocks*j.nc
	mc, ncTask := min(gemmMC, j.M-i0), min(j.nc, j.N-j0)
	packA, packB := j.ws.packA[worker], j.ws.packB[worker]
	for k0 := 0; k0 < j.K; k0 += gemmKC {
		kc := min(gemmKC, j.K-k0)
		packPanels(packA, j.a, i0, k0, mc, kc, gemmMR)
		packPanels(packB, j.b.transpose(), j0, k0, ncTask, kc, gemmNR)
		gemmBlock(packA, packB, j.c[i0*j.ldc+j0:], j.ldc, mc, ncTask, kc)
	}
}

// gemmInit sets every row of c(M,N) to bias, or to zero when bias is nil.
func gemmInit[F Float](p *pool, M, N int, c []F, ldc int, bias []F) {
	job := reuse[gemmInitJob[F]](p)
	*job = gemmInitJob[F]{N: N, c: c, ldc: ldc, bias: bias}
	p.forRanges(M, 16, job)
	*job = gemmInitJob[F]{}
}

type gemmInitJob[F Float] struct {
	N    int
	c    []F
	ldc  int
	bias []F
}

func (j *gemmInitJob[F]) runRange(lo, hi int) {
	for i := lo; i < hi; i++ {
		row := j.c[i*j.ldc : i*j.ldc+j.N]
		if j.bias != nil {
			copy(row, j.bias[:j.N])
		} else {
			clear(row)
		}
	}
}

// gemmBlock accumulates the (rows,cols) block c += packA @ packB of packed panels of depth kc.
func gemmBlock[F Float](packA, packB, c []F, ldc, rows, cols, kc int) {
	for jr := 0; jr < cols; jr += gemmNR {
		panelB := packB[jr*kc : (jr+gemmNR)*kc]
		for ir := 0; ir < rows; ir += gemmMR {
			panelA := packA[ir*kc : (ir+gemmMR)*kc]
			off := ir*ldc + jr
			if ir+gemmMR <= rows && jr+gemmNR <= cols {
				gemmKernel(panelA, panelB, c[off:], ldc)
				continue
			}
			// Ragged edge: run the same kernel on a copy of the valid part of the tile.
			var tile [gemmMR * gemmNR]F
			tileRows, tileCols := min(gemmMR, rows-ir), min(gemmNR, cols-jr)
			for r := range tileRows {
				copy(tile[r*gemmNR:r*gemmNR+tileCols], c[off+r*ldc:off+r*ldc+tileCols])
			}
			gemmKernel(panelA, panelB, tile[:], gemmNR)
			for r := range tileRows {
				copy(c[off+r*ldc:off+r*ldc+tileCols], tile[r*gemmNR:r*gemmNR+tileCols])
			}
		}
	}
}

// packPanels copies rows [i0, i0+rows) and columns [k0, k0+kc) of m into dst as panels of w rows:
// panel p holds rows i0+p*w..i0+p*w+w-1 at dst[p*w*kc:], element (r,k) at k*w+r. Rows past the
// end are zero.
func packPanels[F Float](dst []F, m strided[F], i0, k0, rows, kc, w int) {
	for ip := 0; ip < rows; ip += w {
		panel := dst[ip*kc : (ip+w)*kc]
		base := (i0+ip)*m.rowStride + k0*m.colStride
		if ip+w <= rows && packFullPanel(panel, m, base, kc, w) {
			continue
		}
		valid := min(w, rows-ip)
		for k := range kc {
			dk := panel[k*w : k*w+w]
			for r := range valid {
				dk[r] = m.data[base+r*m.rowStride+k*m.colStride]
			}
			clear(dk[valid:])
		}
	}
}

// packFullPanel is packPanels' fast path for a full panel of 4 or 2 rows starting at m.data[base]
// when m is contiguous along rows or along columns; it reports whether it applied.
func packFullPanel[F Float](panel []F, m strided[F], base, kc, w int) bool {
	rs, cs := m.rowStride, m.colStride
	switch {
	case w == 4 && cs == 1:
		r0, r1 := m.data[base:][:kc], m.data[base+rs:][:kc]
		r2, r3 := m.data[base+2*rs:][:kc], m.data[base+3*rs:][:kc]
		for k, v := range r0 {
			d := panel[4*k : 4*k+4 : 4*k+4]
			d[0], d[1], d[2], d[3] = v, r1[k], r2[k], r3[k]
		}
	case w == 2 && cs == 1:
		r0, r1 := m.data[base:][:kc], m.data[base+rs:][:kc]
		for k, v := range r0 {
			d := panel[2*k : 2*k+2 : 2*k+2]
			d[0], d[1] = v, r1[k]
		}
	case w == 4 && rs == 1:
		for k := range kc {
			s := m.data[base+k*cs:][:4:4]
			d := panel[4*k : 4*k+4 : 4*k+4]
			d[0], d[1], d[2], d[3] = s[0], s[1], s[2], s[3]
		}
	case w == 2 && rs == 1:
		for k := range kc {
			s := m.data[base+k*cs:][:2:2]
			d := panel[2*k : 2*k+2 : 2*k+2]
			d[0], d[1] = s[0], s[1]
		}
	default:
		return false
	}
	return true
}

// gemmKernel accumulates the 4x2 tile c (row stride ldc) += a @ b, where a and b are packed
// panels of equal depth kc: a holds 4 values per k, b holds 2. Each of the 8 sums runs over k in
// order in its own register. 4x2 is the largest tile whose accumulators, operands and products fit
// in the 15 SSE registers the Go compiler allocates.
func gemmKernel[F Float](a, b, c []F, ldc int) {
	c0 := c[0:2:2]
	c1 := c[ldc : ldc+2 : ldc+2]
	c2 := c[2*ldc : 2*ldc+2 : 2*ldc+2]
	c3 := c[3*ldc : 3*ldc+2 : 3*ldc+2]
	c00, c01 := c0[0], c0[1]
	c10, c11 := c1[0], c1[1]
	c20, c21 := c2[0], c2[1]
	c30, c31 := c3[0], c3[1]
	n := len(a) / 4
	b = b[:n*2]
	k := 0
	// Unrolled 8 deep: the compiler schedules all of an iteration's multiplies before its adds
	// when the sums only feed the next iteration, which spills registers; unrolling confines that
	// to the last of the 8 steps.
	for ; k+8 <= n; k += 8 {
		aa := a[k*4 : k*4+32 : k*4+32]
		bb := b[k*2 : k*2+16 : k*2+16]
		c00 += aa[0] * bb[0]
		c01 += aa[0] * bb[1]
		c10 += aa[1] * bb[0]
		c11 += aa[1] * bb[1]
		c20 += aa[2] * bb[0]
		c21 += aa[2] * bb[1]
		c30 += aa[3] * bb[0]
		c31 += aa[3] * bb[1]
		c00 += aa[4] * bb[2]
		c01 += aa[4] * bb[3]
		c10 += aa[5] * bb[2]
		c11 += aa[5] * bb[3]
		c20 += aa[6] * bb[2]
		c21 += aa[6] * bb[3]
		c30 += aa[7] * bb[2]
		c31 += aa[7] * bb[3]
		c00 += aa[8] * bb[4]
		c01 += aa[8] * bb[5]
		c10 += aa[9] * bb[4]
		c11 += aa[9] * bb[5]
		c20 += aa[10] * bb[4]
		c21 += aa[10] * bb[5]
		c30 += aa[11] * bb[4]
		c31 += aa[11] * bb[5]
		c00 += aa[12] * bb[6]
		c01 += aa[12] * bb[7]
		c10 += aa[13] * bb[6]
		c11 += aa[13] * bb[7]
		c20 += aa[14] * bb[6]
		c21 += aa[14] * bb[7]
		c30 += aa[15] * bb[6]
		c31 += aa[15] * bb[7]
		c00 += aa[16] * bb[8]
		c01 += aa[16] * bb[9]
		c10 += aa[17] * bb[8]
		c11 += aa[17] * bb[9]
		c20 += aa[18] * bb[8]
		c21 += aa[18] * bb[9]
		c30 += aa[19] * bb[8]
		c31 += aa[19] * bb[9]
		c00 += aa[20] * bb[10]
		c01 += aa[20] * bb[11]
		c10 += aa[21] * bb[10]
		c11 += aa[21] * bb[11]
		c20 += aa[22] * bb[10]
		c21 += aa[22] * bb[11]
		c30 += aa[23] * bb[10]
		c31 += aa[23] * bb[11]
		c00 += aa[24] * bb[12]
		c01 += aa[24] * bb[13]
		c10 += aa[25] * bb[12]
		c11 += aa[25] * bb[13]
		c20 += aa[26] * bb[12]
		c21 += aa[26] * bb[13]
		c30 += aa[27] * bb[12]
		c31 += aa[27] * bb[13]
		c00 += aa[28] * bb[14]
		c01 += aa[28] * bb[15]
		c10 += aa[29] * bb[14]
		c11 += aa[29] * bb[15]
		c20 += aa[30] * bb[14]
		c21 += aa[30] * bb[15]
		c30 += aa[31] * bb[14]
		c31 += aa[31] * bb[15]
	}
	for ; k < n; k++ {
		aa := a[k*4 : k*4+4 : k*4+4]
		bb := b[k*2 : k*2+2 : k*2+2]
		c00 += aa[0] * bb[0]
		c01 += aa[0] * bb[1]
		c10 += aa[1] * bb[0]
		c11 += aa[1] * bb[1]
		c20 += aa[2] * bb[0]
		c21 += aa[2] * bb[1]
		c30 += aa[3] * bb[0]
		c31 += aa[3] * bb[1]
	}
	c0[0], c0[1] = c00, c01
	c1[0], c1[1] = c10, c11
	c2[0], c2[1] = c20, c21
	c3[0], c3[1] = c30, c31
}

// MatmulKernel names the float32 matmul micro-kernel that this CPU runs, e.g. "avx2+fma 6x16",
// with why the AVX-512 kernel is off when the CPU has it but it is not used.
func MatmulKernel() string {
	var k string
	switch {
	case useSgemm512:
		k = "avx512 12x32 (avx2+fma 6x16 at the edges)"
	case useSgemmKernel:
		k = "avx2+fma 6x16"
	default:
		k = "portable Go 4x2"
	}
	if sgemm512Note != "" {
		k += "; " + sgemm512Note
	}
	return k
}
