package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/gpt2go/gpt2go/backend"
)

// Launch shapes. Shapes of every op are documented on backend.Ops.
const (
	threads    = 256 // elementwise kernels
	rowWarps   = 8   // layernorm: rows (warps) per block
	lnRows     = 8   // layernorm backward: rows per block (one warp each); more blocks hide latency
	colRows    = 256 // bias gradient: rows per partial sum
	attThreads = 128 // attention: threads per (batch, head, row) block
	attTile    = 64  // tiled attention: rows per block (ATT_TILE in attention_tiled.cu)

	// Dynamic shared memory of the head-size-64 kernels (attention_tiled.cu): four to six 64x68
	// tiles and two 64-float rows.
	mm64FwdShared = (4*attTile*68 + 2*attTile) * 4
	mm64DQShared  = 5 * attTile * 68 * 4
	mm64DKVShared = (6*attTile*68 + 2*attTile) * 4
)

// aligned16 says whether every buffer starts on a 16-byte boundary (for float4 and cp.async).
func aligned16(bufs ...backend.Buf) bool {
	for _, b := range bufs {
		if ptrOf(b)%16 != 0 {
			return false
		}
	}
	return true
}

// useMM64 says whether head size HS takes the attention kernels written as tile products, which
// need more than the default 48 KiB of shared memory per block.
func (be *Backend) useMM64(HS int) bool {
	return HS == 64 && !be.noAttentionMM && be.g.Info.MaxSharedOpt >= mm64DKVShared
}

// useTensorCores says whether attention in format x at head size HS runs on tensor cores
// (attention_mma.cu): bf16 and fp16, and fp32 when matmuls are TF32, at head size 64 on sm_80
// and later. Exact fp32 keeps the fp32-FMA kernels.
func (be *Backend) useTensorCores(x backend.DType, HS int) bool {
	return (x.Is16() || be.opts.TF32) && HS == 64 && be.g.Info.Major >= 8 && !be.noTensorCores &&
		be.g.Info.MaxSharedOpt >= tcShared(x, 4)+tcStats
}

// tcShared is the dynamic shared memory of tiles 64-row tiles of 72 elements of format x
// (attention_mma.cu's TC_RS): 3 in the forward, 4 in dq and dkv, which also keeps tcStats bytes
// of lse and delta.
func tcShared(x backend.DType, tiles int) int { return tiles * attTile * 72 * x.Bytes() }

const tcStats = 2 * attTile * 4

// Every op launches the kernels of its buffers' storage formats: the activations' format X (the
// format of the op's main input or output, which its other activation buffers must share) picks
// the variant by formatSuffix, and ops that also write parameter gradients in their own format
// G pick by pairSuffix or launch a separate kernel per format. Statistics (LayerNorm mean and
// rstd, log-sum-exps, losses) are fp32.

// tiledAttention names the tiled attention kernels by head size (attention_tiled.cu); other head
// sizes take the one-row-per-block kernels of attention.cu.
var tiledAttention = map[int]struct{ forward, dq, dkv string }{
	16: {"attention_forward_hs16", "attention_backward_dq_hs16", "attention_backward_dkv_hs16"},
	32: {"attention_forward_hs32", "attention_backward_dq_hs32", "attention_backward_dkv_hs32"},
	48: {"attention_forward_hs48", "attention_backward_dq_hs48", "attention_backward_dkv_hs48"},
	64: {"attention_forward_hs64", "attention_backward_dq_hs64", "attention_backward_dkv_hs64"},
}

// attentionTiles returns the tiled kernels for head size HS and the grid that covers B*NH heads
// of T rows, or ok false when HS has none or an input the kernels copy in 16-byte pieces is not
// 16-byte aligned.
func (be *Backend) attentionTiles(B, T, NH, HS int, inputs ...backend.Buf) (k struct{ forward, dq, dkv string }, grid int, ok bool) {
	k, ok = tiledAttention[HS]
	if !ok || be.naiveAttention {
		return k, 0, false
	}
	if !aligned16(inputs...) {
		return k, 0, false
	}
	return k, (T + attTile - 1) / attTile * B * NH, true
}

func (be *Backend) EncoderForward(out, tokens, wte, wpe backend.Buf, B, T, C int) {
	n := int64(B * T * C)
	x := out.DType()
	if !be.sameFormat("EncoderForward", x, wte, wpe) {
		return
	}
	be.launch("EncoderForward", "encoder_forward"+formatSuffix(x), Blocks(n, threads), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(ptrOf(tokens)).Ptr(ptrOf(wte)).Ptr(ptrOf(wpe)).Int(B * T).Int(T).Int(C)
	})
}

