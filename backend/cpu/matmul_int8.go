package cpu

import (
	"fmt"
	"unsafe"

	"github.com/gpt2go/gpt2go/backend"
)

// This file holds int8 inference: QuantizeInt8 turns a matmul weight into int8 rows with one
// scale per output channel, and MatmulForwardInt8 quantizes each input row the same way and takes
// the dot products in integers. Only those integer dot products run in assembly (VPDPBUSD on
// AVX-512 VNNI, VPMADDWD on AVX2, matmul_int8_amd64.s); they are exact in int32, so every path
// gives the same sums, and the float work around them (scales, bias) is one Go loop in a fixed
// order: the outputs are the same bits on every path and thread count.

// int8Align is the multiple that rows are padded to with zeros (one ZMM register of bytes), so the
// kernels have no ragged tails: a zero weight adds nothing whatever the input holds there.
const int8Align = 64

// int8Buf is a weight (OC,C) quantized by rows: q holds OC rows of stride = C rounded up to
// int8Align (zero padded), scales the OC row scales, rowSums each row's sum of q (what VPDPBUSD's
// unsigned input, x+128, adds on top of the dot product: 128*rowSum).
type int8Buf struct {
	q       []int8
	scales  []float32
	rowSums []int32
	OC, C   int
	stride  int
}

func (b *int8Buf) Len() int             { return b.OC * b.C }
func (b *int8Buf) DType() backend.DType { return backend.I8 }

// Bytes is the memory of an int8 weight: its padded rows, scales and row sums.
func (b *int8Buf) Bytes() int64 {
	return int64(len(b.q)) + 4*int64(len(b.scales)+len(b.rowSums))
}

// QuantizeInt8 returns weight(OC,C) quantized to int8 by output channel (see backend.Backend).
func (be *Backend) QuantizeInt8(weight backend.Buf, OC, C int) (backend.Buf, error) {
	q, scales, stride, err := backend.QuantizeInt8Rows(Floats(weight), OC, C, int8Align)
	if err != nil {
		return nil, err
	}
	qb := &int8Buf{q: q, scales: scales, rowSums: make([]int32, OC), OC: OC, C: C, stride: stride}
	for o := range OC {
		var sum int32
		for _, v := range q[o*stride : (o+1)*stride] {
			sum += int32(v)
		}
		qb.rowSums[o] = sum
	}
	return qb, nil
}

// int8Kernel is the integer dot product kernel MatmulForwardInt8 runs.
type int8Kernel int

const (
	int8Go   int8Kernel = iota // the portable loop
	int8AVX2                   // VPMADDWD on the inputs widened to int16
	int8VNNI                   // AVX-512 VNNI VPDPBUSD on the inputs shifted to unsigned
)

func (k int8Kernel) String() string {
	return [...]string{"go", "avx2", "vnni"}[k]
}

// int8Scratch holds one MatmulForwardInt8's quantized input rows in the kernel's format: int8 (go),
// widened to int16 (avx2) or shifted by +128 to uint8 (vnni), with row stride padded like the
// weight's, and each row's scale.
type int8Scratch struct {
	x8     []int8
	x16    []int16
	scales []float32
}

// MatmulForwardInt8 is MatmulForward with an int8 weight (see backend.Ops): out(N,OC) =
// quant(inp(N,C)) @ qweight(OC,C)^T, scaled, + bias(OC). Tasks are blocks of weight rows, each
// taking every input row (the matvec scheme: a block is read from memory once and reused from
// cache for the other rows).
func (be *Backend) MatmulForwardInt8(out, inp, qweight, bias backend.Buf, N, C, OC int) {
	qw, ok := qweight.(*int8Buf)
	if !ok || qw.C != C || qw.OC != OC {
		panic(fmt.Sprintf("cpu: MatmulForwardInt8 of %T (%d,%d) weight", qweight, OC, C))
	}
	o, x, b := Floats(out)[:N*OC], Floats(inp)[:N*C], Floats(bias)
	kernel := int8Active()
	s := &be.int8
	s.quantize(&be.pool, x, N, C, qw.stride, kernel)
	rows := max(4, matvecBlockBytes/qw.stride/4*4)
	if N == 1 {
		rows = max(rows, (OC+rangesPerThread*be.threads-1)/(rangesPerThread*be.threads))
	}
	job := reuse[int8Job](&be.pool)
	*job = int8Job{out: o, bias: b, w: qw, s: s, N: N, rows: rows, kernel: kernel}
	be.forTasks((OC+rows-1)/rows, job)
	*job = int8Job{}
	be.round(out, N*OC)
}

