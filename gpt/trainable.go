package gpt

import (
	"fmt"
	"math"
	"slices"

	"github.com/gpt2go/gpt2go/backend"
)

// Trainable is the state every model family trains the same way, whatever its layers: the flat
// fp32 master parameters in ParamSpec order, their gradients, the AdamW moments, the 16-bit
// compute copy of a mixed precision plan, and the data-parallel layout (parallel.go) of all of
// them. A model embeds one and lays its named views over Params, Compute and Grads (or the
// scratch of BackwardAccumulate); GradNorm, Update, UpdateShard, SetParams, SetMoments and the
// ZeRO-1 helpers are then the model's. gpt.Model and bert.Model both do.
type Trainable struct {
	be backend.Backend
	// Flat buffers in ParamSpecs order; the AdamW moments mirror the parameters. Params is the
	// fp32 master copy; forward and backward read Compute(), which is Params itself in fp32 and
	// a 16-bit copy in a mixed plan (see Precision). A frozen model has no master: its Params
	// is Compute(), in the compute format.
	Params, Grads, M, V backend.Buf
	// Data-parallel layout: with ZeRO-1 shards, Params and Grads are views of the first
	// NumParams elements of padded flat buffers, and M and V hold this rank's shard only; with
	// a sharded master (MasterSharded), Params holds this rank's shard only and Compute() is a
	// view of the padded computeFlat.
	par                                Parallel
	paramsFlat, gradsFlat, computeFlat backend.Buf
	gradScratch                        backend.Buf // SeparateAccum: one micro-batch's gradient
	normSums                           []float64   // GradNorm's block sums
	stats                              backend.Buf // GradStats' buffer
	step                               backend.Buf // SetUpdateStep's scalars (AdamWAll's, then the seed), and their host copy
	stepHost                           [backend.AdamWStepLen + backend.SeedLen]float32
	segs                               []backend.AdamWSegment
	prec                               Precision
	frozen                             bool   // NewFrozen: parameters only, for forward passes
	omit                               []bool // NewFrozenWithout: the tensors left out of the flat buffers
	numParams                          int    // parameters of all the specs, the omitted ones included
	compute                            backend.Buf
	specs                              []ParamSpec
	offsets                            []int // start of each spec in the flat buffers
	// Per-tensor views of Params, Grads and the moments (the moments' only without shards).
	paramAll, gradAll, moments1, moments2 []backend.Buf
	// The gradient stream of the next backward pass (gradstream.go), and its views of Grads
	// and GradScratch: each layer's slices, and the other tensors.
	stream                   *gradStream
	layerGrads, layerScratch [][]backend.Buf
	restGrads, restScratch   []backend.Buf
}

// NewTrainable allocates the trainable state of a model with the parameter tensors specs in the
// storage plan prec and the data-parallel layout par. Parameters, gradients and moments start
// at zero.
func NewTrainable(be backend.Backend, specs []ParamSpec, prec Precision, par Parallel) (Trainable, error) {
	return newTrainable(be, specs, prec, par, false, nil)
}

// NewFrozen allocates the parameters of a model that only runs forward (sampling, evaluation,
// attention maps): one copy in the compute format, with no fp32 master in a mixed plan (SetParams
// rounds the values as it uploads them, as the master's Convert would), no gradients and no AdamW
// moments: a quarter of NewTrainable's bytes in fp32, a ninth in bf16 (fp32 gradients).
// RunBackward refuses to run on it; the update, gradient-norm and moment methods must not be
// called.
func NewFrozen(be backend.Backend, specs []ParamSpec, prec Precision) (Trainable, error) {
	return newTrainable(be, specs, prec, Parallel{}, true, nil)
}