// indexGroupsPerGrid bounds encoder_backward_wte_index's grid: its blocks take token groups
// u, u+indexGroupsPerGrid, ... (a GPT-2 batch of 16k tokens has about 5k distinct ones).
const indexGroupsPerGrid = 4096

// EncoderBackward adds each token's rows of dout in position order, as the CPU does. With the
// index UploadInt32 built for tokens, blocks of 256 channels stride over the distinct tokens in
// parallel, rounding a 16-bit dwte once; without one (tokens is a view inside its allocation,
// was not uploaded whole, or was written through such a view since), one thread per channel
// walks all positions.
func (be *Backend) EncoderBackward(dwte, dwpe, dout, tokens backend.Buf, B, T, C int) {
	g := dwte.DType()
	if !be.sameFormat("EncoderBackward", g, dwpe) {
		return
	}
	suffix := pairSuffix(dout.DType(), g)
	tb := tokens.(*buf)
	if tb.root != nil && tb.ptr == tb.root.ptr { // a view at its allocation's start shares its index
		tb = tb.root
	}
	if idx := tb.idx; idx != nil && idx.n == B*T && idx.dev != 0 {
		// A grid that depends on the batch's size only (not on its distinct tokens, which the
		// kernel reads from the index), so that a recorded graph serves every batch.
		cblocks := Blocks(int64(C), threads)
		be.launch("EncoderBackward", "encoder_backward_wte_index"+suffix, min(B*T, indexGroupsPerGrid)*cblocks, threads, 0, func(k *Kernel) {
			k.Ptr(ptrOf(dwte)).Ptr(ptrOf(dout)).Ptr(idx.dev).Int(B * T).Int(C)
		})
	} else {
		be.launch("EncoderBackward", "encoder_backward_wte"+suffix, Blocks(int64(C), 128), 128, 0, func(k *Kernel) {
			k.Ptr(ptrOf(dwte)).Ptr(ptrOf(dout)).Ptr(ptrOf(tokens)).Int(B * T).Int(C)
		})
	}
	if dwpe != nil {
		be.launch("EncoderBackward", "encoder_backward_wpe"+suffix, Blocks(int64(T*C), threads), threads, 0, func(k *Kernel) {
			k.Ptr(ptrOf(dwpe)).Ptr(ptrOf(dout)).Int(B).Int(T).Int(C)
		})
	}
}

func (be *Backend) LayerNormForward(out, mean, rstd, inp, weight, bias backend.Buf, N, C int) {
	x := out.DType()
	if !be.sameFormat("LayerNormForward", x, inp, weight, bias) || !be.sameFormat("LayerNormForward", backend.F32, mean, rstd) {
		return
	}
	be.launch("LayerNormForward", "layernorm_forward"+formatSuffix(x), Blocks(int64(N), rowWarps), rowWarps*WarpSize, 0, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(ptrOf(mean)).Ptr(ptrOf(rstd)).Ptr(ptrOf(inp)).Ptr(ptrOf(weight)).Ptr(ptrOf(bias)).Int(N).Int(C)
	})
}

func (be *Backend) ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias backend.Buf, N, C int) {
	x := out.DType()
	if !be.sameFormat("ResidualLayerNormForward", x, residual, a, b, weight, bias) || !be.sameFormat("ResidualLayerNormForward", backend.F32, mean, rstd) {
		return
	}
	be.launch("ResidualLayerNormForward", "residual_layernorm_forward"+formatSuffix(x), Blocks(int64(N), rowWarps), rowWarps*WarpSize, 0, func(k *Kernel) {
		k.Ptr(ptrOf(residual)).Ptr(ptrOf(out)).Ptr(ptrOf(mean)).Ptr(ptrOf(rstd)).Ptr(ptrOf(a)).Ptr(ptrOf(b)).
			Ptr(ptrOf(weight)).Ptr(ptrOf(bias)).Int(N).Int(C)
	})
}

