package bert

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/gpt"
)

// Model holds a BERT encoder's parameters, gradients, AdamW moments and activations on one
// backend, all flat buffers planned once with named views into them, as gpt.Model does; it has
// gpt.Model's training methods (Forward, Backward, ZeroGrad, GradNorm, Update, SetParams, ...), so
// one trainer can drive either.
type Model struct {
	Config Config
	be     backend.Backend

	// Parameters, gradients, AdamW moments and their data-parallel layout, in ParamSpecs order
	// (Params, Grads, M, V, GradNorm, Update, UpdateShard, SetParams, ...: gpt.Trainable).
	gpt.Trainable
	grads   paramViews // views of Grads
	fwd     paramViews // views of Compute(): what forward and backward read (Params in fp32)
	scratch paramViews // views of GradScratch (gpt.Parallel.SeparateAccum)

	maxB, maxT int
	// maxRows is the MLM head's capacity: the masked rows of a Forward with targets, or all B*T
	// rows of one without; maxB*maxT unless NewMasked planned for fewer.
	maxRows int
	// compute is the storage format of the parameters' compute copy, the activations and their
	// gradients (gpt.Precision.Compute); statistics (LayerNorm mean and rstd, attention's and
	// the loss's log-sum-exp, the losses) are always fp32.
	compute backend.DType
	a       actBuffers
	// Batch inputs on the backend, int32: tokens and token types (maxB*maxT), sequence lengths
	// (maxB), and the flat indices b*T+t of the masked positions with their target ids (maxRows).
	inputs, types, lengths, maskIndex, maskTargets backend.Buf

	// The last Forward: its shape, mask, masked count and accuracy. cur is false once Backward
	// has turned the logits into their gradient.
	cur         bool
	B, T        int
	mask        backend.AttentionMask
	withTargets bool
	masked      int // M: positions in the loss
	correct     int // of those, how many the argmax of the logits predicts
	hostIndex   []int32
	hostTargets []int32
	hostTypes   []int32
	hostLosses  []float32
	hostLogits  []float32 // the masked rows' logits, downloaded where memory is not the host's
}

// paramViews are named views into a flat parameter (or gradient) buffer; per-layer tensors have
// one view per layer. Tensors a configuration lacks (wtype, lnfw, lnfb) are nil.
type paramViews struct {
	wte, wpe, wtype, embedlnw, embedlnb              backend.Buf
	qkvw, qkvb, attprojw, attprojb, ln1w, ln1b       []backend.Buf
	fcw, fcb, fcprojw, fcprojb, ln2w, ln2b           []backend.Buf
	lnfw, lnfb, headw, headb, headlnw, headlnb, outb backend.Buf
	all                                              []backend.Buf
}

// actBuffers are the activations, sized for (maxB, maxT) and used for any smaller batch by
// passing the batch's sizes to each op (ops read and write only the first N rows). Per-layer
// slices are views of one layer-stacked allocation each. Attention keeps only its output and
// each query's log-sum-exp, never a (T,T) matrix.
type actBuffers struct {
	// Embedding: tokPos = wte[tokens] + wpe[t] and typeEmb = wtype[types] (with token types
	// only), embedSum their sum (or tokPos itself), embedln its LayerNorm: the first block's input.
	tokPos, typeEmb, embedSum, embedln, embedMean, embedRstd backend.Buf // (BT,C) and (BT)
	// Blocks, per layer. Post-LN: res1 = x + attproj, ln1 = LN(res1), res2 = ln1 + fcproj,
	// ln2 = LN(res2) is the block's output. PreLN: ln1 = LN(x), res1 = x + attproj,
	// ln2 = LN(res1), res2 = res1 + fcproj is the output, and lnf = LN(res2) after the last.
	qkv, atty, attLse, attproj, res1, ln1, ln1Mean, ln1Rstd []backend.Buf
	fch, fchGelu, fcproj, res2, ln2, ln2Mean, ln2Rstd       []backend.Buf
	lnf, lnfMean, lnfRstd                                   backend.Buf
	// MLM head on R <= maxRows rows (the M masked positions, or all B*T without targets):
	// gathered (R,C) holds the masked rows of the encoder's output, headPre the dense layer's
	// output, headAct its GELU, headLN the LayerNorm, logits (R,Vp) = headLN @ wte^T + outb.
	gathered, headPre, headAct, headLN, headMean, headRstd backend.Buf
	logits, logitsLse, losses                              backend.Buf
	// Gradient scratch, reused layer after layer: dx and dres (BT,C), datty (BT,C), dqkv
	// (BT,3C), dfch and dfchGelu (BT,4C).
	dx, dres, datty, dqkv, dfch, dfchGelu backend.Buf
}

// New plans and allocates an fp32 model for batches of up to maxB sequences of up to maxT tokens.
// Parameters are zero; call Init or SetParams.
func New(be backend.Backend, cfg Config, maxB, maxT int) (*Model, error) {
	return NewParallel(be, cfg, maxB, maxT, gpt.Precision{}, gpt.Parallel{})
}

// NewWithPrecision is New with the storage plan prec (mixed precision, as gpt.Model's: an fp32
// master with a 16-bit compute copy, 16-bit activations, fp32 statistics and loss).
func NewWithPrecision(be backend.Backend, cfg Config, maxB, maxT int, prec gpt.Precision) (*Model, error) {
	return NewParallel(be, cfg, maxB, maxT, prec, gpt.Parallel{})
}

