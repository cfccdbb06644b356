package profile

import (
	"fmt"
	"strings"

	"github.com/gpt2go/gpt2go/backend"
)

// Cost is the work an op does, computed from its shape alone (never from timing).
//
// FLOPs count the multiply-adds of matrix products only, 2 per multiply-add, as model FLOPs
// utilisation (MFU) does: matmuls and attention's two products. Element-wise ops (layernorm,
// GELU, residual, softmax, AdamW, ...) get 0 FLOPs: they are limited by memory, and their GB/s is
// the figure to judge them by.
//
// Bytes are the logical memory traffic of float32 (and int32) elements: every input read once,
// every output written once, and a gradient that is accumulated (+=) read and written. Caches
// and re-reads inside a kernel are not counted, so Bytes is the least traffic the op could get
// away with and Bytes/time is a lower bound on the bandwidth the kernel achieved.
type Cost struct {
	Flops, Bytes float64
	Dims         []Dim // the op's size arguments, in signature order
}

// Dim is one named size argument of an op (B=4, T=64, ...).
type Dim struct {
	Name string
	N    int
}

// Shape formats dims as "B=4 T=64 C=768".
func Shape(dims []Dim) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = fmt.Sprintf("%s=%d", d.Name, d.N)
	}
	return strings.Join(parts, " ")
}

const word = 4 // bytes per float32 or int32 element

func dims(namesAndSizes ...any) []Dim {
	out := make([]Dim, len(namesAndSizes)/2)
	for i := range out {
		out[i] = Dim{namesAndSizes[2*i].(string), namesAndSizes[2*i+1].(int)}
	}
	return out
}

