// Package backend defines the small set of tensor operations that the GPT-2 model and the trainer
// are written against. A backend (the CPU one in backend/cpu, a CUDA one later) owns memory and
// implements every op; the model never imports a backend package.
//
// Conventions for every op:
//   - Buffers are flat, row-major float32 arrays (int32 for tokens) owned by the backend. A float
//     buffer may instead store a 16-bit format (DType, in dtype.go): ops read every input as
//     float32, compute and accumulate in float32, and round each output element to its buffer's
//     DType once, as they store it. Which buffers are 16-bit is the model's plan, not the op's.
//   - Shapes are given in the comment above each method using B (batch), T (time), C (channels),
//     NH (heads), HS = C/NH (head size), OC (output channels), N (rows, usually B*T),
//     V (real vocab size) and Vp (padded vocab size, Vp >= V).
//   - Forward ops overwrite their outputs. Backward ops ACCUMULATE (+=) into every gradient they
//     produce, so gradients of shared tensors (the tied token embedding, the residual stream) and
//     gradient accumulation over micro-batches need no extra copies; callers zero gradients.
//   - Results must not depend on the number of threads or on scheduling: reductions run in a fixed
//     order, which is what makes resumed runs bit-identical.
package backend

import "math"

// Buf is memory owned by a backend: host memory on the CPU, device memory on a GPU.
type Buf interface {
	// Len is the number of elements (float32 or int32) in the buffer.
	Len() int
	// DType is the format the elements are stored in (a View has its buffer's).
	DType() DType
}

// Backend allocates memory, moves it to and from the host, and runs the model's ops.
type Backend interface {
	// Name is a short human-readable name such as "cpu (2 threads)".
	Name() string

	// Alloc returns a zeroed float32 buffer of n elements.
	Alloc(n int) Buf
	// AllocDType returns a zeroed float buffer of n elements stored as dt (F32, BF16 or F16);
	// AllocDType(n, F32) is Alloc(n). Call CheckDType first: dt must be supported.
	AllocDType(n int, dt DType) Buf
	// CheckDType returns nil when the backend can store dt and run every op on such buffers,
	// else a one-line error that says what to use instead.
	CheckDType(dt DType) error
	// AllocInt32 returns a zeroed int32 buffer of n elements (tokens and targets).
	AllocInt32(n int) Buf
	// View returns the n elements of b starting at off, sharing memory with b.
	View(b Buf, off, n int) Buf
	// Upload copies src into dst[:len(src)], rounded to dst's DType.
	Upload(dst Buf, src []float32)
	// UploadInt32 copies src into the int32 buffer dst[:len(src)].
	UploadInt32(dst Buf, src []int32)
	// Download copies src[:len(dst)] into dst.
	Download(dst []float32, src Buf)
	// Zero sets every element of b to 0.
	Zero(b Buf)
	// QuantizeInt8 returns an int8 copy of the matmul weight(OC,C) for MatmulForwardInt8 (DType
	// I8, Len OC*C): each output channel's row symmetrically, q = round(w*127/max|w|) with the
	// scale max|w|/127 kept beside it. A backend without int8 kernels returns a one-line error.
	QuantizeInt8(weight Buf, OC, C int) (Buf, error)
	// Sync waits for all queued work to finish (a no-op on the CPU).
	Sync() error

	Ops
}