// NewParallel is NewWithPrecision with the buffer layout par asks for data-parallel training
// (gpt.Parallel: a separate micro-batch gradient for BackwardAccumulate, ZeRO-1 shards).
func NewParallel(be backend.Backend, cfg Config, maxB, maxT int, prec gpt.Precision, par gpt.Parallel) (*Model, error) {
	return newModel(be, cfg, maxB, maxT, maxB*maxT, prec, par, false)
}

// NewMasked is NewParallel for a model that runs batches with targets, at most maxMasked of them
// per batch (Masker.MaxMasked: BERT masks 15% of the positions): the MLM head's buffers, the
// (rows, padded vocabulary) logits above all, hold maxMasked rows rather than maxB*maxT. A
// Forward with more masked positions returns an error, and so does one without targets whose
// B*T rows exceed maxMasked.
func NewMasked(be backend.Backend, cfg Config, maxB, maxT, maxMasked int, prec gpt.Precision, par gpt.Parallel) (*Model, error) {
	if maxMasked < 1 || maxMasked > maxB*maxT {
		return nil, fmt.Errorf("a BERT model planned for %d masked positions per batch of %d x %d; want 1 to %d", maxMasked, maxB, maxT, maxB*maxT)
	}
	return newModel(be, cfg, maxB, maxT, maxMasked, prec, par, false)
}

// NewInference is NewWithPrecision for a model that only runs forward (fill, attention maps):
// no gradients, AdamW moments (gpt.NewFrozen) or backward scratch; Backward refuses to run.
func NewInference(be backend.Backend, cfg Config, maxB, maxT int, prec gpt.Precision) (*Model, error) {
	return newModel(be, cfg, maxB, maxT, maxB*maxT, prec, gpt.Parallel{}, true)
}

func newModel(be backend.Backend, cfg Config, maxB, maxT, maxRows int, prec gpt.Precision, par gpt.Parallel, frozen bool) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := prec.Validate(); err != nil {
		return nil, err
	}
	if maxT > cfg.BlockSize {
		return nil, fmt.Errorf("sequence length %d exceeds the model's block size %d; use --seq-len <= %d", maxT, cfg.BlockSize, cfg.BlockSize)
	}
	if maxB < 1 || maxT < 1 {
		return nil, fmt.Errorf("batch size and sequence length must be >= 1 (got %d, %d)", maxB, maxT)
	}
	if mc, ok := be.(backend.MemoryChecker); ok {
		plan := cfg.memoryPlan(maxB, maxT, maxRows, prec, par, frozen, func(dt backend.DType) int64 { return int64(backend.ElementBytes(be, dt)) })
		if err := mc.CheckMemory(plan); err != nil {
			return nil, err
		}
	}
	var tr gpt.Trainable
	var err error
	if frozen {
		tr, err = gpt.NewFrozen(be, cfg.ParamSpecs(), prec)
	} else {
		tr, err = gpt.NewTrainable(be, cfg.ParamSpecs(), prec, par)
	}
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, be: be, maxB: maxB, maxT: maxT, maxRows: maxRows, Trainable: tr, compute: prec.Compute}
	m.fwd = m.paramViews(m.Compute())
	if !frozen {
		m.grads = m.paramViews(m.Grads)
	}
	if par.SeparateAccum {
		m.scratch = m.paramViews(m.GradScratch())
	}
	BT := maxB * maxT
	m.inputs, m.types, m.lengths = be.AllocInt32(BT), be.AllocInt32(BT), be.AllocInt32(maxB)
	m.maskIndex, m.maskTargets = be.AllocInt32(maxRows), be.AllocInt32(maxRows)
	m.allocActs()
	m.hostIndex, m.hostTargets, m.hostTypes = make([]int32, BT), make([]int32, BT), make([]int32, BT)
	m.hostLosses = make([]float32, BT)
	return m, nil
}

func (m *Model) allocActs() {
	c := m.Config
	L, C, NH, Vp := c.NumLayers, c.Channels, c.NumHeads, c.PaddedVocabSize
	BT, R := m.maxB*m.maxT, m.maxRows
	// Activations and their gradients (act) are in the compute format, statistics (f32) in fp32.
	act := func(n int) backend.Buf { return m.alloc(n, m.compute) }
	f32 := func(n int) backend.Buf { return m.be.Alloc(n) }
	layers := func(alloc func(int) backend.Buf, size int) []backend.Buf {
		buf := alloc(L * size)
		out := make([]backend.Buf, L)
		for l := range L {
			out[l] = m.be.View(buf, l*size, size)
		}
		return out
	}
	a := &m.a
	a.embedSum, a.embedln, a.embedMean, a.embedRstd = act(BT*C), act(BT*C), f32(BT), f32(BT)
	if c.TypeVocabSize > 0 {
		a.tokPos, a.typeEmb = act(BT*C), act(BT*C)
	} else {
		a.tokPos = a.embedSum
	}
	a.qkv, a.atty, a.attLse = layers(act, BT*3*C), layers(act, BT*C), layers(f32, m.maxB*NH*m.maxT)
	a.attproj, a.res1, a.ln1 = layers(act, BT*C), layers(act, BT*C), layers(act, BT*C)
	a.ln1Mean, a.ln1Rstd = layers(f32, BT), layers(f32, BT)
	a.fch, a.fchGelu, a.fcproj = layers(act, BT*4*C), layers(act, BT*4*C), layers(act, BT*C)
	a.res2, a.ln2, a.ln2Mean, a.ln2Rstd = layers(act, BT*C), layers(act, BT*C), layers(f32, BT), layers(f32, BT)
	if c.PreLN {
		a.lnf, a.lnfMean, a.lnfRstd = act(BT*C), f32(BT), f32(BT)
	}
	a.gathered, a.headPre, a.headAct, a.headLN = act(R*C), act(R*C), act(R*C), act(R*C)
	a.headMean, a.headRstd = f32(R), f32(R)
	a.logits, a.logitsLse, a.losses = act(R*Vp), f32(R), f32(R)
	if m.Frozen() {
		return
	}
	a.dx, a.dres, a.datty = act(BT*C), act(BT*C), act(BT*C)
	a.dqkv, a.dfch, a.dfchGelu = act(BT*3*C), act(BT*4*C), act(BT*4*C)
}