// NewFrozenWithout is NewFrozen for a model that keeps some tensors elsewhere (an int8 model, its
// matmul weights): the specs[i] with omit[i] take no room in Params or Compute, their views are
// nil (TensorViews), and SetParams, which still takes all the specs' values, skips theirs.
func NewFrozenWithout(be backend.Backend, specs []ParamSpec, prec Precision, omit []bool) (Trainable, error) {
	if len(omit) != len(specs) {
		return Trainable{}, fmt.Errorf("omit marks %d tensors, the model has %d", len(omit), len(specs))
	}
	return newTrainable(be, specs, prec, Parallel{}, true, slices.Clone(omit))
}

func newTrainable(be backend.Backend, specs []ParamSpec, prec Precision, par Parallel, frozen bool, omit []bool) (Trainable, error) {
	if err := prec.Validate(); err != nil {
		return Trainable{}, err
	}
	if err := be.CheckDType(prec.Compute); err != nil {
		return Trainable{}, err
	}
	if err := par.validate(); err != nil {
		return Trainable{}, err
	}
	t := Trainable{be: be, specs: specs, prec: prec, par: par, frozen: frozen, omit: omit}
	n := 0
	for i, s := range specs {
		t.offsets = append(t.offsets, n)
		t.numParams += s.Size()
		if !t.Omitted(i) {
			n += s.Size()
		}
	}
	if frozen {
		t.Params = t.alloc(n, prec.Compute)
		t.paramsFlat, t.compute = t.Params, t.Params
		t.paramAll = t.TensorViews(t.Params)
		return t, nil
	}
	t.allocFlat(n)
	if par.SeparateAccum {
		t.gradScratch = t.alloc(n, prec.Grads)
	}
	t.gradAll = t.TensorViews(t.Grads)
	if !t.MasterSharded() {
		t.paramAll = t.TensorViews(t.Params)
	}
	if par.Shards == 0 {
		t.moments1, t.moments2 = t.TensorViews(t.M), t.TensorViews(t.V)
	}
	return t, nil
}

// TensorViews splits a flat buffer laid out like the parameters into one view per tensor (nil
// for an omitted one).
func (t *Trainable) TensorViews(flat backend.Buf) []backend.Buf {
	out := make([]backend.Buf, len(t.specs))
	for i, s := range t.specs {
		if !t.Omitted(i) {
			out[i] = t.be.View(flat, t.offsets[i], s.Size())
		}
	}
	return out
}

// Omitted says whether specs[i] was left out of the flat buffers (NewFrozenWithout).
func (t *Trainable) Omitted(i int) bool { return t.omit != nil && t.omit[i] }

// TrainableMemoryPlan lists the bytes of NewTrainable's buffers for n parameters, with sizeOf(dt)
// bytes per element of dt: the head of every model family's memory plan.
func TrainableMemoryPlan(n int64, prec Precision, par Parallel, sizeOf func(backend.DType) int64) []backend.MemoryItem {
	f32 := sizeOf(backend.F32)
	padded, moments, momentsName := n, n, "AdamW moments"
	var plan []backend.MemoryItem
	if par.Shards > 0 {
		s := int64(ShardLen(int(n), par.Shards))
		padded, moments = s*int64(par.Shards), s
		momentsName = fmt.Sprintf("AdamW moments (ZeRO-1: 1/%d shard)", par.Shards)
		if par.ShardMaster && prec.Mixed() {
			plan = []backend.MemoryItem{
				{Name: fmt.Sprintf("parameters (ZeRO-1: 1/%d shard)", par.Shards), Bytes: f32 * s},
				{Name: "parameters (" + prec.Compute.String() + " copy)", Bytes: sizeOf(prec.Compute) * padded},
			}
		}
	}
	if plan == nil {
		plan = paramsMemoryPlan(n, padded, prec, sizeOf)
	}
	plan = append(plan, backend.MemoryItem{Name: "gradients", Bytes: sizeOf(prec.Grads) * padded})
	if par.SeparateAccum {
		plan = append(plan, backend.MemoryItem{Name: "gradients (one micro-batch's)", Bytes: sizeOf(prec.Grads) * n})
	}
	return append(plan, backend.MemoryItem{Name: momentsName, Bytes: 2 * f32 * moments})
}