// quantize fills s with the N rows of x(N,C), quantized and laid out for kernel, rows in
// parallel (each row's result depends on that row only).
func (s *int8Scratch) quantize(p *pool, x []float32, N, C, stride int, kernel int8Kernel) {
	s.x8 = grow(s.x8, N*stride)
	s.scales = grow(s.scales, N)
	if kernel == int8AVX2 {
		s.x16 = grow(s.x16, N*stride)
	}
	job := reuse[quantizeJob](p)
	*job = quantizeJob{s: s, x: x, C: C, stride: stride, kernel: kernel}
	p.forRanges(N, max(1, 4096/stride), job)
	*job = quantizeJob{}
}

type quantizeJob struct {
	s         *int8Scratch
	x         []float32
	C, stride int
	kernel    int8Kernel
}

func (j *quantizeJob) runRange(lo, hi int) {
	s, C, stride := j.s, j.C, j.stride
	for n := lo; n < hi; n++ {
		q := s.x8[n*stride : (n+1)*stride]
		s.scales[n] = backend.QuantizeRowInt8(q, j.x[n*C:(n+1)*C])
		clear(q[C:])
		switch j.kernel {
		case int8AVX2:
			for i, v := range q {
				s.x16[n*stride+i] = int16(v)
			}
		case int8VNNI:
			for i, v := range q {
				q[i] = int8(uint8(v) ^ 0x80) // as uint8: v+128
			}
		}
	}
}

// grow returns s resliced to n elements, reallocated when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

type int8Job struct {
	out, bias []float32
	w         *int8Buf
	s         *int8Scratch
	N, rows   int
	kernel    int8Kernel
}

func (j *int8Job) runTask(_, task int) {
	w, s, OC, stride := j.w, j.s, j.w.OC, j.w.stride
	lo, hi := task*j.rows, min(OC, (task+1)*j.rows)
	block := w.q[lo*stride : hi*stride]
	n := 0
	if j.kernel != int8Go { // four input rows at a time, then the rest one by one
		for ; n+4 <= j.N; n += 4 {
			// The int32 sums go into the output's own memory and are turned into floats in place.
			all := unsafe.Slice((*int32)(unsafe.Pointer(&j.out[n*OC])), 4*OC)
			var done int
			if j.kernel == int8VNNI {
				done = dotsInt8VNNI4(all[lo:], OC, hi-lo, s.x8[n*stride:(n+4)*stride], block)
			} else {
				done = dotsInt8AVX2x4(all[lo:], OC, hi-lo, s.x16[n*stride:(n+4)*stride], block)
			}
			for i := range 4 {
				sums := all[i*OC+lo : i*OC+hi]
				j.dots(sums[done:], n+i, block[done*stride:])
				j.finish(n+i, lo, sums)
			}
		}
	}
	for ; n < j.N; n++ {
		dst := j.out[n*OC+lo : n*OC+hi]
		sums := unsafe.Slice((*int32)(unsafe.Pointer(&dst[0])), len(dst))
		j.dots(sums, n, block)
		j.finish(n, lo, sums)
	}
}

// dots sets sums[i] to input row n's dot product with weight row i of rows, one row at a time,
// on the job's kernel.
func (j *int8Job) dots(sums []int32, n int, rows []int8) {
	s, stride := j.s, j.w.stride
	switch j.kernel {
	case int8AVX2:
		dotsInt8AVX2(sums, s.x16[n*stride:(n+1)*stride], rows)
	case int8VNNI:
		dotsInt8VNNI(sums, s.x8[n*stride:(n+1)*stride], rows)
	default:
		dotsInt8(sums, s.x8[n*stride:(n+1)*stride], rows)
	}
}

// finish turns input row n's int32 sums against weight rows lo.. (in the output's memory) into
// the outputs: the VNNI kernels' shift undone, then scaled and biased in the documented order.
func (j *int8Job) finish(n, lo int, sums []int32) {
	w := j.w
	if j.kernel == int8VNNI {
		for i := range sums {
			sums[i] -= 128 * w.rowSums[lo+i] // exact in int32: undoes the +128 on x
		}
	}
	dst := unsafe.Slice((*float32)(unsafe.Pointer(&sums[0])), len(sums))
	xs := j.s.scales[n]
	for i, sum := range sums {
		v := float32(float32(sum) * float32(xs*w.scales[lo+i])) // conversions: no fused multiply-add
		if j.bias != nil {
			v += j.bias[lo+i]
		}
		dst[i] = v
	}
}

// dotsInt8 sets dst[j] = x . rows[j*k:(j+1)*k] in int32 for j < len(dst), with k = len(x).
func dotsInt8(dst []int32, x, rows []int8) {
	k := len(x)
	for j := range dst {
		row := rows[j*k : (j+1)*k]
		var sum int32
		for i, v := range x {
			sum += int32(v) * int32(row[i])
		}
		dst[j] = sum
	}
}