// MemoryPlan lists the bytes an fp32 model allocates for batches of up to B sequences of T
// tokens, by category (a test checks it against what New allocates).
func (c Config) MemoryPlan(B, T int) []backend.MemoryItem {
	return c.PrecisionMemoryPlan(B, T, gpt.Precision{})
}

// PrecisionMemoryPlan is MemoryPlan for the storage plan prec, each format at its native size
// (2 bytes for bf16 and fp16), as a GPU stores it.
func (c Config) PrecisionMemoryPlan(B, T int, prec gpt.Precision) []backend.MemoryItem {
	return c.ParallelMemoryPlan(B, T, prec, gpt.Parallel{})
}

// ParallelMemoryPlan is PrecisionMemoryPlan for one rank with the data-parallel layout par (see
// gpt.TrainableMemoryPlan).
func (c Config) ParallelMemoryPlan(B, T int, prec gpt.Precision, par gpt.Parallel) []backend.MemoryItem {
	return c.memoryPlan(B, T, B*T, prec, par, false, nativeSize)
}

// MaskedMemoryPlan is ParallelMemoryPlan for NewMasked's model, whose MLM head holds maxMasked
// rows.
func (c Config) MaskedMemoryPlan(B, T, maxMasked int, prec gpt.Precision, par gpt.Parallel) []backend.MemoryItem {
	return c.memoryPlan(B, T, maxMasked, prec, par, false, nativeSize)
}

// InferenceMemoryPlan is PrecisionMemoryPlan for NewInference's model: no gradients, moments or
// backward scratch.
func (c Config) InferenceMemoryPlan(B, T int, prec gpt.Precision) []backend.MemoryItem {
	return c.memoryPlan(B, T, B*T, prec, gpt.Parallel{}, true, nativeSize)
}

func nativeSize(dt backend.DType) int64 { return int64(dt.Bytes()) }

// memoryPlan is the plan with sizeOf(dt) bytes per element of dt and an MLM head of rows rows.
func (c Config) memoryPlan(B, T, rows int, prec gpt.Precision, par gpt.Parallel, frozen bool, sizeOf func(backend.DType) int64) []backend.MemoryItem {
	L, C, NH, Vp := int64(c.NumLayers), int64(c.Channels), int64(c.NumHeads), int64(c.PaddedVocabSize)
	BT, R := int64(B)*int64(T), int64(rows)
	n := int64(c.NumParams())
	f32, act := sizeOf(backend.F32), sizeOf(prec.Compute)
	// Per layer, in the compute format: qkv (3), atty, attproj, res1, ln1 (4), fch and fchGelu
	// (8), fcproj, res2, ln2 (3) times BT*C; in fp32: four LayerNorm mean/rstd (4*BT) and
	// attention's lse (BT*NH).
	perLayer, perLayerStats := 18*BT*C, 4*BT+BT*NH
	// Once: embedSum, embedln (+ tokPos, typeEmb with token types), the head's four (R,C)
	// buffers, the (R,Vp) logits, and the backward scratch dx, dres, datty, dqkv, dfch, dfchGelu
	// (14*BT*C); in fp32 the embedding LayerNorm's statistics (2*BT), the head LayerNorm's (2*R),
	// lse and losses (2*R).
	scratch := 14 * BT * C
	once, onceStats := 2*BT*C+4*R*C+R*Vp+scratch, 2*BT+4*R
	if c.TypeVocabSize > 0 {
		once += 2 * BT * C
	}
	if c.PreLN {
		once, onceStats = once+BT*C, onceStats+2*BT
	}
	plan := gpt.TrainableMemoryPlan(n, prec, par, sizeOf)
	if frozen {
		plan, once = gpt.FrozenMemoryPlan(n, prec, sizeOf), once-scratch
	}
	return append(plan,
		backend.MemoryItem{Name: "activations", Bytes: act*(L*perLayer+once) + f32*(L*perLayerStats+onceStats)},
		backend.MemoryItem{Name: "tokens", Bytes: 4 * (2*BT + 2*R + int64(B))},
	)
}