func (be *Backend) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd backend.Buf, N, C int) {
	x, g := dinp.DType(), dweight.DType()
	if !be.sameFormat("LayerNormBackward", x, dout, inp, weight) || !be.sameFormat("LayerNormBackward", g, dbias) ||
		!be.sameFormat("LayerNormBackward", backend.F32, mean, rstd) {
		return
	}
	blocks := Blocks(int64(N), lnRows)
	partial := be.ensure(&be.scratch.partial, &be.scratch.partN, int64(blocks)*2*int64(C), 4)
	name := "layernorm_backward" + formatSuffix(x)
	if x == backend.F32 && C%4 == 0 && aligned16(dinp, dout, inp, weight) {
		name = "layernorm_backward4"
	}
	be.launch("LayerNormBackward", name, blocks, WarpSize, 2*C*4, func(k *Kernel) {
		k.Ptr(ptrOf(dinp)).Ptr(partial).Ptr(ptrOf(dout)).Ptr(ptrOf(inp)).Ptr(ptrOf(weight)).Ptr(ptrOf(mean)).Ptr(ptrOf(rstd)).
			Int(N).Int(C).Int(lnRows)
	})
	be.launch("LayerNormBackward", "layernorm_backward_reduce"+formatSuffix(g), Blocks(int64(C), WarpSize), 8*WarpSize, 0, func(k *Kernel) {
		k.Ptr(ptrOf(dweight)).Ptr(ptrOf(dbias)).Ptr(partial).Int(blocks).Int(C)
	})
}

// MatmulForward: row-major out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias is, column-major,
// out^T(OC,N) = weight(OC,C) @ inp^T(C,N), so cuBLASLt computes D(OC,N) = op(A)(OC,C) @ B(C,N)
// with A = weight stored (C,OC) and transposed, B = inp stored (C,N), and the bias added per row
// of D.
func (be *Backend) MatmulForward(out, inp, weight, bias backend.Buf, N, C, OC int) {
	if be.err != nil {
		return
	}
	x := out.DType()
	if !be.sameFormat("MatmulForward", x, inp, weight, bias) {
		return
	}
	s := be.forwardGemm(x, N, C, OC, bias != nil)
	err := be.blas.Matmul(s, ptrOf(weight), ptrOf(inp), ptrOf(out), ptrOf(bias), false)
	if bias != nil && errors.Is(err, errNoAlgorithm) {
		// No bias epilogue for these alignments (cuBLASLt wants more than a view of the flat
		// parameters may have): out starts as the bias in every row and the product accumulates
		// onto it (beta 1), which rounds product + bias once, as the epilogue does.
		be.launch("MatmulForward", "broadcast_rows"+formatSuffix(x), Blocks(int64(N)*int64(OC), threads), threads, 0, func(k *Kernel) {
			k.Ptr(ptrOf(out)).Ptr(ptrOf(bias)).Long(int64(N)).Int(OC)
		})
		s.Bias = false
		err = be.blas.Matmul(s, ptrOf(weight), ptrOf(inp), ptrOf(out), 0, true)
	}
	be.fail(err)
	be.afterOp("MatmulForward")
}

// forwardGemm is MatmulForward's product in format x (see there).
func (be *Backend) forwardGemm(x backend.DType, N, C, OC int, bias bool) Gemm {
	return Gemm{TransA: true, M: OC, N: N, K: C, LDA: C, LDB: C, LDD: OC, Bias: bias, TF32: be.opts.TF32, AB: x, D: x}
}

// dinpGemm is MatmulBackward's dinp product in format x (see there).
func (be *Backend) dinpGemm(x backend.DType, N, C, OC int) Gemm {
	return Gemm{M: C, N: N, K: OC, LDA: C, LDB: OC, LDD: C, TF32: be.opts.TF32, AB: x, D: x}
}

// MatmulBackward, column-major: dinp^T(C,N) = weight(C,OC as stored) @ dout^T(OC,N) (beta 0:
// dinp is overwritten) and
// dweight^T(C,OC) += inp^T(C,N) @ dout(N,OC) (dout stored (OC,N), transposed); dbias by a
// two-pass column sum (fixed order, no atomics).
func (be *Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight backend.Buf, N, C, OC int) {
	if be.err != nil {
		return
	}
	x, g := dout.DType(), dweight.DType()
	if !be.sameFormat("MatmulBackward", x, dinp, inp, weight) || !be.sameFormat("MatmulBackward", g, dbias) {
		return
	}
	if dinp != nil {
		be.fail(be.blas.Matmul(be.dinpGemm(x, N, C, OC), ptrOf(weight), ptrOf(dout), ptrOf(dinp), 0, false))
	}
	// The weight gradient accumulates in its own format (fp32 by default) from 16-bit operands.
	s := Gemm{TransB: true, M: C, N: OC, K: N, LDA: C, LDB: OC, LDD: C, TF32: be.opts.TF32, AB: x, D: g}
	be.fail(be.blas.Matmul(s, ptrOf(inp), ptrOf(dout), ptrOf(dweight), 0, true))
	be.afterOp("MatmulBackward")
	if dbias != nil {
		chunks := Blocks(int64(N), colRows)
		partial := be.ensure(&be.scratch.partial, &be.scratch.partN, int64(chunks)*int64(OC), 4)
		be.launch("MatmulBackward", "column_sum_partial"+formatSuffix(x), Blocks(int64(chunks)*int64(OC), threads), threads, 0, func(k *Kernel) {
			k.Ptr(partial).Ptr(ptrOf(dout)).Int(N).Int(OC).Int(colRows)
		})
		be.launch("MatmulBackward", "column_sum_reduce"+formatSuffix(g), Blocks(int64(OC), threads), threads, 0, func(k *Kernel) {
			k.Ptr(ptrOf(dbias)).Ptr(partial).Int(chunks).Int(OC)
		})
	}
}