// FrozenMemoryPlan lists the bytes of NewFrozen's buffers for n parameters: one copy, in the
// compute format.
func FrozenMemoryPlan(n int64, prec Precision, sizeOf func(backend.DType) int64) []backend.MemoryItem {
	name := "parameters"
	if prec.Mixed() {
		name += " (" + prec.Compute.String() + ")"
	}
	return []backend.MemoryItem{{Name: name, Bytes: sizeOf(prec.Compute) * n}}
}

// paramsMemoryPlan is the parameters' part of a plan: the fp32 master copy (padded elements)
// and, in a mixed plan, the 16-bit compute copy of the n parameters.
func paramsMemoryPlan(n, padded int64, prec Precision, sizeOf func(backend.DType) int64) []backend.MemoryItem {
	plan := []backend.MemoryItem{{Name: "parameters", Bytes: sizeOf(backend.F32) * padded}}
	if prec.Mixed() {
		plan = append(plan, backend.MemoryItem{Name: "parameters (" + prec.Compute.String() + " copy)", Bytes: sizeOf(prec.Compute) * n})
	}
	return plan
}

// Specs lists the parameter tensors in flat-buffer order.
func (t *Trainable) Specs() []ParamSpec { return t.specs }

// Offsets gives the start of each parameter tensor in the flat buffers (where an omitted one
// would have started: such a model's buffers are not the checkpoint layout).
func (t *Trainable) Offsets() []int { return t.offsets }

// Compute is the parameter copy forward and backward read: Params in fp32, the 16-bit copy in a
// mixed plan.
func (t *Trainable) Compute() backend.Buf { return t.compute }

// GradScratch is the buffer BackwardAccumulate computes one micro-batch's gradient into (nil
// without Parallel.SeparateAccum).
func (t *Trainable) GradScratch() backend.Buf { return t.gradScratch }

// SetParams uploads a flat host parameter array (ParamSpecs order, every spec's values, those
// of omitted tensors too, which it skips).
func (t *Trainable) SetParams(host []float32) error {
	if len(host) != t.numParams { // before writing anything
		return fmt.Errorf("parameter count mismatch: have %d, model needs %d", len(host), t.numParams)
	}
	return t.SetParamsFrom(HostParams(host))
}

// ParamsReader reads a model's flat host parameters (ParamSpecs order) a chunk at a time: it
// calls sink with consecutive chunks, off being each one's offset in the flat array, until all
// are read, and returns sink's first error or its own. HostParams reads a slice; a checkpoint's
// ReadParams reads its file without holding all of it.
type ParamsReader func(sink func(off int, chunk []float32) error) error

// HostParams is the ParamsReader of parameters held in memory.
func HostParams(params []float32) ParamsReader {
	return func(sink func(off int, chunk []float32) error) error { return sink(0, params) }
}

// SetParamsFrom is SetParams for parameters that read hands over a chunk at a time, so that a
// model loaded from a file never needs a host copy of them all. On an error the parameters are
// partly written.
func (t *Trainable) SetParamsFrom(read ParamsReader) error { return t.setParamsFrom(read, nil) }

// setParamsFrom is SetParamsFrom that hands the values of omitted tensors to omitted(i, off,
// part), off being part's offset in specs[i], instead of skipping them (when not nil).
func (t *Trainable) setParamsFrom(read ParamsReader, omitted func(i, off int, part []float32) error) error {
	order := ChunkOrder{What: "parameter", N: t.numParams}
	i, start := 0, 0 // the spec the values reached and where it starts
	err := read(func(next int, chunk []float32) error {
		if err := order.Take(next, len(chunk)); err != nil {
			return err
		}
		for len(chunk) > 0 {
			for next >= start+t.specs[i].Size() {
				start += t.specs[i].Size()
				i++
			}
			lo := next - start
			part := chunk[:min(len(chunk), t.specs[i].Size()-lo)]
			switch {
			case !t.Omitted(i):
				t.UploadParam(i, lo, part)
			case omitted != nil:
				if err := omitted(i, lo, part); err != nil {
					return err
				}
			}
			chunk, next = chunk[len(part):], next+len(part)
		}
		return nil
	})
	if err == nil {
		err = order.Done()
	}
	if err != nil {
		return err
	}
	t.ParamsChanged()
	return nil
}