// paramViews splits a flat buffer laid out like the parameters into named per-layer views.
func (m *Model) paramViews(flat backend.Buf) paramViews {
	var v paramViews
	whole := map[string]*backend.Buf{
		"wte": &v.wte, "wpe": &v.wpe, "wtype": &v.wtype, "embedlnw": &v.embedlnw, "embedlnb": &v.embedlnb,
		"lnfw": &v.lnfw, "lnfb": &v.lnfb, "headw": &v.headw, "headb": &v.headb,
		"headlnw": &v.headlnw, "headlnb": &v.headlnb, "outb": &v.outb,
	}
	layered := map[string]*[]backend.Buf{
		"qkvw": &v.qkvw, "qkvb": &v.qkvb, "attprojw": &v.attprojw, "attprojb": &v.attprojb,
		"ln1w": &v.ln1w, "ln1b": &v.ln1b, "fcw": &v.fcw, "fcb": &v.fcb,
		"fcprojw": &v.fcprojw, "fcprojb": &v.fcprojb, "ln2w": &v.ln2w, "ln2b": &v.ln2b,
	}
	L, offsets := m.Config.NumLayers, m.Offsets()
	for i, s := range m.Specs() {
		v.all = append(v.all, m.be.View(flat, offsets[i], s.Size()))
		if dst, ok := whole[s.Name]; ok {
			*dst = v.all[i]
			continue
		}
		dst, ok := layered[s.Name]
		if !ok {
			panic("bert: no view for parameter " + s.Name)
		}
		size := s.Size() / L
		for l := range L {
			*dst = append(*dst, m.be.View(flat, offsets[i]+l*size, size))
		}
	}
	return v
}

// alloc returns a buffer of n elements in dt.
func (m *Model) alloc(n int, dt backend.DType) backend.Buf {
	if dt == backend.F32 {
		return m.be.Alloc(n)
	}
	return m.be.AllocDType(n, dt)
}

// Backend is the backend the model lives on.
func (m *Model) Backend() backend.Backend { return m.be }

// Init fills the parameters with BERT's initialisation: every embedding and Linear weight
// N(0, 0.02) (no residual scaling, unlike GPT-2), biases 0 (the output bias too), LayerNorm
// weights 1. The padded vocabulary rows of wte stay 0; they never receive gradient.
func (m *Model) Init(seed uint64) {
	c := m.Config
	rng := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc909))
	const chunk = 1 << 20 // fill and upload a chunk at a time: no host copy of every parameter
	buf := make([]float32, min(chunk, c.NumParams()))
	for i, s := range m.Specs() {
		value := func(int) float32 { return 0 } // biases
		switch s.Name {
		case "embedlnw", "ln1w", "ln2w", "lnfw", "headlnw":
			value = func(int) float32 { return 1 }
		case "wte":
			value = func(j int) float32 {
				if j >= c.VocabSize*c.Channels {
					return 0
				}
				return float32(rng.NormFloat64() * 0.02)
			}
		default:
			if s.Decay { // the 2-D weights
				value = func(int) float32 { return float32(rng.NormFloat64() * 0.02) }
			}
		}
		for lo := 0; lo < s.Size(); lo += chunk {
			part := buf[:min(chunk, s.Size()-lo)]
			for j := range part {
				part[j] = value(lo + j)
			}
			m.UploadParam(i, lo, part)
		}
	}
	m.ParamsChanged()
}

// Batch is one encoder batch of B sequences of T tokens.
type Batch struct {
	B, T int
	// Inputs (B,T) are the token ids after masking, each < V.
	Inputs []int32
	// Targets (B,T) holds the original token at each masked position and -1 everywhere else (not
	// in the loss); nil runs the encoder and the MLM head at every position without a loss
	// (LogitsRow then reads them).
	Targets []int32
	// TokenTypes (B,T), each < TypeVocabSize, or nil for type 0 everywhere.
	TokenTypes []int32
	// Lengths (B), 1 <= Lengths[b] <= T, or nil when every sequence fills its T positions.
	// Positions past a sequence's length are padding: no query sees them, and their targets
	// must be -1.
	Lengths []int32
}

// Forward runs the model on inputs (B,T) whose targets (B,T) are -1 except at the masked
// positions, and returns the mean MLM loss over the masked positions (0 when there are none, or
// without targets); MaskedAccuracy reports how many the model predicts. It is ForwardBatch
// without token types or padding, gpt.Model.Forward's signature.
func (m *Model) Forward(inputs, targets []int32, B, T int) (float32, error) {
	return m.ForwardBatch(Batch{B: B, T: T, Inputs: inputs, Targets: targets})
}

