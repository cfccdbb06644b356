package cuda

import (
	"fmt"
	"unsafe"

	"github.com/gpt2go/gpt2go/backend"
)

// int8 inference on the GPU (kernels/int8.cu): the weights are quantized once on the host, by
// the CPU backend's rule (backend.QuantizeRowInt8), and each product quantizes its input rows on
// the GPU and takes the integer dot products with dp4a. The int32 sums are exact and the scaling
// is the CPU's sequence of rounded float operations, so the outputs are the CPU backend's bits.

// int8Align is what a quantized row's stride is a multiple of: the kernel reads rows in 16-byte
// pieces, and the zero padding adds nothing to a dot product.
const int8Align = 16

// int8Weight is a matmul weight(OC,C) quantized for MatmulForwardInt8, in device memory: OC rows of
// stride bytes (C int8 values, then zeros) at q and OC float32 scales at scales.
type int8Weight struct {
	q, scales     uintptr
	OC, C, stride int
}

func (w *int8Weight) Len() int             { return w.OC * w.C }
func (w *int8Weight) DType() backend.DType { return backend.I8 }

// Bytes is the device memory of the weight: its padded rows and scales.
func (w *int8Weight) Bytes() int64 { return int64(w.OC)*int64(w.stride) + 4*int64(w.OC) }

// QuantizeInt8 returns weight(OC,C) quantized to int8 by output channel (see backend.Backend):
// read back to the host (it is load-time work), quantized there row by row, and uploaded.
func (be *Backend) QuantizeInt8(weight backend.Buf, OC, C int) (backend.Buf, error) {
	if err := backend.CheckInt8Shape(weight.Len(), OC, C); err != nil {
		return nil, err // before downloading the weight
	}
	w := make([]float32, OC*C)
	be.Download(w, weight)
	if err := be.Sync(); err != nil {
		return nil, err
	}
	q, scales, stride, err := backend.QuantizeInt8Rows(w, OC, C, int8Align)
	if err != nil {
		return nil, err
	}
	qw := &int8Weight{OC: OC, C: C, stride: stride}
	if qw.q, err = be.g.Alloc(int64(len(q))); err != nil {
		return nil, fmt.Errorf("quantize (%d,%d): %w", OC, C, err)
	}
	if qw.scales, err = be.g.Alloc(4 * int64(OC)); err != nil {
		be.fail(be.g.Free(qw.q))
		return nil, fmt.Errorf("quantize (%d,%d): %w", OC, C, err)
	}
	be.allocated += qw.Bytes()
	be.htod(qw.q, unsafe.Pointer(&q[0]), int64(len(q)))
	be.htod(qw.scales, unsafe.Pointer(&scales[0]), 4*int64(OC))
	if err := be.Sync(); err != nil {
		return nil, err
	}
	return qw, nil
}

// int8Rows is the kernel's INT8_ROWS: the input rows each warp multiplies by its weight row.
const int8Rows = 8

// MatmulForwardInt8 is MatmulForward with an int8 weight from QuantizeInt8 (see backend.Ops):
// out(N,OC) = quant(inp(N,C)) @ qweight(OC,C)^T, scaled, + bias(OC). inp, out and bias share
// one storage format.
func (be *Backend) MatmulForwardInt8(out, inp, qweight, bias backend.Buf, N, C, OC int) {
	qw, ok := qweight.(*int8Weight)
	if !ok || qw.C != C || qw.OC != OC {
		be.fail(fmt.Errorf("MatmulForwardInt8: the weight is not an int8 weight of QuantizeInt8 for (OC,C) = (%d,%d)", OC, C))
		return
	}
	x := out.DType()
	if N <= 0 || !be.sameFormat("MatmulForwardInt8", x, inp, bias) {
		return
	}
	if inp.Len() < N*C || out.Len() < N*OC || (bias != nil && bias.Len() < OC) {
		be.fail(fmt.Errorf("MatmulForwardInt8: buffers of %d, %d and %d values for N=%d C=%d OC=%d", inp.Len(), out.Len(), lenOf(bias), N, C, OC))
		return
	}
	xq := be.ensure(&be.scratch.int8q, &be.scratch.int8qN, int64(N)*int64(qw.stride), 1)
	xs := be.ensure(&be.scratch.int8s, &be.scratch.int8sN, int64(N), 4)
	suffix := formatSuffix(x)
	be.launch("MatmulForwardInt8", "quantize_rows_int8"+suffix, N, 256, 0, func(k *Kernel) {
		k.Ptr(xq).Ptr(xs).Ptr(ptrOf(inp)).Int(C).Int(qw.stride)
	})
	const warps = 8
	grid := Blocks(int64(OC), warps) * Blocks(int64(N), int8Rows)
	be.launch("MatmulForwardInt8", "matmul_int8"+suffix, grid, warps*32, 0, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(xq).Ptr(xs).Ptr(qw.q).Ptr(qw.scales).Ptr(ptrOf(bias)).Int(N).Int(OC).Int(qw.stride)
	})
}

// lenOf is buf's length, 0 for nil.
func lenOf(buf backend.Buf) int {
	if buf == nil {
		return 0
	}
	return buf.Len()
}
