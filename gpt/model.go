package gpt

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gpt2go/gpt2go/backend"
)

// Model holds a GPT-2's parameters, gradients, AdamW moments and activations on one backend.
// All of them are flat buffers planned once; named views point into them.
type Model struct {
	Config Config
	be     backend.Backend

	// Parameters, gradients, moments, the compute copy and the data-parallel layout (Params,
	// Grads, M, V, Update, GradNorm, ...; trainable.go, parallel.go).
	Trainable
	grads   paramViews // views of Grads
	scratch paramViews // views of GradScratch (Parallel.SeparateAccum)
	fwd     paramViews // views of Compute()

	maxB, maxT int
	inputs     backend.Buf // int32 (B,T)
	targets    backend.Buf // int32 (B,T)
	actBufs    actBuffers
	views      map[[2]int]*acts // activation views per (B,T) shape, built once each
	cur        *acts            // views of the last Forward (SetBatch)
	curTargets bool             // whether its batch had targets
	batch      *acts            // views of the last SetBatch (kept after Backward, for QueueLosses)
	// fusedScale is the lossScale of the last forward when it was ForwardTrain, whose logits
	// already hold dlogits for it; NaN after a plain Forward.
	fusedScale float32
	lossHost   []float32
	genCache   *KVCache // generation's key/value cache, made by the first Generate (sample.go)
	int8       bool     // an int8 inference model: fwd's matmul weights are int8 (int8.go)
	peek       *qkvPeek // Attention's request for a layer's qkv (attnmap.go)
	lossRows   int      // LossOnly: the rows of logits computed at a time (0: the whole batch)
}

// paramViews are named views into a flat parameter (or gradient) buffer.
type paramViews struct {
	wte, wpe                                   backend.Buf // (Vp,C), (maxT,C)
	head                                       backend.Buf // the LM head's weight: wte, or its int8 copy (int8.go)
	ln1w, ln1b, qkvw, qkvb, attprojw, attprojb []backend.Buf
	ln2w, ln2b, fcw, fcb, fcprojw, fcprojb     []backend.Buf
	lnfw, lnfb                                 backend.Buf // (C)
	all                                        []backend.Buf
}

// actBuffers are the flat activation buffers, sized for (maxB, maxT). Attention saves only its
// output atty and attLse (B,NH,T per layer), each query's log-sum-exp, never (T,T) probabilities.
type actBuffers struct {
	encoded, ln1, ln1Mean, ln1Rstd, qkv, atty, attLse, attproj        backend.Buf
	residual2, ln2, ln2Mean, ln2Rstd, fch, fchGelu, fcproj, residual3 backend.Buf
	lnf, lnfMean, lnfRstd, logits, logitsLse, losses                  backend.Buf
	// Gradient scratch for one layer at a time (backward walks the layers in turn).
	dresidual, dlnf, dln1, datty, dln2, dqkv, dfch backend.Buf
}

// acts are views of actBuffers for one (B,T): per-layer slices of the layer-stacked buffers.
type acts struct {
	B, T                                                         int
	encoded                                                      backend.Buf // (B,T,C)
	ln1, ln1Mean, ln1Rstd, qkv, atty, attLse, attproj            []backend.Buf
	residual2, ln2, ln2Mean, ln2Rstd, fch, fchGelu, fcproj, res3 []backend.Buf
	lnf, lnfMean, lnfRstd, logits, logitsLse, losses             backend.Buf
	dresidual, dlnf, dln1, datty, dln2, dqkv, dfch               backend.Buf
	inputs, targets                                              backend.Buf
}

// New plans and allocates an fp32 model for batches of up to maxB sequences of up to maxT tokens.
// Parameters are zero; call InitGPT2 or SetParams.
func New(be backend.Backend, cfg Config, maxB, maxT int) (*Model, error) {
	return NewWithPrecision(be, cfg, maxB, maxT, Precision{})
}