// Ops are the layers of GPT-2, each a forward/backward pair.
type Ops interface {
	// EncoderForward: out(B,T,C) = wte[tokens[b,t]] + wpe[t].
	// tokens is int32 (B,T), wte (Vp,C), wpe (maxT,C); wpe may be nil (no positional embeddings).
	EncoderForward(out, tokens, wte, wpe Buf, B, T, C int)
	// EncoderBackward accumulates dout(B,T,C) into dwte(Vp,C) rows and dwpe(maxT,C); dwpe may be nil.
	EncoderBackward(dwte, dwpe, dout, tokens Buf, B, T, C int)

	// LayerNormForward normalises each of the N rows of inp(N,C) (eps 1e-5, biased variance):
	// out(N,C) = (inp-mean)*rstd*weight(C) + bias(C); it saves mean(N) and rstd(N) for backward.
	LayerNormForward(out, mean, rstd, inp, weight, bias Buf, N, C int)
	// ResidualLayerNormForward fuses a residual add with the LayerNorm that reads it: it writes
	// residual(N,C) = a(N,C) + b(N,C) and then out(N,C), mean(N), rstd(N) exactly as
	// LayerNormForward(out, mean, rstd, residual, weight, bias) would. The backward is
	// LayerNormBackward with inp = residual (the add passes its gradient through unchanged).
	ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias Buf, N, C int)
	// LayerNormBackward accumulates into dinp(N,C), dweight(C), dbias(C) given dout(N,C).
	LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd Buf, N, C int)

	// MatmulForward: out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be nil.
	MatmulForward(out, inp, weight, bias Buf, N, C, OC int)
	// MatmulForwardInt8 is MatmulForward for inference with qweight(OC,C) from QuantizeInt8: each
	// row of inp(N,C) is quantized symmetrically to int8 (scale max|row|/127, round to nearest
	// even), the products are summed exactly in int32, and out(N,OC) = float32(sum) *
	// (rowScale*weightScale[oc]) + bias(OC), rounded in that order; bias may be nil. The int32
	// sums are exact, so the result is the same bits on every kernel and thread count.
	MatmulForwardInt8(out, inp, qweight, bias Buf, N, C, OC int)
	// MatmulBackward writes dinp(N,C) = dout @ weight (an activation gradient: overwritten, so
	// it needs no zeroing) and accumulates the parameter gradients dweight(OC,C) += dout^T @ inp
	// and dbias(OC) += column sums of dout(N,OC). dbias may be nil (no bias); dinp may be nil (not
	// needed).
	MatmulBackward(dinp, dweight, dbias, dout, inp, weight Buf, N, C, OC int)
	// MatmulGeluForward is MatmulForward then GeluForward, an MLP's first half: it writes
	// pre(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC) and out(N,OC) = gelu(pre) (tanh form);
	// bias may be nil. A backend may take gelu of the product before rounding it into pre (a
	// GPU's matmul epilogue does), so in a 16-bit format out can differ from GeluForward(pre)
	// in its last bit.
	MatmulGeluForward(out, pre, inp, weight, bias Buf, N, C, OC int)
	// MatmulBackwardGelu is MatmulBackward for a matmul whose input inp(N,C) was gelu(pre(N,C)),
	// with GeluBackward applied to its dinp: dinp(N,C) = gelu'(pre) * (dout @ weight)
	// (overwritten), and the parameter gradients of MatmulBackward. As in MatmulGeluForward, the
	// product may enter gelu' unrounded.
	MatmulBackwardGelu(dinp, dweight, dbias, dout, inp, weight, pre Buf, N, C, OC int)

	// AttentionForward runs multi-head self-attention. qkv(B,T,3C) holds q, k, v side by side, each
	// split into NH heads of size HS. Query t of sequence b sees the keys t2 that mask allows (see
	// AttentionMask: t2 <= t when causal, every t2 when not, and only t2 < Lengths[b] with
	// padding); with scores s[t,t2] = q[t].k[t2]/sqrt(HS) over those keys, it writes out(B,T,C),
	// softmax(s) @ v per head, and lse(B,NH,T), log(sum over t2 of exp(s[t,t2])) for each query,
	// which is all that backward needs besides qkv and out: the (T,T) attention matrix is never
	// stored (FlashAttention's scheme).
	AttentionForward(out, lse, qkv Buf, B, T, C, NH int, mask AttentionMask)
	// AttentionBackward writes dqkv(B,T,3C) (overwritten) given dout(B,T,C) and the forward's qkv,
	// out and lse, with the forward's mask; masked keys get zero dk and dv.
	AttentionBackward(dqkv, dout, qkv, out, lse Buf, B, T, C, NH int, mask AttentionMask)
	// AttentionForwardCached is AttentionForward for generation with a key/value cache: qkv
	// (B,Tnew,3C) holds q, k, v of the Tnew new positions pos..pos+Tnew-1 of each sequence, whose
	// earlier positions' keys and values are in kcache and vcache (B,NH,maxT,HS). It writes the
	// new k and v into the caches at pos..pos+Tnew-1, then out(B,Tnew,C), each new query's
	// softmax(s) @ v over the cached positions 0..pos+t (causal). Needs pos+Tnew <= maxT; forward
	// only, no lse.
	AttentionForwardCached(out, kcache, vcache, qkv Buf, B, Tnew, pos, maxT, C, NH int)

	// GeluForward: out(N) = gelu(inp(N)) with the tanh approximation.
	GeluForward(out, inp Buf, N int)
	// GeluBackward writes dinp(N) = gelu'(inp) * dout (overwritten).
	GeluBackward(dinp, inp, dout Buf, N int)
	// GeluErfForward: out(N) = gelu(inp(N)) in the exact form x*Phi(x) = 0.5*x*(1+erf(x/sqrt(2)))
	// (BERT's); GeluForward's tanh form approximates it to within ~5e-4.
	GeluErfForward(out, inp Buf, N int)
	// GeluErfBackward writes dinp(N) = (Phi(x) + x*phi(x)) * dout for x = inp(N) (overwritten),
	// phi being the standard normal density.
	GeluErfBackward(dinp, inp, dout Buf, N int)

	// ResidualForward: out(N) = a(N) + b(N).
	ResidualForward(out, a, b Buf, N int)
	// ResidualBackward accumulates da(N) += dout and db(N) += dout.
	ResidualBackward(da, db, dout Buf, N int)

	// CrossEntropyForward takes logits(N,Vp) and int32 targets(N) and writes lse(N), the log-sum-exp
	// of each row's first V columns (columns V..Vp-1 are padding and are ignored), and
	// losses(N) = lse - logits[target] = -log softmax[target]. logits are not modified, so they can
	// still be read after an evaluation; lse is what CrossEntropyBackward needs.
	CrossEntropyForward(losses, lse, logits, targets Buf, N, V, Vp int)
	// CrossEntropyBackward writes (does not accumulate) dlogits(N,Vp) = (softmax - onehot(target)) * dloss
	// for columns < V, with softmax = exp(logits - lse) from the forward's lse(N), and 0 for padding;
	// dloss is the gradient of the loss w.r.t. each position's loss (1/N for a mean). dlogits may be
	// the same buffer as logits.
	CrossEntropyBackward(dlogits, logits, lse, targets Buf, dloss float32, N, V, Vp int)
	// CrossEntropyFused is CrossEntropyForward(losses, lse, logits, targets) followed by
	// CrossEntropyBackward(logits, logits, lse, targets, dloss), in one pass over each row of
	// logits(N,Vp) that leaves dlogits in its place: for training, where the logits are not
	// read again. losses(N), lse(N) and dlogits are the same bits as the two ops give.
	CrossEntropyFused(losses, lse, logits, targets Buf, dloss float32, N, V, Vp int)

	// AdamW updates params(N) in place from grads(N) as torch.optim.AdamW does: decoupled weight decay
	// p -= lr*weightDecay*p, moments m, v (N), bias correction with the 1-based step.
	// gradScale multiplies every gradient first (used for gradient clipping).
	AdamW(params, grads, m, v Buf, N int, h AdamWParams)
	// SumSquares returns the sum of squares of x(N) accumulated in float64 (for the gradient norm).
	SumSquares(x Buf, N int) float64
	// GradStats computes, without a copy to the host, what AdamWAll reads: with sum the float64
	// sum of squares of grads(N) taken per block of `block` elements as SumSquaresBlocks does
	// and then over the blocks in order (the gradient norm's definition), it writes into
	// stats(StepStatsLen) what StepStatsOf(sum, clip, lossScale) gives (see StepStats).
	GradStats(stats, grads Buf, N, block int, clip, lossScale float64)
	// AdamWAll is AdamW over every tensor of flat buffers in one op: segs lists the tensors in
	// order (their lengths sum to N = params.Len()), each decayed or not. It reads h's betas
	// and eps; what changes from step to step it reads from the backend, so that a recorded
	// step (Grapher) replays with the current values: the learning rate's terms from
	// step(AdamWStepLen), which the caller wrote with h.EncodeStep (h.LR, h.WeightDecay and
	// h.Step are used there only), and the gradient scale from stats, GradStats' buffer
	// (h.GradScale is ignored). Nothing changes when stats says the norm is not finite. Each
	// element gets the bits AdamW gives it.
	AdamWAll(params, grads, m, v Buf, segs []AdamWSegment, h AdamWParams, step, stats Buf)
	// Convert writes dst(N) = src(N) in dst's DType (the 16-bit copy of fp32 master weights). With
	// seed 0 it rounds to nearest even like every op; otherwise stochastically (RoundStochastic),
	// element i with the bits StochasticBits(seed, i).
	Convert(dst, src Buf, N int, seed uint64)
	// ConvertSeeded is Convert with the seed read from the backend: seed(SeedLen) holds its
	// bits as PutBits64 writes them (0 rounds to nearest), so that a recorded step (Grapher)
	// replays with the seed of the step it runs.
	ConvertSeeded(dst, src Buf, N int, seed Buf)
}

