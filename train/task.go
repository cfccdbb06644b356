package train

import (
	"fmt"
	"math"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// A task is what the trainer asks of a model family: GPT-2's next-token prediction (gptTask) or
// BERT's masked-language modelling (bertTask). The loop, AdamW, clipping, accumulation, data
// parallelism, checkpoints and logs are the trainer's and the same for both; a task reads and
// runs one micro-batch and scores validation batches.
type task interface {
	// weights is the model's trainable state (parameters, gradients, moments, layout).
	weights() *gpt.Trainable
	// init fills the parameters with the family's initialisation from seed.
	init(seed uint64)
	// forward reads the next micro-batch from l and runs the model on it; backward(lossScale)
	// follows (a model may prepare that backward's first op here). step (0-based) and micro
	// (the micro-batch's index among the step's W*A) seed BERT's masking, so that any split over
	// ranks masks as one process does. The micro-batch's figures() numbers are kept in slot
	// (0, 1, ...): on an asynchronous backend they may be copied back only once the work queued
	// so far is done (backend.FenceOf), and results(slot) reads them after that.
	forward(l batchReader, step, micro int, lossScale float32, slot int) error
	// results writes the figures of the forward kept in slot into dst (len figures()): the mean
	// loss, then BERT's counts. Call it once the backend's work up to that forward is done.
	results(slot int, dst []float32)
	// backward adds the last forward's gradient times lossScale to the gradients: in place for a
	// step's first micro-batch, apart and then added (gpt.Parallel.SeparateAccum) for the others.
	backward(lossScale float32, first bool) error
	// figures is how many numbers forward and evalBatch report per batch: the loss first, then
	// (BERT) the masked positions predicted correctly and the masked positions.
	figures() int
	// evalBatch runs validation batch i, the loader's next, writing figures() numbers into dst.
	evalBatch(l batchReader, i int, dst []float32) error
	// flopsPerToken is the training FLOPs per token at sequence length T.
	flopsPerToken(T int) float64
}

// graphTask is a task whose forward splits into the host's half and the backend's, so that
// the backend's can be a recorded graph (graphs.go): load reads the next micro-batch and
// uploads it, forwardBatch queues the forward pass on it (backend ops only), collect queues the
// copy of its figures into slot. The trainer calls them in that order, with backward after
// forwardBatch; forward is the three in one.
type graphTask interface {
	load(l batchReader, slot int) error
	forwardBatch(lossScale float32) error
	collect(slot int)
}

// batchReader is where a task reads its micro-batches: a data.Loader in training, or random
// tokens in bench and profile (randomBatches). Next fills a batch's rows (the loader's B
// windows of its row length) and their next-token targets.
type batchReader interface {
	Next(inputs, targets []int32) error
}

// newTask builds the model of the run (with the layout par) and its task.
func (t *Trainer) newTask(par gpt.Parallel) (task, error) {
	tk, err := newTaskOn(t.be, t.cfg, par)
	if g, ok := tk.(*gptTask); ok {
		t.model = g.m
	}
	return tk, err
}

// newTaskOn builds the model of cfg on be (with the layout par) and its task.
func newTaskOn(be backend.Backend, cfg Config, par gpt.Parallel) (task, error) {
	if !cfg.IsBERT() {
		m, err := gpt.NewParallel(be, cfg.Model, cfg.BatchSize, cfg.SeqLen, cfg.ModelPrecision(), par)
		if err != nil {
			return nil, err
		}
		return newGPTTask(m, cfg.BatchSize, cfg.SeqLen), nil
	}
	return newBERTTask(cfg.BERT(), cfg.specials(), cfg.Seed, cfg.BatchSize, cfg.SeqLen, func(maxMasked int) (*bert.Model, error) {
		return bert.NewMasked(be, cfg.BERT(), cfg.BatchSize, cfg.SeqLen, maxMasked, cfg.ModelPrecision(), par)
	})
}

// specials are the special tokens of the run's tokenizer (none recorded: NoSpecials).
func (c Config) specials() tokenizer.Specials {
	if c.Tokenizer != nil && c.Tokenizer.Specials != nil {
		return *c.Tokenizer.Specials
	}
	return tokenizer.NoSpecials
}

// memoryPlan is what the run's model plans to allocate at micro-batch B in precision prec, in
// one process: a BERT's MLM head sized for the positions its masking chooses (newBERTTask).
func (c Config) memoryPlan(B int, prec gpt.Precision) []backend.MemoryItem {
	if c.IsBERT() {
		return c.BERT().MaskedMemoryPlan(B, c.SeqLen, bert.MaxMaskedAt(bert.MaskRate, B, c.SeqLen), prec, gpt.Parallel{})
	}
	return c.Model.PrecisionMemoryPlan(B, c.SeqLen, prec)
}

// gptTask trains GPT-2 on next-token prediction over the loader's windows of T+1 tokens.
type gptTask struct {
	m               *gpt.Model
	B, T            int
	inputs, targets []int32
	losses          [][]float32 // per slot: the B*T per-position losses (backend.HostBuffer)
}

func newGPTTask(m *gpt.Model, B, T int) *gptTask {
	return &gptTask{m: m, B: B, T: T, inputs: make([]int32, B*T), targets: make([]int32, B*T)}
}

func (g *gptTask) weights() *gpt.Trainable { return g.m.Weights() }
func (g *gptTask) init(seed uint64)        { g.m.InitGPT2(seed) }
func (g *gptTask) figures() int            { return 1 }
func (g *gptTask) flopsPerToken(T int) float64 {
	return g.m.Config.FlopsPerToken(T)
}

// forward runs the classifier's backward with the forward (gpt.Model.ForwardTrain), and leaves
// the per-position losses' copy to the host queued (gpt.Model.QueueLosses).
func (g *gptTask) forward(l batchReader, _, _ int, lossScale float32, slot int) error {
	if err := g.load(l, slot); err != nil {
		return err
	}
	if err := g.forwardBatch(lossScale); err != nil {
		return err
	}
	g.collect(slot)
	return nil
}

func (g *gptTask) load(l batchReader, slot int) error {
	if err := l.Next(g.inputs, g.targets); err != nil {
		return err
	}
	for len(g.losses) <= slot {
		g.losses = append(g.losses, backend.HostBuffer(g.m.Backend(), g.B*g.T))
	}
	return g.m.SetBatch(g.inputs, g.targets, g.B, g.T)
}

func (g *gptTask) forwardBatch(lossScale float32) error { return g.m.ForwardTrainBatch(lossScale) }

func (g *gptTask) collect(slot int) { g.m.QueueLosses(g.losses[slot]) }

func (g *gptTask) results(slot int, dst []float32) { dst[0] = gpt.MeanLoss(g.losses[slot]) }

func (g *gptTask) backward(lossScale float32, first bool) error {
	if first {
		return g.m.Backward(lossScale)
	}
	return g.m.BackwardAccumulate(lossScale)
}

func (g *gptTask) evalBatch(l batchReader, _ int, dst []float32) error {
	if err := l.Next(g.inputs, g.targets); err != nil {
		return err
	}
	loss, err := g.m.Forward(g.inputs, g.targets, g.B, g.T)
	dst[0] = loss
	return err
}

// bertTask trains a BERT encoder on masked-language modelling: each sequence is [CLS], T-2
// tokens of the stream (a loader row), [SEP]; the Masker chooses and replaces 15% of the
// others, seeded by (seed, step, micro-batch) for training and by (seed', 0, batch) for
// validation, so every evaluation masks the same positions.
type bertTask struct {
	m                       *bert.Model
	mask, valMask           *bert.Masker
	B, T                    int
	rows, next              []int32      // the loader's B rows of T-2 tokens and its (unused) targets
	tokens, inputs, targets []int32      // (B,T): the windows, the masked inputs, the targets
	figs                    [][3]float32 // per slot: loss, masked positions predicted right, masked positions
}

// valMaskSeed separates validation's masks from training's.
const valMaskSeed = 0x76616c5f6d61736b

// newBERTTask makes the task's maskers and then its model, with newModel, whose MLM head is
// planned for the most positions they mask in a batch.
func newBERTTask(cfg bert.Config, specials tokenizer.Specials, seed uint64, B, T int, newModel func(maxMasked int) (*bert.Model, error)) (*bertTask, error) {
	if T < 3 {
		return nil, fmt.Errorf("--seq-len %d is too short for BERT: a sequence is [CLS], at least one token, [SEP]", T)
	}
	mask, err := bert.NewMasker(specials, cfg.VocabSize, seed)
	if err != nil {
		return nil, err
	}
	valMask, err := bert.NewMasker(specials, cfg.VocabSize, seed^valMaskSeed)
	if err != nil {
		return nil, err
	}
	m, err := newModel(max(mask.MaxMasked(B, T), valMask.MaxMasked(B, T)))
	if err != nil {
		return nil, err
	}
	n := B * (T - 2)
	return &bertTask{m: m, mask: mask, valMask: valMask, B: B, T: T,
		rows: make([]int32, n), next: make([]int32, n),
		tokens: make([]int32, B*T), inputs: make([]int32, B*T), targets: make([]int32, B*T)}, nil
}

func (b *bertTask) weights() *gpt.Trainable { return b.m.Weights() }
func (b *bertTask) init(seed uint64)        { b.m.Init(seed) }
func (b *bertTask) figures() int            { return 3 }
func (b *bertTask) flopsPerToken(T int) float64 {
	return b.m.Config.FlopsPerToken(T, b.mask.Rate)
}

// counts writes the last forward's masked-token counts, correct and all, into dst (len 2).
func (b *bertTask) counts(dst []float32) {
	correct, masked := b.m.MaskedAccuracy()
	dst[0], dst[1] = float32(correct), float32(masked)
}

// run reads the loader's next B rows, frames and masks them with mk for (step, micro), and runs
// the model.
func (b *bertTask) run(l batchReader, mk *bert.Masker, step, micro int) (float32, error) {
	if err := l.Next(b.rows, b.next); err != nil {
		return 0, err
	}
	n := b.T - 2
	for r := range b.B {
		mk.Window(b.tokens[r*b.T:(r+1)*b.T], b.rows[r*n:])
	}
	if err := mk.Mask(b.inputs, b.targets, b.tokens, b.B, b.T, step, micro); err != nil {
		return 0, err
	}
	return b.m.Forward(b.inputs, b.targets, b.B, b.T)
}

// forward leaves the classifier's backward to backward: the masked-token accuracy reads the
// logits after the forward. The figures are read back at once.
func (b *bertTask) forward(l batchReader, step, micro int, _ float32, slot int) error {
	loss, err := b.run(l, b.mask, step, micro)
	if err != nil {
		return err
	}
	for len(b.figs) <= slot {
		b.figs = append(b.figs, [3]float32{})
	}
	b.figs[slot][0] = loss
	b.counts(b.figs[slot][1:])
	return nil
}

func (b *bertTask) results(slot int, dst []float32) { copy(dst, b.figs[slot][:]) }

func (b *bertTask) backward(lossScale float32, first bool) error {
	if first {
		return b.m.Backward(lossScale)
	}
	return b.m.BackwardAccumulate(lossScale)
}

func (b *bertTask) evalBatch(l batchReader, i int, dst []float32) error {
	loss, err := b.run(l, b.valMask, 0, i)
	if err != nil {
		return err
	}
	dst[0] = loss
	b.counts(dst[1:])
	return nil
}

// nan marks a metric a task does not have.
var nan = math.NaN()

// rowLen is the length of the loader's rows: a GPT-2 sequence is a row, a BERT one is [CLS], a
// row, [SEP].
func (c Config) rowLen() int {
	if c.IsBERT() {
		return c.SeqLen - 2
	}
	return c.SeqLen
}

// evalFigures runs the loader's next len(dst)/k validation batches (k = tk.figures()), batch j
// as batch first+j, writing each one's figures into dst.
func evalFigures(tk task, l batchReader, first int, dst []float32) error {
	k := tk.figures()
	for j := 0; j < len(dst)/k; j++ {
		if err := tk.evalBatch(l, first+j, dst[j*k:(j+1)*k]); err != nil {
			return err
		}
	}
	return nil
}

// batchMetrics turns the figures of batches (k per batch, in batch order) into the mean loss and,
// with masked counts (BERT), the masked-token accuracy (NaN without). BERT's mean weighs each
// batch's mean by its masked positions: the mean over all of them. Sums are float64 in order,
// as one process makes them.
func batchMetrics(figs []float32, k int) (loss, acc float64) {
	if k == 1 {
		return meanInOrder(figs), nan
	}
	var sum, correct, masked float64
	for i := 0; i+k <= len(figs); i += k {
		sum += float64(figs[i]) * float64(figs[i+2])
		correct += float64(figs[i+1])
		masked += float64(figs[i+2])
	}
	if masked == 0 {
		return 0, nan
	}
	return sum / masked, correct / masked
}