// NewWithPrecision is New with the storage plan prec (mixed precision).
func NewWithPrecision(be backend.Backend, cfg Config, maxB, maxT int, prec Precision) (*Model, error) {
	return NewParallel(be, cfg, maxB, maxT, prec, Parallel{})
}

// NewParallel is NewWithPrecision with the buffer layout par asks for data-parallel training
// (see Parallel).
func NewParallel(be backend.Backend, cfg Config, maxB, maxT int, prec Precision, par Parallel) (*Model, error) {
	return newModel(be, cfg, maxB, maxT, prec, par, trainableModel, 0)
}

// NewInference is NewWithPrecision for a model that only runs forward: sampling, evaluation,
// attention maps. It has no gradients, AdamW moments or backward scratch (NewFrozen), and its
// layers take turns in one layer's activation buffers, so it needs about a quarter of the
// parameter memory and 1/L of the activations; Backward refuses to run.
func NewInference(be backend.Backend, cfg Config, maxB, maxT int, prec Precision, opts ...InferenceOption) (*Model, error) {
	return newModel(be, cfg, maxB, maxT, prec, Parallel{}, inferenceModel, lossRowsOf(opts))
}

// InferenceOption changes what NewInference and NewInferenceInt8 build.
type InferenceOption int

// LossOnly builds a model that only computes losses (evaluation): its LM head and loss run over
// lossRows rows at a time, so it holds those rows' logits rather than the whole batch's (1.6 GB
// of GPT-2's at B=8 T=1024), with the same losses on the CPU (a GPU may pick other matmul
// algorithms for the smaller products, and re-reads wte for each). A Forward without targets
// (so Attention too) returns an error and LogitsRow panics; generation (its own KV cache) is
// unaffected.
const LossOnly InferenceOption = 1

// lossRows is how many rows of logits a LossOnly model computes at a time (26 MB for GPT-2).
const lossRows = 128

func lossRowsOf(opts []InferenceOption) int {
	for _, o := range opts {
		if o == LossOnly {
			return lossRows
		}
	}
	return 0
}

// modelKind is what a model is built for: training (every buffer), inference (NewInference) or
// int8 inference (NewInferenceInt8: NewInference without the fp32 matmul weights).
type modelKind int

const (
	trainableModel modelKind = iota
	inferenceModel
	int8Model
)

func newModel(be backend.Backend, cfg Config, maxB, maxT int, prec Precision, par Parallel, kind modelKind, lossRows int) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if maxT > cfg.BlockSize {
		return nil, fmt.Errorf("sequence length %d exceeds the model's block size %d; use --seq-len <= %d", maxT, cfg.BlockSize, cfg.BlockSize)
	}
	if maxB < 1 || maxT < 1 {
		return nil, fmt.Errorf("batch size and sequence length must be >= 1 (got %d, %d)", maxB, maxT)
	}
	if err := par.validate(); err != nil {
		return nil, err
	}
	if err := prec.Validate(); err != nil {
		return nil, err
	}
	if mc, ok := be.(backend.MemoryChecker); ok {
		sizeOf := func(dt backend.DType) int64 { return int64(backend.ElementBytes(be, dt)) }
		plan := cfg.memoryPlan(maxB, maxT, prec, par, kind, lossRows, sizeOf)
		if err := mc.CheckMemory(plan); err != nil {
			fp32 := cfg.memoryPlan(maxB, maxT, Precision{}, par, kind, lossRows, sizeOf)
			return nil, noteWideSixteenBits(err, prec, PlanBytes(plan)-PlanBytes(fp32))
		}
	}
	var tr Trainable
	var err error
	switch specs := cfg.ParamSpecs(); kind {
	case trainableModel:
		tr, err = newTrainable(be, specs, prec, par, false, nil)
	case inferenceModel:
		tr, err = NewFrozen(be, specs, prec)
	case int8Model:
		omit := make([]bool, len(specs))
		for i, s := range specs {
			_, omit[i] = int8Rows(s.Name, cfg.Channels)
		}
		tr, err = NewFrozenWithout(be, specs, prec, omit)
	}
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, be: be, maxB: maxB, maxT: maxT, Trainable: tr, views: map[[2]int]*acts{}, lossRows: lossRows}
	m.fwd = m.paramViews(m.Compute())
	if kind == trainableModel {
		m.grads = m.paramViews(m.Grads)
	}
	if par.SeparateAccum {
		m.scratch = m.paramViews(m.GradScratch())
	}
	m.inputs, m.targets = be.AllocInt32(maxB*maxT), be.AllocInt32(maxB*maxT)
	m.allocActs()
	m.lossHost = make([]float32, maxB*maxT)
	return m, nil
}