// ForwardBatch runs the encoder and the MLM head on batch b and returns the mean loss over its
// masked positions (see Batch and Forward). The activations stay on the backend for Backward.
func (m *Model) ForwardBatch(b Batch) (float32, error) {
	if err := m.checkBatch(b); err != nil {
		return 0, err
	}
	c, be, p, a := m.Config, m.be, &m.fwd, &m.a
	defer backend.Scope(be, "forward")()
	B, T := b.B, b.T
	BT, C, NH, V, Vp := B*T, c.Channels, c.NumHeads, c.VocabSize, c.PaddedVocabSize
	m.cur, m.B, m.T, m.withTargets, m.masked, m.correct = true, B, T, b.Targets != nil, 0, 0
	m.mask = backend.AttentionMask{Causal: false}
	if b.Lengths != nil {
		be.UploadInt32(m.lengths, b.Lengths)
		m.mask.Lengths = m.lengths // the ops read its first B
	}

	// Embedding: LayerNorm(wte[token] + wpe[t] + wtype[type]).
	be.UploadInt32(m.inputs, b.Inputs)
	var wpe backend.Buf
	if !c.NoPositionalEmbs {
		wpe = p.wpe
	}
	be.EncoderForward(a.tokPos, m.inputs, p.wte, wpe, B, T, C)
	if c.TypeVocabSize > 0 {
		types := b.TokenTypes
		if types == nil {
			types = m.hostTypes[:BT]
			clear(types)
		}
		be.UploadInt32(m.types, types)
		be.EncoderForward(a.typeEmb, m.types, p.wtype, nil, B, T, C)
		be.ResidualLayerNormForward(a.embedSum, a.embedln, a.embedMean, a.embedRstd, a.tokPos, a.typeEmb, p.embedlnw, p.embedlnb, BT, C)
	} else {
		be.LayerNormForward(a.embedln, a.embedMean, a.embedRstd, a.embedSum, p.embedlnw, p.embedlnb, BT, C)
	}

	// Encoder blocks; x is each block's input. Every LayerNorm that follows a residual add is
	// fused with it (ResidualLayerNormForward writes the sum too, which backward reads).
	x := a.embedln
	if c.PreLN {
		be.LayerNormForward(a.ln1[0], a.ln1Mean[0], a.ln1Rstd[0], x, p.ln1w[0], p.ln1b[0], BT, C)
	}
	for l := range c.NumLayers {
		endLayer := backend.Scope(be, "layer")
		attIn := x // post-LN: attention reads the block input; PreLN: its LayerNorm
		if c.PreLN {
			attIn = a.ln1[l]
		}
		be.MatmulForward(a.qkv[l], attIn, p.qkvw[l], p.qkvb[l], BT, C, 3*C)
		be.AttentionForward(a.atty[l], a.attLse[l], a.qkv[l], B, T, C, NH, m.mask)
		be.MatmulForward(a.attproj[l], a.atty[l], p.attprojw[l], p.attprojb[l], BT, C, C)
		if c.PreLN {
			// res1 = x + attn; ln2 = LN(res1) feeds the MLP; res2 = res1 + mlp, LayerNormed
			// into the next block's ln1 or, after the last, lnf.
			be.ResidualLayerNormForward(a.res1[l], a.ln2[l], a.ln2Mean[l], a.ln2Rstd[l], x, a.attproj[l], p.ln2w[l], p.ln2b[l], BT, C)
			m.mlpForward(l, a.ln2[l], BT)
			if l+1 < c.NumLayers {
				be.ResidualLayerNormForward(a.res2[l], a.ln1[l+1], a.ln1Mean[l+1], a.ln1Rstd[l+1], a.res1[l], a.fcproj[l], p.ln1w[l+1], p.ln1b[l+1], BT, C)
			} else {
				be.ResidualLayerNormForward(a.res2[l], a.lnf, a.lnfMean, a.lnfRstd, a.res1[l], a.fcproj[l], p.lnfw, p.lnfb, BT, C)
			}
			x = a.res2[l]
		} else {
			// BERT: ln1 = LN(x + attn) feeds the MLP; the output is ln2 = LN(ln1 + mlp).
			be.ResidualLayerNormForward(a.res1[l], a.ln1[l], a.ln1Mean[l], a.ln1Rstd[l], x, a.attproj[l], p.ln1w[l], p.ln1b[l], BT, C)
			m.mlpForward(l, a.ln1[l], BT)
			be.ResidualLayerNormForward(a.res2[l], a.ln2[l], a.ln2Mean[l], a.ln2Rstd[l], a.ln1[l], a.fcproj[l], p.ln2w[l], p.ln2b[l], BT, C)
			x = a.ln2[l]
		}
		endLayer()
	}
	hidden := m.hidden()

	// MLM head. With targets it runs on the masked rows only: EncoderForward without a position
	// table is a row gather (gathered[i] = hidden[index[i]]) and EncoderBackward its scatter-add.
	// This, rather than a cross-entropy that skips targets of -1, keeps the vocabulary matmul,
	// the largest of a small model's step, to the ~15% of rows in the loss, and it needs no new
	// kernel on either backend.
	rows, headIn := BT, hidden
	if b.Targets != nil {
		M := 0
		for i, tgt := range b.Targets {
			if tgt >= 0 {
				m.hostIndex[M], m.hostTargets[M] = int32(i), tgt
				M++
			}
		}
		m.masked = M
		if M == 0 {
			return 0, nil
		}
		be.UploadInt32(m.maskIndex, m.hostIndex[:M])
		be.UploadInt32(m.maskTargets, m.hostTargets[:M])
		be.EncoderForward(a.gathered, m.maskIndex, hidden, nil, 1, M, C)
		rows, headIn = M, a.gathered
	}
	endHead := backend.Scope(be, "mlm_head")
	be.MatmulForward(a.headPre, headIn, p.headw, p.headb, rows, C, C)
	m.geluForward(a.headAct, a.headPre, rows*C)
	be.LayerNormForward(a.headLN, a.headMean, a.headRstd, a.headAct, p.headlnw, p.headlnb, rows, C)
	be.MatmulForward(a.logits, a.headLN, p.wte, p.outb, rows, C, Vp) // tied to wte, plus outb
	endHead()
	if b.Targets == nil {
		return 0, nil
	}
	M := rows
	be.CrossEntropyForward(a.losses, a.logitsLse, a.logits, m.maskTargets, M, V, Vp)
	losses := m.hostLosses[:M]
	be.Download(losses, a.losses)
	var sum float64
	for _, l := range losses {
		sum += float64(l)
	}
	m.correct = m.countCorrect(M)
	return float32(sum / float64(M)), nil
}