// AttentionMask says which keys each query of AttentionForward and AttentionBackward sees.
// GPT-2 is causal with no padding (AttentionMask{Causal: true}); an encoder such as BERT is
// bidirectional, with padding when its batch holds sequences shorter than T.
type AttentionMask struct {
	// Causal: query t sees keys t2 <= t only; otherwise every key of its sequence.
	Causal bool
	// Lengths, int32 (B) or nil (every sequence is T long), holds each sequence's length
	// 1 <= Lengths[b] <= T: keys at positions >= Lengths[b] are masked out for every query.
	// Queries at padded positions t >= Lengths[b] are computed like the others, over the valid
	// keys (all of them, or t2 <= t when causal, which is all of them too), so their outputs are
	// finite and their gradients exact; a model that ignores those positions gives them zero
	// dout, and they then contribute nothing to dqkv.
	Lengths Buf
}

// AdamWParams are the scalars of one AdamW update.
type AdamWParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	GradScale                          float32
	Step                               int // 1-based
}

// AdamWStepLen is the length of AdamWAll's per-step buffer.
const AdamWStepLen = 3

// AdamWBias returns the bias-corrected step size lr/(1-beta1^t) and sqrt(1-beta2^t), computed
// in float64 and rounded to float32: the scalars every backend's AdamW uses.
func (h AdamWParams) AdamWBias() (stepSize, bc2Sqrt float32) {
	bc1 := 1 - math.Pow(float64(h.Beta1), float64(h.Step))
	bc2 := 1 - math.Pow(float64(h.Beta2), float64(h.Step))
	return float32(float64(h.LR) / bc1), float32(math.Sqrt(bc2))
}