func (m *Model) allocActs() {
	c := m.Config
	L, C, NH, Vp := c.NumLayers, c.Channels, c.NumHeads, c.PaddedVocabSize
	BT, B, T := m.maxB*m.maxT, m.maxB, m.maxT
	if m.frozen {
		L = 1 // the layers take turns in one layer's buffers (actsFor)
	}
	// Activations and their gradients (a) are in the compute format; the statistics (s) fp32.
	a := func(n int) backend.Buf { return m.alloc(n, m.prec.Compute) }
	s := func(n int) backend.Buf { return m.be.Alloc(n) }
	m.actBufs = actBuffers{
		encoded: a(BT * C),
		ln1:     a(L * BT * C), ln1Mean: s(L * BT), ln1Rstd: s(L * BT),
		qkv: a(L * BT * 3 * C), atty: a(L * BT * C),
		attLse:  s(L * B * NH * T),
		attproj: a(L * BT * C), residual2: a(L * BT * C),
		ln2: a(L * BT * C), ln2Mean: s(L * BT), ln2Rstd: s(L * BT),
		fch: a(L * BT * 4 * C), fchGelu: a(L * BT * 4 * C),
		fcproj: a(L * BT * C), residual3: a(L * BT * C),
		lnf: a(BT * C), lnfMean: s(BT), lnfRstd: s(BT),
		logits: a(m.logitRows(BT) * Vp), logitsLse: s(BT), losses: s(BT),
	}
	if m.frozen {
		return
	}
	ab := &m.actBufs
	ab.dresidual, ab.dlnf, ab.dln1, ab.datty, ab.dln2 = a(BT*C), a(BT*C), a(BT*C), a(BT*C), a(BT*C)
	ab.dqkv, ab.dfch = a(BT*3*C), a(BT*4*C)
}

// paramViews splits a flat buffer laid out like the parameters into named per-layer views.
func (m *Model) paramViews(flat backend.Buf) paramViews {
	var v paramViews
	L := m.Config.NumLayers
	whole := m.TensorViews(flat)
	perLayer := func(i int) []backend.Buf {
		size := m.specs[i].Size() / L
		out := make([]backend.Buf, L)
		for l := range L {
			if !m.Omitted(i) { // an int8 model's matmul weights stay nil until NewInferenceInt8 sets them
				out[l] = m.be.View(flat, m.offsets[i]+l*size, size)
			}
		}
		return out
	}
	v.wte, v.wpe = whole[0], whole[1]
	v.ln1w, v.ln1b, v.qkvw, v.qkvb = perLayer(2), perLayer(3), perLayer(4), perLayer(5)
	v.attprojw, v.attprojb, v.ln2w, v.ln2b = perLayer(6), perLayer(7), perLayer(8), perLayer(9)
	v.fcw, v.fcb, v.fcprojw, v.fcprojb = perLayer(10), perLayer(11), perLayer(12), perLayer(13)
	v.lnfw, v.lnfb = whole[14], whole[15]
	v.head = v.wte
	v.all = whole
	return v
}