// MatmulGeluForward runs the product with cuBLASLt's GELU epilogue (GELU_AUX_BIAS): one pass
// writes pre (the auxiliary output, product plus bias) and out = gelu of the unrounded sum. Column-
// major, D = out^T (OC,N) and aux = pre^T share the leading dimension OC, which cuBLASLt needs to
// be a multiple of 8. Otherwise, in fp32, with Options.NoGeluFusion, or where cuBLASLt has no
// algorithm, it runs MatmulForward and GeluForward.
//
// fp32 stays unfused: CUTLASS-style epilogues evaluate tanh with the hardware approximation
// (tanh.approx.f32, relative error about 2^-11), below the rounding of a 16-bit output but 1e-4
// of an fp32 one, against the 1e-7 of the GELU kernel.
func (be *Backend) MatmulGeluForward(out, pre, inp, weight, bias backend.Buf, N, C, OC int) {
	if be.err != nil {
		return
	}
	x := out.DType()
	if !be.sameFormat("MatmulGeluForward", x, pre, inp, weight, bias) {
		return
	}
	if be.fuseGelu(x, OC) {
		s := be.forwardGemm(x, N, C, OC, bias != nil)
		s.Gelu, s.AuxLD = GeluForward, OC
		err := be.blas.MatmulAux(s, ptrOf(weight), ptrOf(inp), ptrOf(out), ptrOf(bias), ptrOf(pre), false)
		if !errors.Is(err, errNoAlgorithm) {
			be.fail(err)
			be.afterOp("MatmulGeluForward")
			return
		}
	}
	be.MatmulForward(pre, inp, weight, bias, N, C, OC)
	be.GeluForward(out, pre, N*OC)
}

// MatmulBackwardGelu computes dinp with cuBLASLt's DGELU epilogue, gelu'(pre) applied to the
// unrounded product (pre^T (C,N) column-major has dinp^T's leading dimension C, a multiple of 8),
// then the parameter gradients as MatmulBackward does; otherwise (and in fp32, see
// MatmulGeluForward) MatmulBackward and GeluBackward in place.
func (be *Backend) MatmulBackwardGelu(dinp, dweight, dbias, dout, inp, weight, pre backend.Buf, N, C, OC int) {
	if be.err != nil {
		return
	}
	x := dout.DType()
	if !be.sameFormat("MatmulBackwardGelu", x, dinp, inp, weight, pre) {
		return
	}
	if be.fuseGelu(x, C) {
		s := be.dinpGemm(x, N, C, OC)
		s.Gelu, s.AuxLD = GeluBackward, C
		err := be.blas.MatmulAux(s, ptrOf(weight), ptrOf(dout), ptrOf(dinp), 0, ptrOf(pre), false)
		if !errors.Is(err, errNoAlgorithm) {
			be.fail(err)
			be.MatmulBackward(nil, dweight, dbias, dout, inp, weight, N, C, OC)
			return
		}
	}
	be.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
	be.GeluBackward(dinp, pre, dinp, N*C)
}

// fuseGelu says whether a matmul+GELU pair in format x whose GELU side has leading dimension ld
// runs as one product with cuBLASLt's GELU epilogue: in 16-bit formats, with ld a multiple of 8,
// unless Options.NoGeluFusion.
func (be *Backend) fuseGelu(x backend.DType, ld int) bool {
	return !be.opts.NoGeluFusion && x != backend.F32 && ld%8 == 0
}

// afterOp waits after a library call when SyncEachOp is set, so faults name their op.
func (be *Backend) afterOp(op string) {
	if be.opts.SyncEachOp && be.err == nil {
		if err := be.g.Sync(); err != nil {
			be.fail(err)
		}
	}
}