// EncodeStep writes into dst(AdamWStepLen) what AdamWAll reads of step h: the decay
// lr*weightDecay (float32 product; tensors without decay use 0), and AdamWBias.
func (h AdamWParams) EncodeStep(dst []float32) {
	dst[0] = h.LR * h.WeightDecay
	dst[1], dst[2] = h.AdamWBias()
}

// AdamWSegment is one tensor of AdamWAll's flat buffers: Len elements, decayed or not.
type AdamWSegment struct {
	Len   int
	Decay bool
}

// SegmentsLen is the number of elements segs cover.
func SegmentsLen(segs []AdamWSegment) int {
	n := 0
	for _, s := range segs {
		n += s.Len
	}
	return n
}

// AdamWEach is AdamWAll's definition op by op, for the tests of every backend's AdamWAll: AdamW
// (with h's GradScale) on each segment's views of the flat buffers, with h's weight decay where
// the segment decays and none where it does not.
func AdamWEach(be Backend, params, grads, m, v Buf, segs []AdamWSegment, h AdamWParams) {
	off := 0
	for _, s := range segs {
		hs := h
		if !s.Decay {
			hs.WeightDecay = 0
		}
		be.AdamW(be.View(params, off, s.Len), be.View(grads, off, s.Len), be.View(m, off, s.Len), be.View(v, off, s.Len), s.Len, hs)
		off += s.Len
	}
}

// StepStats is what GradStats writes, in a float32 buffer of StepStatsLen elements: the
// gradient norm (a float64, its low and high 32 bits in elements 0 and 1), AdamW's gradient
// scale (element 2) and whether the norm is finite (element 3: 1 or 0).
type StepStats struct {
	Norm   float64
	Scale  float32
	Finite bool
}

// SeedLen is the length of ConvertSeeded's seed buffer: a float32 buffer holding the seed's
// bits as PutBits64 writes them.
const SeedLen = 2

// PutBits64 writes the low and high 32 bits of b into dst[0] and dst[1] as bit patterns, not
// values: how a float32 buffer carries a uint64 (a seed) or a float64's bits (the norm of
// StepStats) between the host and a backend.
func PutBits64(dst []float32, b uint64) {
	dst[0], dst[1] = math.Float32frombits(uint32(b)), math.Float32frombits(uint32(b>>32))
}