// byIndex is the per-layer views of the layers' tensor at spec index i (qkvw is 4).
func (v *paramViews) byIndex(i int) []backend.Buf {
	return [][]backend.Buf{2: v.ln1w, v.ln1b, v.qkvw, v.qkvb, v.attprojw, v.attprojb, v.ln2w, v.ln2b, v.fcw, v.fcb, v.fcprojw, v.fcprojb}[i]
}

// logitRows is how many rows of logits the model holds for a batch of BT positions.
func (m *Model) logitRows(BT int) int {
	if m.lossRows > 0 {
		return min(BT, m.lossRows)
	}
	return BT
}

// actsFor returns the activation views for a (B,T) batch, building them on first use.
func (m *Model) actsFor(B, T int) *acts {
	if a, ok := m.views[[2]int{B, T}]; ok {
		return a
	}
	c, be, ab := m.Config, m.be, &m.actBufs
	L, C, NH, Vp := c.NumLayers, c.Channels, c.NumHeads, c.PaddedVocabSize
	BT := B * T
	layers := func(buf backend.Buf, size int) []backend.Buf {
		stride := size
		if m.frozen { // one layer's buffers for all: layer l reads only layer l-1's output
			stride = 0
		}
		out := make([]backend.Buf, L)
		for l := range L {
			out[l] = be.View(buf, l*stride, size)
		}
		return out
	}
	first := func(buf backend.Buf, size int) backend.Buf {
		if buf == nil { // a frozen model's backward scratch
			return nil
		}
		return be.View(buf, 0, size)
	}
	a := &acts{
		B: B, T: T,
		encoded: first(ab.encoded, BT*C),
		ln1:     layers(ab.ln1, BT*C), ln1Mean: layers(ab.ln1Mean, BT), ln1Rstd: layers(ab.ln1Rstd, BT),
		qkv: layers(ab.qkv, BT*3*C), atty: layers(ab.atty, BT*C),
		attLse:  layers(ab.attLse, B*NH*T),
		attproj: layers(ab.attproj, BT*C), residual2: layers(ab.residual2, BT*C),
		ln2: layers(ab.ln2, BT*C), ln2Mean: layers(ab.ln2Mean, BT), ln2Rstd: layers(ab.ln2Rstd, BT),
		fch: layers(ab.fch, BT*4*C), fchGelu: layers(ab.fchGelu, BT*4*C),
		fcproj: layers(ab.fcproj, BT*C), res3: layers(ab.residual3, BT*C),
		lnf: first(ab.lnf, BT*C), lnfMean: first(ab.lnfMean, BT), lnfRstd: first(ab.lnfRstd, BT),
		logits: first(ab.logits, m.logitRows(BT)*Vp), logitsLse: first(ab.logitsLse, BT), losses: first(ab.losses, BT),
		dresidual: first(ab.dresidual, BT*C), dlnf: first(ab.dlnf, BT*C),
		dln1: first(ab.dln1, BT*C), datty: first(ab.datty, BT*C), dln2: first(ab.dln2, BT*C),
		dqkv: first(ab.dqkv, BT*3*C), dfch: first(ab.dfch, BT*4*C),
		inputs: first(m.inputs, BT), targets: first(m.targets, BT),
	}
	m.views[[2]int{B, T}] = a
	return a
}

// Backend is the backend the model lives on.
func (m *Model) Backend() backend.Backend { return m.be }