// mlpForward runs block l's MLP on in (BT,C): fcproj[l] = fcproj(gelu(fc(in))).
func (m *Model) mlpForward(l int, in backend.Buf, BT int) {
	p, a, C := &m.fwd, &m.a, m.Config.Channels
	m.be.MatmulForward(a.fch[l], in, p.fcw[l], p.fcb[l], BT, C, 4*C)
	m.geluForward(a.fchGelu[l], a.fch[l], BT*4*C)
	m.be.MatmulForward(a.fcproj[l], a.fchGelu[l], p.fcprojw[l], p.fcprojb[l], BT, 4*C, C)
}

// hidden is the encoder's output (BT,C): the last block's ln2 (post-LN) or lnf (PreLN).
func (m *Model) hidden() backend.Buf {
	if m.Config.PreLN {
		return m.a.lnf
	}
	return m.a.ln2[m.Config.NumLayers-1]
}

func (m *Model) geluForward(out, inp backend.Buf, N int) {
	if m.Config.TanhGELU {
		m.be.GeluForward(out, inp, N)
	} else {
		m.be.GeluErfForward(out, inp, N)
	}
}

func (m *Model) geluBackward(dinp, inp, dout backend.Buf, N int) {
	if m.Config.TanhGELU {
		m.be.GeluBackward(dinp, inp, dout, N)
	} else {
		m.be.GeluErfBackward(dinp, inp, dout, N)
	}
}

// countCorrect counts the masked rows whose largest real-vocabulary logit (the first, on a tie)
// is the target. The logits are read in place where the backend's memory is the host's; a
// backend.TargetMatcher (a GPU) compares on the device and the host reads M flags, written over
// the losses it has already read; any other backend's logits are downloaded, M*Vp floats.
func (m *Model) countCorrect(M int) int {
	Vp, V := m.Config.PaddedVocabSize, m.Config.VocabSize
	var all []float32
	h, inPlace := m.be.(backend.HostMemory)
	if tm, ok := m.be.(backend.TargetMatcher); ok && !inPlace {
		hits := m.be.View(m.a.losses, 0, M)
		tm.MatchTargets(hits, m.a.logits, m.maskTargets, M, V, Vp)
		flags := m.hostLosses[:M]
		m.be.Download(flags, hits)
		correct := 0
		for _, f := range flags {
			if f != 0 {
				correct++
			}
		}
		return correct
	}
	if inPlace {
		all = h.HostFloats(m.a.logits)
	} else {
		m.hostLogits = slices.Grow(m.hostLogits[:0], M*Vp)[:M*Vp]
		m.be.Download(m.hostLogits, m.a.logits)
		all = m.hostLogits
	}
	correct := 0
	for i := range M {
		row := all[i*Vp : i*Vp+V]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if int32(best) == m.hostTargets[i] {
			correct++
		}
	}
	return correct
}

// MaskedAccuracy returns, for the last Forward with targets, how many masked positions the model
// predicts (argmax of the logits equals the target) and how many there were.
func (m *Model) MaskedAccuracy() (correct, masked int) { return m.correct, m.masked }

// checkBatch validates a batch's shape and ids with a one-line error.
func (m *Model) checkBatch(b Batch) error {
	B, T, c := b.B, b.T, m.Config
	if B < 1 || T < 1 {
		return fmt.Errorf("batch size and sequence length must be >= 1 (got %d, %d)", B, T)
	}
	if T > c.BlockSize {
		return fmt.Errorf("sequence length %d exceeds the model's block size %d", T, c.BlockSize)
	}
	if B*T > m.maxB*m.maxT || T > m.maxT || B > m.maxB {
		return fmt.Errorf("batch (%d,%d) exceeds the planned capacity (%d,%d)", B, T, m.maxB, m.maxT)
	}
	if len(b.Inputs) != B*T || (b.Targets != nil && len(b.Targets) != B*T) || (b.TokenTypes != nil && len(b.TokenTypes) != B*T) {
		return fmt.Errorf("batch arrays must hold B*T = %d ids (inputs %d, targets %d, token types %d)", B*T, len(b.Inputs), len(b.Targets), len(b.TokenTypes))
	}
	V := int32(c.VocabSize)
	for i, tok := range b.Inputs {
		if tok < 0 || tok >= V {
			return fmt.Errorf("token %d at position %d is outside the vocabulary [0,%d); the data does not match this model's vocab size", tok, i, V)
		}
	}
	masked := 0
	for i, tok := range b.Targets {
		if tok < -1 || tok >= V {
			return fmt.Errorf("target %d at position %d is neither -1 (not masked) nor in the vocabulary [0,%d)", tok, i, V)
		}
		if tok >= 0 {
			masked++
		}
	}
	switch {
	case b.Targets == nil && B*T > m.maxRows:
		return fmt.Errorf("this model's MLM head holds the logits of %d masked positions, not of all %d of a batch without targets; build it with New or NewInference for that", m.maxRows, B*T)
	case masked > m.maxRows:
		return fmt.Errorf("the batch has %d masked positions, more than the %d this model was planned for (NewMasked)", masked, m.maxRows)
	}
	if b.TokenTypes != nil && c.TypeVocabSize == 0 {
		return fmt.Errorf("the batch has token types but the model has no token-type embedding (type_vocab_size 0)")
	}
	for i, tt := range b.TokenTypes {
		if tt < 0 || int(tt) >= c.TypeVocabSize {
			return fmt.Errorf("token type %d at position %d is outside [0,%d)", tt, i, c.TypeVocabSize)
		}
	}
	if b.Lengths != nil {
		if len(b.Lengths) != B {
			return fmt.Errorf("lengths must hold one length per sequence (%d), got %d", B, len(b.Lengths))
		}
		for s, n := range b.Lengths {
			if n < 1 || int(n) > T {
				return fmt.Errorf("sequence %d has length %d outside [1,%d]", s, n, T)
			}
			for t := int(n); t < T && b.Targets != nil; t++ {
				if b.Targets[s*T+t] >= 0 {
					return fmt.Errorf("sequence %d has a masked target at padded position %d (length %d)", s, t, n)
				}
			}
		}
	}
	return nil
}