// headSize returns C/NH, failing op when heads do not split C evenly: every attention kernel
// finds head h at column h*C/NH, and the tiled ones copy rows in 16-byte pieces.
func (be *Backend) headSize(op string, C, NH int) (int, bool) {
	if NH <= 0 || C%NH != 0 {
		be.fail(fmt.Errorf("%s: %d channels do not split into %d heads", op, C, NH))
		return 0, false
	}
	return C / NH, true
}

func (be *Backend) AttentionForward(out, lse, qkv backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	HS, ok := be.headSize("AttentionForward", C, NH)
	if !ok || !be.sameFormat("AttentionForward", backend.I32, mask.Lengths) {
		return
	}
	x := qkv.DType()
	if !be.sameFormat("AttentionForward", x, out) || !be.sameFormat("AttentionForward", backend.F32, lse) {
		return
	}
	sfx := formatSuffix(x)
	if k, grid, ok := be.attentionTiles(B, T, NH, HS, qkv); ok {
		name, block, shared := k.forward, attTile, 0
		switch {
		case be.useTensorCores(x, HS):
			name, block, shared = "attention_forward_tc", 128, tcShared(x, 3)
		case be.useMM64(HS):
			name, block, shared = "attention_forward_mm64", 256, mm64FwdShared
		}
		be.launch("AttentionForward", name+sfx, grid, block, shared, func(k *Kernel) {
			k.Ptr(ptrOf(out)).Ptr(ptrOf(lse)).Ptr(ptrOf(qkv)).Int(B).Int(T).Int(C).Int(NH)
			maskArgs(k, mask)
		})
		return
	}
	shared := (T + HS + WarpSize) * 4
	be.launch("AttentionForward", "attention_forward"+sfx, B*NH*T, attThreads, shared, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(ptrOf(lse)).Ptr(ptrOf(qkv)).Int(B).Int(T).Int(C).Int(NH)
		maskArgs(k, mask)
	})
}

func (be *Backend) AttentionBackward(dqkv, dout, qkv, out, lse backend.Buf, B, T, C, NH int, mask backend.AttentionMask) {
	HS, ok := be.headSize("AttentionBackward", C, NH)
	if !ok || !be.sameFormat("AttentionBackward", backend.I32, mask.Lengths) {
		return
	}
	x := qkv.DType()
	if !be.sameFormat("AttentionBackward", x, dqkv, dout, out) || !be.sameFormat("AttentionBackward", backend.F32, lse) {
		return
	}
	sfx := formatSuffix(x)
	rows := int64(B * NH * T)
	delta := be.ensure(&be.scratch.delta, &be.scratch.deltaN, rows, 4)
	be.launch("AttentionBackward", "attention_backward_delta"+sfx, Blocks(rows, threads), threads, 0, func(k *Kernel) {
		k.Ptr(delta).Ptr(ptrOf(dout)).Ptr(ptrOf(out)).Int(B).Int(T).Int(C).Int(NH)
	})
	if k, grid, ok := be.attentionTiles(B, T, NH, HS, qkv, dout); ok {
		dq, dkv, block, dqShared, dkvShared := k.dq, k.dkv, 2*attTile, 0, 0
		switch {
		case be.useTensorCores(x, HS):
			dq, dkv, block, dqShared, dkvShared = "attention_backward_dq_tc", "attention_backward_dkv_tc", 128, tcShared(x, 4), tcShared(x, 4)+tcStats
		case be.useMM64(HS):
			dq, dkv, block, dqShared, dkvShared = "attention_backward_dq_mm64", "attention_backward_dkv_mm64", 256, mm64DQShared, mm64DKVShared
		}
		be.launch("AttentionBackward", dq+sfx, grid, block, dqShared, func(k *Kernel) {
			k.Ptr(ptrOf(dqkv)).Ptr(ptrOf(dout)).Ptr(ptrOf(qkv)).Ptr(ptrOf(lse)).Ptr(delta).Int(B).Int(T).Int(C).Int(NH)
			maskArgs(k, mask)
		})
		be.launch("AttentionBackward", dkv+sfx, grid, block, dkvShared, func(k *Kernel) {
			k.Ptr(ptrOf(dqkv)).Ptr(ptrOf(dout)).Ptr(ptrOf(qkv)).Ptr(ptrOf(lse)).Ptr(delta).Int(B).Int(T).Int(C).Int(NH)
			maskArgs(k, mask)
		})
		return
	}
	be.launch("AttentionBackward", "attention_backward_dq"+sfx, int(rows), attThreads, (T+2*HS)*4, func(k *Kernel) {
		k.Ptr(ptrOf(dqkv)).Ptr(ptrOf(dout)).Ptr(ptrOf(qkv)).Ptr(ptrOf(lse)).Ptr(delta).Int(B).Int(T).Int(C).Int(NH)
		maskArgs(k, mask)
	})
	be.launch("AttentionBackward", "attention_backward_dkv"+sfx, int(rows), attThreads, (2*T+2*HS)*4, func(k *Kernel) {
		k.Ptr(ptrOf(dqkv)).Ptr(ptrOf(dout)).Ptr(ptrOf(qkv)).Ptr(ptrOf(lse)).Ptr(delta).Int(B).Int(T).Int(C).Int(NH)
		maskArgs(k, mask)
	})
}