// Bits64 is PutBits64's inverse.
func Bits64(src []float32) uint64 {
	return uint64(math.Float32bits(src[0])) | uint64(math.Float32bits(src[1]))<<32
}

// StepStatsLen is the length of GradStats' buffer.
const StepStatsLen = 4

// StepStatsOf is the definition every backend's GradStats follows, in float64 and in this
// order: norm = sqrt(sum)/lossScale (lossScale is 1 without fp16's loss scaling), the clip
// factor min(1, clip/(norm+1e-6)) as torch.nn.utils.clip_grad_norm_ computes it (1 when clip
// <= 0), and Scale = factor/lossScale rounded to float32, the gradients' multiplier that
// undoes the loss scale and clips. A norm that is not finite gives Finite false and Scale 0.
func StepStatsOf(sum, clip, lossScale float64) StepStats {
	norm := math.Sqrt(sum) / lossScale
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		return StepStats{Norm: norm}
	}
	factor := 1.0
	if clip > 0 {
		factor = min(1, clip/(norm+1e-6))
	}
	return StepStats{Norm: norm, Scale: float32(factor / lossScale), Finite: true}
}

// Encode writes s into dst(StepStatsLen) in GradStats' layout.
func (s StepStats) Encode(dst []float32) {
	PutBits64(dst, math.Float64bits(s.Norm))
	dst[2], dst[3] = s.Scale, 0
	if s.Finite {
		dst[3] = 1
	}
}

// DecodeStepStats reads GradStats' buffer, copied to the host as it is (its first two
// elements are not float32 values but the norm's bits).
func DecodeStepStats(src []float32) StepStats {
	return StepStats{Norm: math.Float64frombits(Bits64(src)), Scale: src[2], Finite: src[3] == 1}
}

// Peaker is implemented by backends that know their peak float32 matmul throughput, measured or
// from the hardware's specification. The trainer and `gpt2go bench` use it to report model FLOPs
// utilisation (MFU); a backend without it simply gets no MFU figure.
type Peaker interface {
	// PeakFLOPS returns the peak float32 matmul rate in FLOP/s; the first call may take a moment
	// to measure it, later calls return the cached value.
	PeakFLOPS() float64
}

// MemoryItem is one category of a memory plan: parameters, gradients, activations and so on.
type MemoryItem struct {
	Name  string
	Bytes int64
}

// MemoryChecker is implemented by backends with a fixed memory budget (a GPU). The model calls
// CheckMemory with its plan before it allocates anything, so a model that cannot fit stops with
// a clear message instead of failing half-way through allocation.
type MemoryChecker interface {
	CheckMemory(plan []MemoryItem) error
}

// MemoryBudgeter is implemented by backends that can say what CheckMemory checks a plan
// against, as of now (bench uses it to name the largest micro-batch that fits). It is a separate
// interface so that a wrapper forwarding only CheckMemory still has its plans checked.
type MemoryBudgeter interface {
	MemoryBudget() (MemoryBudget, error)
}

// BudgetOf is be's MemoryBudget as of now, or the zero budget (Free 0: unknown) when be is no
// MemoryBudgeter or cannot say.
func BudgetOf(be Backend) MemoryBudget {
	if mb, ok := be.(MemoryBudgeter); ok {
		if b, err := mb.MemoryBudget(); err == nil {
			return b
		}
	}
	return MemoryBudget{}
}

// TargetMatcher is implemented by backends whose memory the host cannot read in place (a
// GPU): a masked-language model counts its correct predictions from N flags instead of
// downloading N*Vp logits.
type TargetMatcher interface {
	// MatchTargets writes hits (N) fp32: 1 where the first largest of the first V of row i's
	// logits (N,Vp) is at column targets[i] (int32 (N)), else 0.
	MatchTargets(hits, logits, targets Buf, N, V, Vp int)
}

// HostMemory is implemented by backends whose buffers already live in host memory (the CPU):
// HostFloats returns a buffer's elements without a copy, so checkpoint writers need no second
// copy of the parameters and optimizer state. Checkpoint writers only read the slice; the host
// communicators of package dist (MPI) also write collective results into it, in place, between
// ops. A 16-bit buffer's slice holds float32 values representable in its format: whoever writes
// one must keep it so.
type HostMemory interface {
	HostFloats(b Buf) []float32
}