// Backward accumulates into Grads the gradient of lossScale * (mean MLM loss of the last
// Forward), which must have had targets. Use lossScale = 1/gradAccum for gradient accumulation:
// that is the mean of the micro-batches' means, which is the mean over all their masked positions
// only when each masks as many (else weigh micro-batch i by M_i/sum M instead). A batch without
// masked positions has zero loss and adds nothing.
func (m *Model) Backward(lossScale float32) error {
	return m.RunBackward(false, func() error { return m.backward(lossScale, &m.grads) })
}

// BackwardAccumulate adds to Grads the gradient of lossScale * (mean MLM loss of the last
// Forward), computed on its own into zeroed scratch first (gpt.Parallel.SeparateAccum), so that k
// micro-batches give the bits of k ranks' sum of one each. Call Backward for a step's first
// micro-batch and this for the others.
func (m *Model) BackwardAccumulate(lossScale float32) error {
	return m.Accumulate(func() error { return m.backward(lossScale, &m.scratch) })
}

// backward accumulates the gradient into the views g (of Grads or of the scratch).
func (m *Model) backward(lossScale float32, g *paramViews) error {
	if !m.cur || !m.withTargets {
		return fmt.Errorf("backward called before a forward pass with targets")
	}
	m.cur = false // the logits become dlogits
	if m.masked == 0 {
		return nil
	}
	c, be, p, a := m.Config, m.be, &m.fwd, &m.a
	defer backend.Scope(be, "backward")()
	B, T, M := m.B, m.T, m.masked
	BT, C, V, Vp := B*T, c.Channels, c.VocabSize, c.PaddedVocabSize

	// MLM head, loss -> the masked rows of the encoder output. a.logits become dlogits in
	// place; datty and dres serve as (M,C) scratch before the blocks need them.
	endHead := backend.Scope(be, "mlm_head")
	be.CrossEntropyBackward(a.logits, a.logits, a.logitsLse, m.maskTargets, lossScale/float32(M), M, V, Vp)
	be.MatmulBackward(a.datty, g.wte, g.outb, a.logits, a.headLN, p.wte, M, C, Vp) // d headLN
	be.Zero(a.dres)
	be.LayerNormBackward(a.dres, g.headlnw, g.headlnb, a.datty, a.headAct, p.headlnw, a.headMean, a.headRstd, M, C) // d headAct
	m.geluBackward(a.datty, a.headPre, a.dres, M*C)                                                                 // d headPre
	be.MatmulBackward(a.dres, g.headw, g.headb, a.datty, a.gathered, p.headw, M, C, C)                              // d gathered
	be.Zero(a.dx)
	be.EncoderBackward(a.dx, nil, a.dres, m.maskIndex, 1, M, C) // scatter-add: dx = d hidden (BT,C)
	endHead()

	// Blocks, last to first. On entry to each, dx holds the gradient of the block's output in
	// post-LN; in PreLN dres carries the residual stream's gradient (a residual add passes its
	// output gradient to both inputs, so each branch's input gradient is added back into it).
	if c.PreLN {
		be.Zero(a.dres)
		be.LayerNormBackward(a.dres, g.lnfw, g.lnfb, a.dx, a.res2[c.NumLayers-1], p.lnfw, a.lnfMean, a.lnfRstd, BT, C)
	}
	for l := c.NumLayers - 1; l >= 0; l-- {
		endLayer := backend.Scope(be, "layer")
		x := a.embedln // the block's input
		if l > 0 {
			x = a.ln2[l-1]
			if c.PreLN {
				x = a.res2[l-1]
			}
		}
		if c.PreLN {
			// MLP branch: res2 = res1 + fcproj(gelu(fc(ln2(res1)))).
			m.mlpBackward(g, l, a.dres, a.dx, a.ln2[l], BT)
			be.LayerNormBackward(a.dres, g.ln2w[l], g.ln2b[l], a.dx, a.res1[l], p.ln2w[l], a.ln2Mean[l], a.ln2Rstd[l], BT, C)
			// Attention branch: res1 = x + attproj(attention(qkv(ln1(x)))).
			m.attentionBackward(g, l, a.dres, a.dx, a.ln1[l], B, T)
			be.LayerNormBackward(a.dres, g.ln1w[l], g.ln1b[l], a.dx, x, p.ln1w[l], a.ln1Mean[l], a.ln1Rstd[l], BT, C)
		} else {
			// ln2 = LN(res2), res2 = ln1 + mlp(ln1): d res2 into dres, then d ln1 = dres + the
			// MLP's input gradient.
			be.Zero(a.dres)
			be.LayerNormBackward(a.dres, g.ln2w[l], g.ln2b[l], a.dx, a.res2[l], p.ln2w[l], a.ln2Mean[l], a.ln2Rstd[l], BT, C)
			m.mlpBackward(g, l, a.dres, a.dx, a.ln1[l], BT)
			be.ResidualForward(a.dx, a.dx, a.dres, BT*C)
			// ln1 = LN(res1), res1 = x + attn(x): likewise to d x.
			be.Zero(a.dres)
			be.LayerNormBackward(a.dres, g.ln1w[l], g.ln1b[l], a.dx, a.res1[l], p.ln1w[l], a.ln1Mean[l], a.ln1Rstd[l], BT, C)
			m.attentionBackward(g, l, a.dres, a.dx, x, B, T)
			be.ResidualForward(a.dx, a.dx, a.dres, BT*C)
		}
		endLayer()
		m.LayerGradsDone(l)
	}

	// Embedding LayerNorm, then the tables. demb is d embedln; the other scratch buffer, zeroed,
	// takes d embedSum.
	demb, dsum := a.dx, a.dres
	if c.PreLN {
		demb, dsum = a.dres, a.dx
	}
	be.Zero(dsum)
	be.LayerNormBackward(dsum, g.embedlnw, g.embedlnb, demb, a.embedSum, p.embedlnw, a.embedMean, a.embedRstd, BT, C)
	var dwpe backend.Buf
	if !c.NoPositionalEmbs {
		dwpe = g.wpe
	}
	be.EncoderBackward(g.wte, dwpe, dsum, m.inputs, B, T, C)
	if c.TypeVocabSize > 0 {
		be.EncoderBackward(g.wtype, nil, dsum, m.types, B, T, C)
	}
	return nil
}