// maskArgs appends the mask's two kernel arguments, which every attention kernel but the delta
// takes last: the lengths (a null pointer without padding) and causal as 0 or 1. The lengths are
// not checked against [1, T] as the CPU checks them: they are in device memory, and reading them
// back would wait for the queue at every call.
func maskArgs(k *Kernel, mask backend.AttentionMask) {
	causal := 0
	if mask.Causal {
		causal = 1
	}
	k.Ptr(ptrOf(mask.Lengths)).Int(causal)
}

func (be *Backend) GeluForward(out, inp backend.Buf, N int) {
	if !be.sameFormat("GeluForward", out.DType(), inp) {
		return
	}
	be.launch("GeluForward", "gelu_forward"+formatSuffix(out.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(ptrOf(inp)).Long(int64(N)).Int(ewVec(out, inp))
	})
}

func (be *Backend) GeluBackward(dinp, inp, dout backend.Buf, N int) {
	if !be.sameFormat("GeluBackward", dinp.DType(), inp, dout) {
		return
	}
	be.launch("GeluBackward", "gelu_backward"+formatSuffix(dinp.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(dinp)).Ptr(ptrOf(inp)).Ptr(ptrOf(dout)).Long(int64(N)).Int(ewVec(dinp, inp, dout))
	})
}

func (be *Backend) GeluErfForward(out, inp backend.Buf, N int) {
	if !be.sameFormat("GeluErfForward", out.DType(), inp) {
		return
	}
	be.launch("GeluErfForward", "gelu_erf_forward"+formatSuffix(out.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(ptrOf(inp)).Long(int64(N)).Int(ewVec(out, inp))
	})
}

func (be *Backend) GeluErfBackward(dinp, inp, dout backend.Buf, N int) {
	if !be.sameFormat("GeluErfBackward", dinp.DType(), inp, dout) {
		return
	}
	be.launch("GeluErfBackward", "gelu_erf_backward"+formatSuffix(dinp.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(dinp)).Ptr(ptrOf(inp)).Ptr(ptrOf(dout)).Long(int64(N)).Int(ewVec(dinp, inp, dout))
	})
}

func (be *Backend) ResidualForward(out, a, b backend.Buf, N int) {
	if !be.sameFormat("ResidualForward", out.DType(), a, b) {
		return
	}
	be.launch("ResidualForward", "residual_forward"+formatSuffix(out.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(out)).Ptr(ptrOf(a)).Ptr(ptrOf(b)).Long(int64(N)).Int(ewVec(out, a, b))
	})
}

func (be *Backend) ResidualBackward(da, db, dout backend.Buf, N int) {
	if !be.sameFormat("ResidualBackward", dout.DType(), da, db) {
		return
	}
	be.launch("ResidualBackward", "residual_backward"+formatSuffix(dout.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(da)).Ptr(ptrOf(db)).Ptr(ptrOf(dout)).Long(int64(N)).Int(ewVec(da, db, dout))
	})
}

// ceThreads is the block of the cross-entropy kernels, one block per row.
const ceThreads = 512

// ceVec says whether the cross-entropy kernels may touch rows of Vp elements of bufs in chunks
// of 8 with 16-byte accesses (crossentropy.cu's vec).
func ceVec(Vp int, bufs ...backend.Buf) int {
	if Vp%8 == 0 && aligned16(bufs...) {
		return 1
	}
	return 0
}

func (be *Backend) CrossEntropyForward(losses, lse, logits, targets backend.Buf, N, V, Vp int) {
	if !be.sameFormat("CrossEntropyForward", backend.F32, losses, lse) {
		return
	}
	be.launch("CrossEntropyForward", "crossentropy_forward"+formatSuffix(logits.DType()), N, ceThreads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(losses)).Ptr(ptrOf(lse)).Ptr(ptrOf(logits)).Ptr(ptrOf(targets)).Int(V).Int(Vp).Int(ceVec(Vp, logits))
	})
}