// elems is the byte count of element counts.
func elems(counts ...int) float64 {
	total := 0.0
	for _, c := range counts {
		total += float64(c)
	}
	return word * total
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// encoderForwardCost: read tokens (B,T), B*T rows of wte and of wpe (if any), write out (B,T,C).
func encoderForwardCost(B, T, C int, pos bool) Cost {
	BT := B * T
	return Cost{Bytes: elems(BT, BT*C, b2i(pos)*BT*C, BT*C), Dims: dims("B", B, "T", T, "C", C)}
}

// encoderBackwardCost: read tokens and dout (B,T,C), accumulate B*T rows of dwte and of dwpe.
func encoderBackwardCost(B, T, C int, pos bool) Cost {
	BT := B * T
	return Cost{Bytes: elems(BT, BT*C, 2*BT*C, b2i(pos)*2*BT*C), Dims: dims("B", B, "T", T, "C", C)}
}

// layerNormForwardCost: read inp (N,C), weight, bias (C); write out (N,C), mean, rstd (N).
func layerNormForwardCost(N, C int) Cost {
	return Cost{Bytes: elems(N*C, 2*C, N*C, 2*N), Dims: dims("N", N, "C", C)}
}

// residualLayerNormForwardCost: read a, b (N,C), weight, bias (C); write residual, out (N,C),
// mean, rstd (N).
func residualLayerNormForwardCost(N, C int) Cost {
	return Cost{Bytes: elems(2*N*C, 2*C, 2*N*C, 2*N), Dims: dims("N", N, "C", C)}
}

// layerNormBackwardCost: read dout, inp (N,C), weight (C), mean, rstd (N); accumulate dinp (N,C),
// dweight, dbias (C).
func layerNormBackwardCost(N, C int) Cost {
	return Cost{Bytes: elems(2*N*C, C, 2*N, 2*N*C, 4*C), Dims: dims("N", N, "C", C)}
}

// matmulForwardCost: 2*N*C*OC FLOPs; read inp (N,C), weight (OC,C), bias (OC); write out (N,OC).
func matmulForwardCost(N, C, OC int, bias bool) Cost {
	return Cost{
		Flops: 2 * float64(N) * float64(C) * float64(OC),
		Bytes: elems(N*C, OC*C, b2i(bias)*OC, N*OC),
		Dims:  dims("N", N, "C", C, "OC", OC),
	}
}

// matmulBackwardCost: 2*N*C*OC FLOPs for dweight += dout^T @ inp and as many again for
// dinp = dout @ weight (4*N*C*OC in all; the bias sum is not counted); read dout (N,OC), inp
// (N,C), weight (OC,C); accumulate dweight (OC,C) and dbias (OC), write dinp (N,C) when present.
func matmulBackwardCost(N, C, OC int, dinp, dbias bool) Cost {
	products := 1 + b2i(dinp)
	return Cost{
		Flops: float64(products) * 2 * float64(N) * float64(C) * float64(OC),
		Bytes: elems(N*OC, N*C, b2i(dinp)*OC*C, 2*OC*C, b2i(dinp)*N*C, b2i(dbias)*2*OC),
		Dims:  dims("N", N, "C", C, "OC", OC),
	}
}

// matmulGeluForwardCost: matmulForwardCost, writing pre (N,OC) as well as out (N,OC).
func matmulGeluForwardCost(N, C, OC int, bias bool) Cost {
	c := matmulForwardCost(N, C, OC, bias)
	c.Bytes += elems(N * OC)
	return c
}

// matmulBackwardGeluCost: matmulBackwardCost with dinp, reading pre (N,C) as well.
func matmulBackwardGeluCost(N, C, OC int, dbias bool) Cost {
	c := matmulBackwardCost(N, C, OC, true, dbias)
	c.Bytes += elems(N * C)
	return c
}

// causalPairs is the number of (query, key) pairs a causal mask keeps in one head: T(T+1)/2.
func causalPairs(T int) float64 { return float64(T) * float64(T+1) / 2 }

// attentionPairs is the number of (query, key) pairs of one head under mask: T(T+1)/2 when
// causal, T*T (about twice as many) when bidirectional. Padding is not counted out: its lengths
// live in device memory, and reading them would synchronise every call.
func attentionPairs(T int, mask backend.AttentionMask) float64 {
	if mask.Causal {
		return causalPairs(T)
	}
	return float64(T) * float64(T)
}

// attentionForwardCost: two products per head over the pairs the mask keeps, q.k and att.v,
// each 2*HS FLOPs a pair: causal, 4*B*NH*HS*T(T+1)/2 (about 2*B*T*T*C). Read qkv (B,T,3C);
// write out (B,T,C) and lse (B,NH,T).
func attentionForwardCost(B, T, C, NH int, mask backend.AttentionMask) Cost {
	HS := C / NH
	return Cost{
		Flops: 4 * float64(B*NH*HS) * attentionPairs(T, mask),
		Bytes: elems(3*B*T*C, B*T*C, B*NH*T),
		Dims:  dims("B", B, "T", T, "C", C, "NH", NH),
	}
}

// attentionBackwardCost: four products over the pairs the mask keeps (dp = dout.v,
// dv += p^T dout, dq += ds k, dk += ds^T q): causal, 8*B*NH*HS*T(T+1)/2, not counting the
// recomputation of the scores q.k (2*B*NH*HS*T(T+1)/2 more). Read dout and out (B,T,C), qkv
// (B,T,3C), lse (B,NH,T); write dqkv (B,T,3C).
func attentionBackwardCost(B, T, C, NH int, mask backend.AttentionMask) Cost {
	HS := C / NH
	return Cost{
		Flops: 8 * float64(B*NH*HS) * attentionPairs(T, mask),
		Bytes: elems(2*B*T*C, 3*B*T*C, B*NH*T, 3*B*T*C),
		Dims:  dims("B", B, "T", T, "C", C, "NH", NH),
	}
}

// attentionForwardCachedCost: new query t sees pos+t+1 keys, so the pairs are
// Tnew*pos + Tnew(Tnew+1)/2, each 4*HS FLOPs as in the forward. Read qkv (B,Tnew,3C) and the
// cached keys and values up to pos+Tnew (2*B*(pos+Tnew)*C); write the new ones (2*B*Tnew*C) and
// out (B,Tnew,C).
func attentionForwardCachedCost(B, Tnew, pos, C, NH int) Cost {
	HS := C / NH
	return Cost{
		Flops: 4 * float64(B*NH*HS) * (float64(Tnew)*float64(pos) + causalPairs(Tnew)),
		Bytes: elems(3*B*Tnew*C, 2*B*(pos+Tnew)*C, 2*B*Tnew*C, B*Tnew*C),
		Dims:  dims("B", B, "Tnew", Tnew, "pos", pos, "C", C, "NH", NH),
	}
}

// geluForwardCost: read inp (N), write out (N); the erf form too.
func geluForwardCost(N int) Cost { return Cost{Bytes: elems(2 * N), Dims: dims("N", N)} }

// geluBackwardCost: read inp, dout (N), write dinp (N); the erf form too.
func geluBackwardCost(N int) Cost { return Cost{Bytes: elems(3 * N), Dims: dims("N", N)} }

// residualForwardCost: read a, b (N), write out (N).
func residualForwardCost(N int) Cost { return Cost{Bytes: elems(3 * N), Dims: dims("N", N)} }

// residualBackwardCost: read dout (N), accumulate da and db (N).
func residualBackwardCost(N int) Cost { return Cost{Bytes: elems(5 * N), Dims: dims("N", N)} }

// crossEntropyForwardCost: read logits (N,V), targets (N); write lse (N), losses (N).
func crossEntropyForwardCost(N, V, Vp int) Cost {
	return Cost{Bytes: elems(N*V, N, N, N), Dims: dims("N", N, "V", V, "Vp", Vp)}
}

// crossEntropyBackwardCost: read logits (N,V), lse (N), targets (N); write dlogits (N,Vp).
func crossEntropyBackwardCost(N, V, Vp int) Cost {
	return Cost{Bytes: elems(N*V, N, N, N*Vp), Dims: dims("N", N, "V", V, "Vp", Vp)}
}

// crossEntropyFusedCost: read logits (N,V) from memory once (the second pass over a row finds it
// in cache), targets (N); write losses, lse (N) and dlogits (N,Vp).
func crossEntropyFusedCost(N, V, Vp int) Cost {
	return Cost{Bytes: elems(N*V, N, N, N, N*Vp), Dims: dims("N", N, "V", V, "Vp", Vp)}
}

// adamWCost: read params, grads, m, v (N); write params, m, v (N).
func adamWCost(N int) Cost { return Cost{Bytes: elems(7 * N), Dims: dims("N", N)} }

// convertCost: read src (N fp32), write dst (N in its format).
func convertCost(N int, dst backend.DType) Cost {
	return Cost{Bytes: float64(word*N + dst.Bytes()*N), Dims: dims("N", N)}
}

// sumSquaresCost: read x (N).
func sumSquaresCost(N int) Cost { return Cost{Bytes: elems(N), Dims: dims("N", N)} }

// zeroCost: write N elements.
func zeroCost(N int) Cost { return Cost{Bytes: elems(N), Dims: dims("N", N)} }

// copyCost: N elements between host and backend memory (a copy on the CPU, a transfer on a GPU).
func copyCost(N int) Cost { return Cost{Bytes: elems(N), Dims: dims("N", N)} }