// InitGPT2 fills the parameters with GPT-2's initialisation: weights N(0, 0.02), the two residual
// projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. The padded
// vocabulary rows of wte stay 0 so their logits are 0 and they never receive gradient.
func (m *Model) InitGPT2(seed uint64) {
	c := m.Config
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	residualStd := 0.02 / math.Sqrt(2*float64(c.NumLayers))
	// Fill and upload a chunk at a time: a host copy of all parameters would add their whole
	// size (0.5 GB for GPT-2 124M) to the process's peak memory.
	const chunk = 1 << 20
	buf := make([]float32, min(chunk, c.NumParams()))
	if m.int8 { // its int8 weights were made from the weights it was built with
		panic("gpt: InitGPT2 on an int8 model; initialise a float model, then quantize it")
	}
	for i, s := range m.specs {
		value := func(int) float32 { return 0 } // biases
		switch s.Name {
		case "ln1w", "ln2w", "lnfw":
			value = func(int) float32 { return 1 }
		case "wte": // the padded rows stay 0
			value = func(j int) float32 {
				if j >= c.VocabSize*c.Channels {
					return 0
				}
				return float32(rng.NormFloat64() * 0.02)
			}
		case "wpe", "qkvw", "fcw":
			value = func(int) float32 { return float32(rng.NormFloat64() * 0.02) }
		case "attprojw", "fcprojw":
			value = func(int) float32 { return float32(rng.NormFloat64() * residualStd) }
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

// Forward runs the model on inputs (B,T) and, when targets (B,T) is not nil, the cross-entropy
// loss; it returns the mean loss (0 without targets). The logits (with or without targets) and
// the activations, qkv included, stay on the backend for LogitsRow, Attention and Backward. Token
// ids must be < V.
func (m *Model) Forward(inputs, targets []int32, B, T int) (float32, error) {
	return m.forward(inputs, targets, B, T, float32(math.NaN()))
}

// ForwardTrain is Forward with targets for a training step whose Backward (or
// BackwardAccumulate) will have lossScale: the loss's gradient w.r.t. the logits is computed in
// the same pass over them as the loss (backend.Ops.CrossEntropyFused) and replaces them, so the
// logits cannot be read afterwards. Losses and gradients are the bits Forward and Backward give.
func (m *Model) ForwardTrain(inputs, targets []int32, B, T int, lossScale float32) (float32, error) {
	if targets == nil {
		return 0, fmt.Errorf("ForwardTrain needs targets")
	}
	if math.IsNaN(float64(lossScale)) {
		return 0, fmt.Errorf("ForwardTrain: the loss scale is NaN")
	}
	return m.forward(inputs, targets, B, T, lossScale)
}

// MeanLoss is the mean of per-position losses as the model reports it: summed in float64 in
// order, divided, rounded to float32.
func MeanLoss(losses []float32) float32 {
	var sum float64
	for _, l := range losses {
		sum += float64(l)
	}
	return float32(sum / float64(len(losses)))
}

// forward is Forward, and with a lossScale that is not NaN ForwardTrain.
func (m *Model) forward(inputs, targets []int32, B, T int, lossScale float32) (float32, error) {
	if err := m.SetBatch(inputs, targets, B, T); err != nil {
		return 0, err
	}
	if err := m.forwardBatch(lossScale); err != nil || targets == nil {
		return 0, err
	}
	a := m.cur
	BT := a.B * a.T
	m.be.Download(m.lossHost[:BT], a.losses)
	return MeanLoss(m.lossHost[:BT]), nil
}

// SetBatch checks inputs (B,T) and targets (B,T, or nil) and copies them to the backend: the
// host's half of a forward pass. ForwardTrainBatch then queues the backend's half, which is
// ops on backend memory only (a recorded graph, backend.Grapher, can replay it for every batch).
func (m *Model) SetBatch(inputs, targets []int32, B, T int) error {
	m.cur = nil
	if err := m.checkBatch(inputs, targets, B, T); err != nil {
		return err
	}
	a := m.actsFor(B, T)
	m.be.UploadInt32(a.inputs, inputs)
	if targets != nil {
		m.be.UploadInt32(a.targets, targets)
	}
	m.cur, m.batch, m.curTargets = a, a, targets != nil
	return nil
}

// ForwardTrainBatch is ForwardTrain on the batch of the last SetBatch, which had targets,
// without reading the loss: QueueLosses queues its copy to the host.
func (m *Model) ForwardTrainBatch(lossScale float32) error {
	if m.cur == nil && m.batch != nil {
		// After a backward: the batch is still on the backend, and a forward rewrites the
		// logits that backward turned into dlogits (a step run again after a failed graph
		// recording, which ran nothing but went through the host's side of it).
		m.cur = m.batch
	}
	if m.cur == nil || !m.curTargets {
		return fmt.Errorf("ForwardTrainBatch needs a batch with targets (SetBatch)")
	}
	if math.IsNaN(float64(lossScale)) {
		return fmt.Errorf("ForwardTrainBatch: the loss scale is NaN")
	}
	return m.forwardBatch(lossScale)
}

// QueueLosses copies the last forward's B*T per-position losses into losses, memory from
// backend.HostBuffer, through backend.DownloadLater (on a GPU, a copy queued behind the work so
// far); MeanLoss(losses) is then the mean loss.
func (m *Model) QueueLosses(losses []float32) {
	a := m.batch
	if a == nil || len(losses) != a.B*a.T {
		panic(fmt.Sprintf("gpt.QueueLosses: %d losses for a batch of %v", len(losses), a))
	}
	backend.DownloadLater(m.be, losses, a.losses)
}

// forwardBatch runs the forward pass on the batch of the last SetBatch, with the loss when it
// had targets: ForwardTrain's fused loss gradient unless lossScale is NaN.
func (m *Model) forwardBatch(lossScale float32) error {
	m.fusedScale = float32(math.NaN())
	a := m.cur
	if a == nil {
		return fmt.Errorf("forward without a batch (SetBatch)")
	}
	if m.lossRows > 0 && !m.curTargets { // before the layers, not after them
		return fmt.Errorf("a loss-only model (gpt.LossOnly) computes losses; pass targets")
	}
	c, be := m.Config, m.be
	defer backend.Scope(be, "forward")()
	C, NH, V, Vp := c.Channels, c.NumHeads, c.VocabSize, c.PaddedVocabSize
	B, T := a.B, a.T
	BT := B * T

	var wpe backend.Buf
	if !c.NoPositionalEmbs {
		wpe = m.fwd.wpe
	}
	be.EncoderForward(a.encoded, a.inputs, m.fwd.wte, wpe, B, T, C)
	p := &m.fwd
	// The first LayerNorm reads the embeddings; every later one is fused with the residual add
	// that feeds it (ResidualLayerNormForward also writes that residual).
	be.LayerNormForward(a.ln1[0], a.ln1Mean[0], a.ln1Rstd[0], a.encoded, p.ln1w[0], p.ln1b[0], BT, C)
	for l := range c.NumLayers {
		endLayer := backend.Scope(be, "layer")
		residual := a.encoded
		if l > 0 {
			residual = a.res3[l-1]
		}
		m.matmulForward(a.qkv[l], a.ln1[l], p.qkvw[l], p.qkvb[l], BT, C, 3*C)
		if m.peek != nil && m.peek.layer == l {
			be.Download(m.peek.qkv, a.qkv[l])
		}
		be.AttentionForward(a.atty[l], a.attLse[l], a.qkv[l], B, T, C, NH, backend.AttentionMask{Causal: true})
		m.matmulForward(a.attproj[l], a.atty[l], p.attprojw[l], p.attprojb[l], BT, C, C)
		be.ResidualLayerNormForward(a.residual2[l], a.ln2[l], a.ln2Mean[l], a.ln2Rstd[l], residual, a.attproj[l], p.ln2w[l], p.ln2b[l], BT, C)
		m.mlpUp(a.fchGelu[l], a.fch[l], a.ln2[l], p.fcw[l], p.fcb[l], BT, C, 4*C)
		m.matmulForward(a.fcproj[l], a.fchGelu[l], p.fcprojw[l], p.fcprojb[l], BT, 4*C, C)
		if l+1 < c.NumLayers {
			be.ResidualLayerNormForward(a.res3[l], a.ln1[l+1], a.ln1Mean[l+1], a.ln1Rstd[l+1], a.residual2[l], a.fcproj[l], p.ln1w[l+1], p.ln1b[l+1], BT, C)
		} else {
			be.ResidualLayerNormForward(a.res3[l], a.lnf, a.lnfMean, a.lnfRstd, a.residual2[l], a.fcproj[l], p.lnfw, p.lnfb, BT, C)
		}
		endLayer()
	}
	if m.lossRows > 0 {
		return m.lossesByRows(BT)
	}
	m.matmulForward(a.logits, a.lnf, p.head, nil, BT, C, Vp) // LM head tied to wte
	if !m.curTargets {
		return nil
	}
	if math.IsNaN(float64(lossScale)) {
		be.CrossEntropyForward(a.losses, a.logitsLse, a.logits, a.targets, BT, V, Vp)
	} else {
		be.CrossEntropyFused(a.losses, a.logitsLse, a.logits, a.targets, lossScale/float32(BT), BT, V, Vp)
		m.fusedScale = lossScale
	}
	return nil
}

func (m *Model) checkBatch(inputs, targets []int32, B, T int) error {
	if T > m.Config.BlockSize {
		return fmt.Errorf("sequence length %d exceeds the model's block size %d", T, m.Config.BlockSize)
	}
	if B*T > m.maxB*m.maxT || T > m.maxT {
		return fmt.Errorf("batch (%d,%d) exceeds the planned capacity (%d,%d)", B, T, m.maxB, m.maxT)
	}
	if len(inputs) != B*T || (targets != nil && len(targets) != B*T) {
		return fmt.Errorf("batch arrays must hold B*T = %d tokens (inputs %d, targets %d)", B*T, len(inputs), len(targets))
	}
	V := int32(m.Config.VocabSize)
	for _, arr := range [][]int32{inputs, targets} {
		for i, tok := range arr {
			if tok < 0 || tok >= V {
				return fmt.Errorf("token %d at position %d is outside the vocabulary [0,%d); the data does not match this model's vocab size", tok, i, V)
			}
		}
	}
	return nil
}

// Backward accumulates into Grads the gradient of lossScale * (mean loss of the last Forward),
// which must have had targets. Use lossScale = 1/gradAccum for gradient accumulation.
func (m *Model) Backward(lossScale float32) error {
	return m.RunBackward(false, func() error { return m.backward(lossScale, &m.grads) })
}

// backward accumulates the gradient of lossScale * (mean loss of the last Forward) into the
// gradient views g.
func (m *Model) backward(lossScale float32, g *paramViews) error {
	a := m.cur
	if a == nil {
		return fmt.Errorf("backward called before a forward pass with targets")
	}
	if m.int8 {
		return fmt.Errorf("backward: an int8 model is for inference only")
	}
	c, be, p := m.Config, m.be, &m.fwd
	defer backend.Scope(be, "backward")()
	B, T := a.B, a.T
	C, NH, V, Vp := c.Channels, c.NumHeads, c.VocabSize, c.PaddedVocabSize
	BT := B * T

	// Loss -> logits: a.logits become dlogits in place (ForwardTrain has done it).
	switch {
	case math.IsNaN(float64(m.fusedScale)):
		be.CrossEntropyBackward(a.logits, a.logits, a.logitsLse, a.targets, lossScale/float32(BT), BT, V, Vp)
	case m.fusedScale != lossScale:
		return fmt.Errorf("backward with loss scale %g after ForwardTrain with %g", lossScale, m.fusedScale)
	}
	// The activation gradients (dlnf, dfch, dln2, datty, dqkv, dln1) are written whole
	// by the op that produces them, so only dresidual, which LayerNormBackward accumulates into,
	// needs zeroing.
	be.Zero(a.dresidual)
	be.MatmulBackward(a.dlnf, g.wte, nil, a.logits, a.lnf, p.wte, BT, C, Vp)
	be.LayerNormBackward(a.dresidual, g.lnfw, g.lnfb, a.dlnf, a.res3[c.NumLayers-1], p.lnfw, a.lnfMean, a.lnfRstd, BT, C)

	// a.dresidual carries the gradient of the residual stream down through the layers. A residual
	// add passes its output gradient unchanged to both inputs, so the branch gradient is dresidual
	// itself and the branch's input gradient is accumulated straight back into it.
	for l := c.NumLayers - 1; l >= 0; l-- {
		endLayer := backend.Scope(be, "layer")
		residual := a.encoded
		if l > 0 {
			residual = a.res3[l-1]
		}
		// MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
		be.MatmulBackwardGelu(a.dfch, g.fcprojw[l], g.fcprojb[l], a.dresidual, a.fchGelu[l], p.fcprojw[l], a.fch[l], BT, 4*C, C)
		be.MatmulBackward(a.dln2, g.fcw[l], g.fcb[l], a.dfch, a.ln2[l], p.fcw[l], BT, C, 4*C)
		be.LayerNormBackward(a.dresidual, g.ln2w[l], g.ln2b[l], a.dln2, a.residual2[l], p.ln2w[l], a.ln2Mean[l], a.ln2Rstd[l], BT, C)
		// Attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
		be.MatmulBackward(a.datty, g.attprojw[l], g.attprojb[l], a.dresidual, a.atty[l], p.attprojw[l], BT, C, C)
		be.AttentionBackward(a.dqkv, a.datty, a.qkv[l], a.atty[l], a.attLse[l], B, T, C, NH, backend.AttentionMask{Causal: true})
		be.MatmulBackward(a.dln1, g.qkvw[l], g.qkvb[l], a.dqkv, a.ln1[l], p.qkvw[l], BT, C, 3*C)
		be.LayerNormBackward(a.dresidual, g.ln1w[l], g.ln1b[l], a.dln1, residual, p.ln1w[l], a.ln1Mean[l], a.ln1Rstd[l], BT, C)
		endLayer()
		m.LayerGradsDone(l)
	}
	var dwpe backend.Buf
	if !c.NoPositionalEmbs {
		dwpe = g.wpe
	}
	be.EncoderBackward(g.wte, dwpe, a.dresidual, a.inputs, B, T, C)
	m.cur = nil // the logits now hold dlogits
	return nil
}

// LogitsRow copies the logits (V real columns) of sequence b at position t of the last Forward
// without targets into dst (len V).
func (m *Model) LogitsRow(dst []float32, b, t int) {
	if m.lossRows > 0 {
		panic("gpt: LogitsRow on a LossOnly model, which keeps no logits")
	}
	a := m.cur
	Vp := m.Config.PaddedVocabSize
	row := m.be.View(a.logits, (b*a.T+t)*Vp, len(dst))
	m.be.Download(dst, row)
}

// lossesByRows is a LossOnly model's LM head and loss: the BT rows of the last forward's final
// LayerNorm lossRows at a time through the head and the cross-entropy, into the logits of those
// rows only. The losses are the bits the whole batch's head and loss give.
func (m *Model) lossesByRows(BT int) error {
	a, be, c := m.cur, m.be, m.Config
	C, V, Vp := c.Channels, c.VocabSize, c.PaddedVocabSize
	for r := 0; r < BT; r += m.lossRows {
		n := min(m.lossRows, BT-r)
		logits := be.View(a.logits, 0, n*Vp)
		m.matmulForward(logits, be.View(a.lnf, r*C, n*C), m.fwd.head, nil, n, C, Vp)
		be.CrossEntropyForward(be.View(a.losses, r, n), be.View(a.logitsLse, r, n), logits, be.View(a.targets, r, n), n, V, Vp)
	}
	return nil
}