// mlpBackward writes din (BT,C), the gradient of block l's MLP input in (BT,C), given dout, the
// gradient of its output fcproj[l], and accumulates the MLP's parameter gradients.
func (m *Model) mlpBackward(g *paramViews, l int, dout, din, in backend.Buf, BT int) {
	p, a, C := &m.fwd, &m.a, m.Config.Channels
	m.be.MatmulBackward(a.dfchGelu, g.fcprojw[l], g.fcprojb[l], dout, a.fchGelu[l], p.fcprojw[l], BT, 4*C, C)
	m.geluBackward(a.dfch, a.fch[l], a.dfchGelu, BT*4*C)
	m.be.MatmulBackward(din, g.fcw[l], g.fcb[l], a.dfch, in, p.fcw[l], BT, C, 4*C)
}

// attentionBackward writes din (BT,C), the gradient of block l's attention input in, given dout,
// the gradient of its output attproj[l], and accumulates the attention's parameter gradients.
func (m *Model) attentionBackward(g *paramViews, l int, dout, din, in backend.Buf, B, T int) {
	p, a, C, NH := &m.fwd, &m.a, m.Config.Channels, m.Config.NumHeads
	BT := B * T
	m.be.MatmulBackward(a.datty, g.attprojw[l], g.attprojb[l], dout, a.atty[l], p.attprojw[l], BT, C, C)
	m.be.AttentionBackward(a.dqkv, a.datty, a.qkv[l], a.atty[l], a.attLse[l], B, T, C, NH, m.mask)
	m.be.MatmulBackward(din, g.qkvw[l], g.qkvb[l], a.dqkv, in, p.qkvw[l], BT, C, 3*C)
}

// LogitsRow copies the logits (len(dst) <= Vp columns, V real ones first) of sequence b at
// position t of the last Forward without targets into dst.
func (m *Model) LogitsRow(dst []float32, b, t int) error {
	if !m.cur || m.withTargets {
		return fmt.Errorf("logits of every position exist only after a Forward without targets")
	}
	if b < 0 || b >= m.B || t < 0 || t >= m.T || len(dst) > m.Config.PaddedVocabSize {
		return fmt.Errorf("logits row (%d,%d) of %d columns is outside the last batch (%d,%d) x %d", b, t, len(dst), m.B, m.T, m.Config.PaddedVocabSize)
	}
	m.be.Download(dst, m.be.View(m.a.logits, (b*m.T+t)*m.Config.PaddedVocabSize, len(dst)))
	return nil
}

// Attention runs the encoder on one sequence of tokens (without targets) and computes, on the
// host from layer's qkv activation, each head's bidirectional softmax(q.k/sqrt(HS)) over all T
// keys, in float64. The model must have been planned for sequences of at least len(tokens).
func (m *Model) Attention(tokens []int32, layer int) (*gpt.AttentionMap, error) {
	c, T := m.Config, len(tokens)
	if err := gpt.CheckAttentionArgs(layer, c.NumLayers, T); err != nil {
		return nil, err
	}
	if _, err := m.Forward(tokens, nil, 1, T); err != nil {
		return nil, err
	}
	qkv := make([]float32, T*3*c.Channels)
	m.be.Download(qkv, m.be.View(m.a.qkv[layer], 0, len(qkv)))
	return &gpt.AttentionMap{Layer: layer, NumHeads: c.NumHeads, T: T, Probs: gpt.AttentionProbs(qkv, T, c.Channels, c.NumHeads, false)}, nil
}