func (be *Backend) CrossEntropyBackward(dlogits, logits, lse, targets backend.Buf, dloss float32, N, V, Vp int) {
	if !be.sameFormat("CrossEntropyBackward", logits.DType(), dlogits) || !be.sameFormat("CrossEntropyBackward", backend.F32, lse) {
		return
	}
	be.launch("CrossEntropyBackward", "crossentropy_backward"+formatSuffix(logits.DType()), N, ceThreads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(dlogits)).Ptr(ptrOf(logits)).Ptr(ptrOf(lse)).Ptr(ptrOf(targets)).Float(dloss).Int(V).Int(Vp).Int(ceVec(Vp, logits, dlogits))
	})
}

// MatchTargets is backend.TargetMatcher's op (crossentropy.cu's match_targets).
func (be *Backend) MatchTargets(hits, logits, targets backend.Buf, N, V, Vp int) {
	if !be.sameFormat("MatchTargets", backend.F32, hits) {
		return
	}
	be.launch("MatchTargets", "match_targets"+formatSuffix(logits.DType()), N, ceThreads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(hits)).Ptr(ptrOf(logits)).Ptr(ptrOf(targets)).Int(V).Int(Vp)
	})
}

var _ backend.TargetMatcher = (*Backend)(nil)

func (be *Backend) CrossEntropyFused(losses, lse, logits, targets backend.Buf, dloss float32, N, V, Vp int) {
	if !be.sameFormat("CrossEntropyFused", backend.F32, losses, lse) {
		return
	}
	be.launch("CrossEntropyFused", "crossentropy_fused"+formatSuffix(logits.DType()), N, ceThreads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(losses)).Ptr(ptrOf(lse)).Ptr(ptrOf(logits)).Ptr(ptrOf(targets)).Float(dloss).Int(V).Int(Vp).Int(ceVec(Vp, logits))
	})
}

// ewBlocks is the grid of the elementwise kernels (elementwise.cu's EW elements per thread) for N
// elements.
func ewBlocks(N int) int { return Blocks((int64(N)+ewElems-1)/ewElems, threads) }

// ewElems is elementwise.cu's EW.
const ewElems = 8

// ewVec says whether the elementwise kernels may use 16-byte accesses on bufs (their vec).
func ewVec(bufs ...backend.Buf) int {
	if aligned16(bufs...) {
		return 1
	}
	return 0
}

func (be *Backend) AdamW(params, grads, m, v backend.Buf, N int, h backend.AdamWParams) {
	if !be.sameFormat("AdamW", backend.F32, params, m, v) { // fp32 master weights and moments
		return
	}
	var step [backend.AdamWStepLen]float32 // lr*wd, step size, bc2_sqrt: AdamWAll's scalars
	h.EncodeStep(step[:])
	be.launch("AdamW", "adamw"+formatSuffix(grads.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(params)).Ptr(ptrOf(grads)).Ptr(ptrOf(m)).Ptr(ptrOf(v)).Long(int64(N)).
			Float(h.GradScale).Float(step[0]).Float(h.Beta1).Float(h.Beta2).Float(step[1]).Float(step[2]).Float(h.Eps).
			Int(ewVec(params, grads, m, v))
	})
}

// AdamWAll is one adamw_all launch over every tensor; the segment table goes to the GPU when it
// changes (once per model), the step's scalars are read from step on the GPU.
func (be *Backend) AdamWAll(params, grads, m, v backend.Buf, segs []backend.AdamWSegment, h backend.AdamWParams, step, stats backend.Buf) {
	N := params.Len()
	if n := backend.SegmentsLen(segs); n != N || len(segs) == 0 {
		be.fail(fmt.Errorf("AdamWAll: %d segments cover %d of %d parameters", len(segs), n, N))
		return
	}
	if !be.sameFormat("AdamWAll", backend.F32, params, m, v, step, stats) {
		return
	}
	table := be.segmentTable(segs)
	be.launch("AdamWAll", "adamw_all"+formatSuffix(grads.DType()), ewBlocks(N), threads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(params)).Ptr(ptrOf(grads)).Ptr(ptrOf(m)).Ptr(ptrOf(v)).Long(int64(N)).
			Ptr(table).Int(len(segs)).Ptr(ptrOf(stats)).Ptr(ptrOf(step)).
			Float(h.Beta1).Float(h.Beta2).Float(h.Eps).Int(ewVec(params, grads, m, v))
	})
}