// UploadParam writes values into the fp32 master of tensor specs[i] from its element off on
// (with a sharded master, those in this rank's shard; the others are not this rank's to keep).
// Call ParamsChanged after writing. Model initialisations write through it.
func (t *Trainable) UploadParam(i, off int, values []float32) {
	at := t.offsets[i] + off
	if !t.MasterSharded() {
		t.be.Upload(t.be.View(t.Params, at, len(values)), values)
		return
	}
	shard, _, real := t.Shard()
	if lo, hi := max(at, shard), min(at+len(values), shard+real); lo < hi {
		t.be.Upload(t.be.View(t.Params, lo-shard, hi-lo), values[lo-at:hi-at])
	}
}

// ReadAll collects the n values read hands over into one host array, for what needs them all
// at once (an export, a file reader's eager form).
func ReadAll(read ParamsReader, n int) ([]float32, error) {
	out := make([]float32, n)
	order := ChunkOrder{What: "parameter", N: n}
	err := read(func(off int, chunk []float32) error {
		if err := order.Take(off, len(chunk)); err != nil {
			return err
		}
		copy(out[off:], chunk)
		return nil
	})
	if err == nil {
		err = order.Done()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ChunkOrder checks that a ParamsReader's chunks of What ("parameter", "moment") come in order
// and cover exactly N values: for every sink that takes a reader's chunks (models, ReadAll, the
// model-file writers).
type ChunkOrder struct {
	What string
	N    int
	next int
}

// Take accounts for a chunk of size values at off.
func (c *ChunkOrder) Take(off, size int) error {
	switch {
	case off != c.next:
		return fmt.Errorf("%ss out of order: a chunk at %d after %d values", c.What, off, c.next)
	case size > c.N-off:
		return fmt.Errorf("%s count mismatch: have at least %d, model needs %d", c.What, off+size, c.N)
	}
	c.next += size
	return nil
}

// Done says whether all N values came.
func (c *ChunkOrder) Done() error {
	if c.next != c.N {
		return fmt.Errorf("%s count mismatch: have %d, model needs %d", c.What, c.next, c.N)
	}
	return nil
}

// Frozen reports whether the model was made by NewFrozen: forward only, no gradients.
func (t *Trainable) Frozen() bool { return t.frozen }

// ZeroGrad clears the parameter gradients (before the first micro-batch of a step).
func (t *Trainable) ZeroGrad() { t.be.Zero(t.Grads) }

// Accumulate runs backward, a model's backward pass into the views of GradScratch, on zeroed
// scratch and then adds the result to Grads (acc = acc + g): k micro-batches then give the bits
// of k ranks' sum of one each (Parallel.SeparateAccum).
func (t *Trainable) Accumulate(backward func() error) error { return t.RunBackward(true, backward) }

// GradNorm is the global L2 norm of the gradients, the square root of GradSquares.
func (t *Trainable) GradNorm() float64 { return math.Sqrt(t.GradSquares()) }

// GradSquares is the sum of squares of the gradients. On a backend that sums in blocks it is
// backend.SumBlockSums of GradBlockSums (a definition that ZeRO-1's shards reproduce bit for
// bit, and GradStats' on the backend); elsewhere one SumSquares over all of them.
func (t *Trainable) GradSquares() float64 {
	defer backend.Scope(t.be, "grad_norm")()
	if backend.BlockSums(t.be) == nil {
		return t.be.SumSquares(t.Grads, t.Grads.Len())
	}
	if t.normSums == nil {
		t.normSums = make([]float64, t.numBlocks(t.Grads.Len()))
	}
	t.GradBlockSums(t.normSums, 0, t.Grads.Len())
	return backend.SumBlockSums(t.normSums)
}

// AdamWConfig holds the optimizer's hyperparameters (the learning rate is passed per step).
type AdamWConfig struct {
	Beta1, Beta2, Eps, WeightDecay float64
}

// Update applies one AdamW step (1-based step) with learning rate lr to every parameter tensor;
// weight decay only touches tensors whose spec has Decay (the 2-D weight matrices). gradScale
// multiplies the gradients first (gradient clipping, and undoing a loss scale). In a mixed plan
// the compute copy is then rewritten from the updated master.
func (t *Trainable) Update(opt AdamWConfig, lr float64, step int, gradScale float64) {
	defer backend.Scope(t.be, "optimizer")()
	if t.par.Shards > 0 {
		panic("Update on a model with ZeRO-1 shards; use UpdateShard")
	}
	for i, s := range t.specs {
		t.be.AdamW(t.paramAll[i], t.gradAll[i], t.moments1[i], t.moments2[i], s.Size(), t.adamWParams(opt, s, lr, step, gradScale))
	}
	t.ParamsUpdatedAt(step)
}

// GradStats queues the gradient statistics of backend.Ops.GradStats (the norm of GradNorm, the
// clip factor and loss scale undone, whether it is finite) into the model's stats buffer on the
// backend, copies nothing to the host, and returns the buffer (StepStatsLen elements) for
// UpdateWithStats and the caller to read.
func (t *Trainable) GradStats(clip, lossScale float64) backend.Buf {
	defer backend.Scope(t.be, "grad_norm")()
	stats := t.StatsBuffer()
	t.be.GradStats(stats, t.Grads, t.Grads.Len(), NormBlock, clip, lossScale)
	return stats
}

// StatsBuffer is GradStats' buffer (allocated on the first call).
func (t *Trainable) StatsBuffer() backend.Buf {
	if t.stats == nil {
		t.stats = t.be.Alloc(backend.StepStatsLen)
	}
	return t.stats
}

// UpdateWithStats is Update in one op (backend.Ops.AdamWAll) with the gradient scale read from
// stats, GradStats' buffer, on the backend: when the norm was not finite nothing changes. It
// leaves the compute copy of a mixed plan alone: call ParamsUpdatedAt(step) once the update is
// known to have been applied (at once when a non-finite norm stops the run anyway). It is
// SetUpdateStep then QueueUpdate.
func (t *Trainable) UpdateWithStats(opt AdamWConfig, lr float64, step int, stats backend.Buf) {
	t.SetUpdateStep(opt, lr, step)
	t.QueueUpdate(opt, stats)
}

// SetUpdateStep copies to the backend what changes from one AdamW step to the next (the
// learning rate's terms of step `step`, 1-based, at lr, and the seed of the compute copy's
// stochastic rounding), for the next QueueUpdate and QueueParamsUpdate.
func (t *Trainable) SetUpdateStep(opt AdamWConfig, lr float64, step int) {
	if t.step == nil {
		t.step = t.be.Alloc(len(t.stepHost))
	}
	t.adamWParams(opt, ParamSpec{Decay: true}, lr, step, math.NaN()).EncodeStep(t.stepHost[:backend.AdamWStepLen])
	backend.PutBits64(t.stepHost[backend.AdamWStepLen:], t.updateSeed(step))
	t.be.Upload(t.step, t.stepHost[:])
}

// QueueParamsUpdate queues what ParamsUpdatedAt does with the step of the last SetUpdateStep,
// the seed read from the backend: for a recorded graph (backend.Grapher) of the update.
func (t *Trainable) QueueParamsUpdate() {
	if !t.prec.Mixed() {
		return
	}
	if t.MasterSharded() {
		panic("QueueParamsUpdate with a sharded master; use ParamsUpdatedAt and all-gather PaddedCompute")
	}
	if t.step == nil {
		panic("QueueParamsUpdate before SetUpdateStep")
	}
	t.be.ConvertSeeded(t.compute, t.Params, t.Params.Len(), t.be.View(t.step, backend.AdamWStepLen, backend.SeedLen))
}

// QueueUpdate queues UpdateWithStats' AdamWAll with the scalars of the last SetUpdateStep: ops
// on backend memory only, nothing copied, so that a recorded graph (backend.Grapher) can
// replay it at every step.
func (t *Trainable) QueueUpdate(opt AdamWConfig, stats backend.Buf) {
	defer backend.Scope(t.be, "optimizer")()
	if t.par.Shards > 0 {
		panic("QueueUpdate on a model with ZeRO-1 shards; use UpdateShard")
	}
	if t.step == nil {
		panic("QueueUpdate before SetUpdateStep")
	}
	if t.segs == nil {
		for _, s := range t.specs {
			t.segs = append(t.segs, backend.AdamWSegment{Len: s.Size(), Decay: s.Decay})
		}
	}
	// The step's learning rate and bias corrections are read from t.step.
	h := t.adamWParams(opt, ParamSpec{Decay: true}, 0, 0, math.NaN())
	t.be.AdamWAll(t.Params, t.Grads, t.M, t.V, t.segs, h, t.be.View(t.step, 0, backend.AdamWStepLen), stats)
}

// adamWParams are the scalars of one AdamW step of the tensor s.
func (t *Trainable) adamWParams(opt AdamWConfig, s ParamSpec, lr float64, step int, gradScale float64) backend.AdamWParams {
	wd := 0.0
	if s.Decay {
		wd = opt.WeightDecay
	}
	return backend.AdamWParams{
		LR: float32(lr), Beta1: float32(opt.Beta1), Beta2: float32(opt.Beta2), Eps: float32(opt.Eps),
		WeightDecay: float32(wd), GradScale: float32(gradScale), Step: step,
	}
}

// Precision is the model's storage plan.
func (t *Trainable) Precision() Precision { return t.prec }

// ParamsChanged rewrites the compute copy of the parameters from the fp32 master, rounding to
// nearest; call it after writing Params directly (SetParams, the Init methods and Update do it
// themselves). In fp32 there is no copy and it does nothing.
func (t *Trainable) ParamsChanged() { t.ParamsUpdatedAt(0) }

// ParamsUpdatedAt rewrites the compute copy exactly as Update(step) last did (with stochastic
// rounding its bits depend on the step; step 0 means no update yet: round to nearest). A resumed
// run calls it with its last update's step, so that it continues from the same copy. With a
// sharded master it rewrites this rank's shard of the copy, each element to the bits the whole
// conversion gives it (backend.StochasticSeedAt); the caller all-gathers PaddedCompute.
func (t *Trainable) ParamsUpdatedAt(step int) {
	if !t.prec.Mixed() || t.frozen { // a frozen model's Params is its compute copy
		return
	}
	if !t.MasterSharded() {
		t.be.Convert(t.compute, t.Params, t.Params.Len(), t.updateSeed(step))
		return
	}
	off, _, real := t.Shard()
	if real == 0 { // the last ranks' shards can be all padding, past the parameters
		return
	}
	t.be.Convert(t.be.View(t.computeFlat, off, real), t.Params, real, backend.StochasticSeedAt(t.updateSeed(step), off))
}

// updateSeed is the Convert seed of the compute copy after update step (0 before any update
// and without stochastic rounding: round to nearest).
func (t *Trainable) updateSeed(step int) uint64 {
	if t.prec.StochasticRounding && step > 0 {
		return stochasticSeed(step)
	}
	return 0
}

// alloc returns a buffer of n elements in dt (fp32 through Alloc, as before mixed precision).
func (t *Trainable) alloc(n int, dt backend.DType) backend.Buf {
	if dt == backend.F32 {
		return t.be.Alloc(n)
	}
	return t.be.AllocDType(n, dt)
}

// Weights returns the trainable state itself: what a trainer driving any model family (which
// embeds it) updates, reduces across ranks and checkpoints.
func (t *Trainable) Weights() *Trainable { return t }
