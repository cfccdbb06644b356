package gpt

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// MemoryPlan lists the bytes an fp32 model allocates on its backend for batches of up to B
// sequences of T tokens, by category: everything is allocated once, up front, by New. A test
// checks the plan against what New actually allocates.
func (c Config) MemoryPlan(B, T int) []backend.MemoryItem {
	return c.PrecisionMemoryPlan(B, T, Precision{})
}

// PrecisionMemoryPlan is MemoryPlan for the storage plan prec, counting each format at its native
// size (2 bytes for bf16 and fp16), as a GPU stores it.
func (c Config) PrecisionMemoryPlan(B, T int, prec Precision) []backend.MemoryItem {
	return c.ParallelMemoryPlan(B, T, prec, Parallel{})
}

// ParallelMemoryPlan is PrecisionMemoryPlan for one rank with the data-parallel layout par:
// ZeRO-1 keeps 1/Shards of the AdamW moments (and pads the parameters and gradients to equal
// shards), with ShardMaster in a mixed plan 1/Shards of the fp32 master too; SeparateAccum adds
// a second gradient buffer.
func (c Config) ParallelMemoryPlan(B, T int, prec Precision, par Parallel) []backend.MemoryItem {
	return c.memoryPlan(B, T, prec, par, trainableModel, 0, nativeSize)
}

// InferenceMemoryPlan is PrecisionMemoryPlan for NewInference's model: parameters without
// gradients or moments, and one layer's activations, which every layer reuses.
func (c Config) InferenceMemoryPlan(B, T int, prec Precision, opts ...InferenceOption) []backend.MemoryItem {
	return c.memoryPlan(B, T, prec, Parallel{}, inferenceModel, lossRowsOf(opts), nativeSize)
}

// Int8InferenceMemoryPlan is InferenceMemoryPlan for NewInferenceInt8's model: the parameters
// without the fp32 matmul weights, their int8 copies (int8PlanBytes) and the staging buffer
// they were quantized through.
func (c Config) Int8InferenceMemoryPlan(B, T int, prec Precision, opts ...InferenceOption) []backend.MemoryItem {
	return c.memoryPlan(B, T, prec, Parallel{}, int8Model, lossRowsOf(opts), nativeSize)
}

func nativeSize(dt backend.DType) int64 { return int64(dt.Bytes()) }

// memoryPlan is the plan with sizeOf(dt) bytes per element of dt, holding lossRows rows of
// logits (0: all B*T).
func (c Config) memoryPlan(B, T int, prec Precision, par Parallel, kind modelKind, lossRows int, sizeOf func(backend.DType) int64) []backend.MemoryItem {
	L, C, NH, Vp := int64(c.NumLayers), int64(c.Channels), int64(c.NumHeads), int64(c.PaddedVocabSize)
	BT := int64(B) * int64(T)
	n := int64(c.NumParams())
	f32, act := sizeOf(backend.F32), sizeOf(prec.Compute)
	// Per layer, in the compute format: ln1 (BT*C), qkv (3*BT*C), attention out (BT*C), attproj,
	// residual2 (2*BT*C), ln2 (BT*C), fch and gelu (8*BT*C), fcproj and residual3 (2*BT*C); in
	// fp32: the two LayerNorms' mean and rstd (4*BT) and attention's lse (BT*NH).
	perLayer := BT*C + 3*BT*C + BT*C + 2*BT*C + BT*C + 8*BT*C + 2*BT*C
	perLayerStats := 2*BT + BT*NH + 2*BT
	// Once: the embedding output and final layernorm (2*BT*C), the logits (BT*Vp), and the
	// backward scratch dresidual, dlnf, dln1, datty, dln2 (5*BT*C), dqkv (3*BT*C) and dfch
	// (4*BT*C: MatmulBackwardGelu writes the gradient through the GELU directly); in fp32 the
	// final layernorm's statistics (2*BT), the logits' lse and the losses (2*BT).
	scratch := 5*BT*C + 3*BT*C + 4*BT*C
	logitRows := BT
	if lossRows > 0 {
		logitRows = min(BT, int64(lossRows))
	}
	once := 2*BT*C + logitRows*Vp + scratch
	onceStats := 2*BT + 2*BT
	plan := TrainableMemoryPlan(n, prec, par, sizeOf)
	switch kind {
	case inferenceModel: // one layer's activations, no backward scratch
		L, once = 1, once-scratch
		plan = FrozenMemoryPlan(n, prec, sizeOf)
	case int8Model:
		L, once = 1, once-scratch
		var matmul, int8 int64
		for _, s := range c.ParamSpecs() {
			if rows, ok := int8Rows(s.Name, c.Channels); ok {
				matmul += int64(s.Size())
				int8 += int64(c.NumLayers) * int8PlanBytes(int64(rows), int64(s.Size()/c.NumLayers/rows))
			}
		}
		int8 += int8PlanBytes(Vp, C) // the LM head's copy of wte
		plan = append(FrozenMemoryPlan(n-matmul, prec, sizeOf),
			backend.MemoryItem{Name: "int8 matmul weights", Bytes: int8},
			backend.MemoryItem{Name: "int8 staging", Bytes: act * int64(int8StagingLen(c))})
	}
	return append(plan,
		backend.MemoryItem{Name: "activations", Bytes: act*(L*perLayer+once) + f32*(L*perLayerStats+onceStats)},
		backend.MemoryItem{Name: "tokens", Bytes: 2 * 4 * BT},
	)
}

// noteWideSixteenBits adds to err, a refused plan in the mixed precision prec, that the precision
// costs memory here rather than saving it, when it does: extra bytes more than fp32's plan, as on
// the CPU, which stores 16-bit values in float32 beside the fp32 master. A user who reads that
// 16-bit formats halve memory (true on a GPU) would otherwise try them to make a model fit.
func noteWideSixteenBits(err error, prec Precision, extra int64) error {
	pe, ok := err.(*backend.PlanError) // as CheckPlan returns it
	if !ok || !prec.Mixed() || extra <= 0 {
		return err
	}
	pe.Note = fmt.Sprintf("--precision %v needs %s more than fp32 here, not less: this device stores 16-bit values in float32, beside the fp32 master (a GPU stores them in 2 bytes)",
		prec.Compute, backend.FormatBytes(extra))
	return err
}

// PlanBytes sums a memory plan.
func PlanBytes(plan []backend.MemoryItem) int64 {
	var n int64
	for _, it := range plan {
		n += it.Bytes
	}
	return n
}