// segmentTable returns adamw_all's table for segs on the GPU (each tensor's end << 1 | decay),
// uploading it when it differs from the last one.
func (be *Backend) segmentTable(segs []backend.AdamWSegment) uintptr {
	t := &be.scratch.segs
	if slices.Equal(t.host, segs) && t.dev != 0 {
		return t.dev
	}
	enc := make([]int64, len(segs))
	end := int64(0)
	for i, s := range segs {
		end += int64(s.Len)
		enc[i] = end << 1
		if s.Decay {
			enc[i] |= 1
		}
	}
	p := be.ensure(&t.dev, &t.devN, int64(len(enc)), 8)
	if be.err == nil {
		if err := be.g.HtoD(p, unsafe.Pointer(&enc[0]), int64(8*len(enc))); err != nil {
			be.fail(err) // refused while recording: the table is not there, so not remembered
			return p
		}
	}
	t.host = slices.Clone(segs)
	return p
}

// gradStatsThreads is grad_stats' block: a thread per group of 64 block sums.
const gradStatsThreads = 256

// GradStats is sum_squares_blocks then grad_stats, both on the GPU, nothing copied back.
func (be *Backend) GradStats(stats, grads backend.Buf, N, block int, clip, lossScale float64) {
	if block <= 0 || block%16 != 0 {
		panic(fmt.Sprintf("cuda.GradStats: blocks of %d", block))
	}
	if !be.sameFormat("GradStats", backend.F32, stats) {
		return
	}
	n := (N + block - 1) / block
	groups := (n + backend.SumGroup - 1) / backend.SumGroup
	sums := be.ensure(&be.scratch.blocks, &be.scratch.blocksN, int64(n+groups), 8)
	be.launch("GradStats", "sum_squares_blocks"+formatSuffix(grads.DType()), n, threads, 0, func(k *Kernel) {
		k.Ptr(sums).Ptr(ptrOf(grads)).Long(int64(N)).Int(block)
	})
	be.launch("GradStats", "grad_stats", 1, gradStatsThreads, 0, func(k *Kernel) {
		k.Ptr(ptrOf(stats)).Ptr(sums).Int(n).Ptr(sums + uintptr(8*n)).Double(clip).Double(lossScale)
	})
}

// SumSquares reduces on the GPU in a fixed order (a fixed grid of partial sums, then one thread)
// and reads back one float64.
func (be *Backend) SumSquares(x backend.Buf, N int) float64 {
	partial := be.scratch.sumsq
	result := partial + 8*sumSquaresBlocks
	be.launch("SumSquares", "sum_squares_partial"+formatSuffix(x.DType()), sumSquaresBlocks, threads, 0, func(k *Kernel) {
		k.Ptr(partial).Ptr(ptrOf(x)).Long(int64(N))
	})
	be.launch("SumSquares", "sum_squares_final", 1, 1, 0, func(k *Kernel) {
		k.Ptr(result).Ptr(partial).Int(sumSquaresBlocks)
	})
	var out float64
	if be.err == nil {
		be.fail(be.g.DtoH(unsafe.Pointer(&out), result, 8))
	}
	if be.err != nil {
		return math.NaN()
	}
	return out
}

// SumSquaresBlocks implements backend.BlockSumSquarer: one kernel, a thread block of `threads`
// per block of x (see sum_squares_blocks), then one copy of the len(dst) sums to the host. The
// gradient norm (gpt.Trainable.GradNorm) and ZeRO-1's shard norms go through it, so a sharded
// run gets the bits of an unsharded one, in one launch instead of one reduction per block.
func (be *Backend) SumSquaresBlocks(dst []float64, x backend.Buf, N, block int) {
	if block <= 0 || block%16 != 0 || len(dst) != (N+block-1)/block {
		panic(fmt.Sprintf("cuda.SumSquaresBlocks: %d blocks of %d for %d elements", len(dst), block, N))
	}
	if len(dst) == 0 {
		return
	}
	sums := be.ensure(&be.scratch.blocks, &be.scratch.blocksN, int64(len(dst)), 8)
	be.launch("SumSquaresBlocks", "sum_squares_blocks"+formatSuffix(x.DType()), len(dst), threads, 0, func(k *Kernel) {
		k.Ptr(sums).Ptr(ptrOf(x)).Long(int64(N)).Int(block)
	})
	if be.err == nil {
		be.fail(be.g.DtoH(unsafe.Pointer(&dst[0]), sums, int64(8*len(dst))))
	}
	if be.err != nil {
		for i := range dst {
			dst[i] = math.NaN()
		}
	}
}

var _ backend.BlockSumSquarer = (*Backend)(nil)

// WarpSize is the number of threads in a warp.
const WarpSize = 32
