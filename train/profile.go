package train

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/profile"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/progress"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// ProfileFile is where `gpt2go profile --run RUNDIR` writes its result (a ProfileResult as JSON).
const ProfileFile = "profile.json"

// ProfileOptions say what to profile.
type ProfileOptions struct {
	// Config gives the model, batch shape, gradient accumulation, optimizer, clipping, seed and
	// data. Data "" means random tokens (drawn from Seed); otherwise batches come from the
	// dataset's train shards as in training. Steps only shapes the learning-rate schedule.
	Config Config
	// Params reads the starting weights (ParamSpecs order) into the model, a chunk at a time
	// (Loaded.ReadParams, or gpt.HostParams for weights in memory); nil means the model
	// family's initialisation from Seed.
	// Config.Arch picks the family: a BERT steps as its training does, masking 15% of the
	// positions of each row, and Config.Tokenizer must name its special tokens.
	Params gpt.ParamsReader
	// Warmup steps run first and are not recorded; Steps are profiled.
	Warmup, Steps int
	// ByShape gives each shape of an op its own row.
	ByShape bool
	// Profile options; the zero value syncs the backend after every op.
	Profile profile.Options
	// Progress gets a progress bar with an ETA over the steps; nil for none.
	Progress io.Writer
	// GPU says the backend is a GPU, for the hints about filling it (Pitfalls).
	GPU bool
}

// ProfileResult is the outcome of Profile; as JSON it is the file the run report reads.
type ProfileResult struct {
	Version     int        `json:"version"`        // 1
	Arch        string     `json:"arch,omitempty"` // "" for GPT-2, "bert"
	Model       gpt.Config `json:"model"`
	BatchSize   int        `json:"batch_size"`
	SeqLen      int        `json:"seq_len"`
	GradAccum   int        `json:"grad_accum"`
	Data        string     `json:"data"` // "" for random tokens
	Precision   string     `json:"precision,omitempty"`
	WarmupSteps int        `json:"warmup_steps"`
	Steps       int        `json:"steps"`
	StepMs      float64    `json:"step_ms"` // mean wall time of a profiled step
	TokPerSec   float64    `json:"tok_per_s"`
	Losses      []float64  `json:"losses"` // every step's mean loss, warm-up included
	// Accuracies are a BERT's masked-token accuracy of every step, warm-up included.
	Accuracies []float64 `json:"accuracies,omitempty"`
	// The table (backend, sync_each_op, wall_ms, rows) is inlined in the JSON, so the file also
	// reads as a plain profile.Report.
	*profile.Report
	// Trace is the timeline of the profiled steps (Chrome trace-event format).
	Trace *profile.Trace `json:"-"`
	// Calls is what the host queued per profiled step, on a backend that counts it (a GPU).
	// A profile runs every op directly: it times them one by one, which a graph would hide.
	Calls *StepCalls `json:"host_calls,omitempty"`
	// Hints are the pitfalls found, with what the profile measured of them (profileHints).
	Hints []string `json:"hints,omitempty"`
}

// Profile builds the model on a profiling wrapper around be, runs Warmup unrecorded training steps
// and then Steps recorded ones (forward, backward, gradient norm, AdamW), each inside a "step"
// scope, and returns the key-averages table and the trace. Profiling does not change the losses
// or the weights: they are bit-identical to an unprofiled run (tested).
func Profile(ctx context.Context, be backend.Backend, opts ProfileOptions) (*ProfileResult, error) {
	res, _, err := runProfile(ctx, be, opts)
	return res, err
}

func runProfile(ctx context.Context, be backend.Backend, opts ProfileOptions) (*ProfileResult, task, error) {
	cfg := opts.Config
	if opts.Steps < 1 || opts.Warmup < 0 {
		return nil, nil, fmt.Errorf("profile needs --steps >= 1 and --warmup-steps >= 0 (got %d and %d)", opts.Steps, opts.Warmup)
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	B, T := cfg.BatchSize, cfg.SeqLen
	budget := backend.BudgetOf(be) // before the model allocates, for the micro-batch that would fit
	prof := profile.WrapOptions(be, opts.Profile)
	tk, err := newTaskOn(prof, cfg, gpt.Parallel{SeparateAccum: cfg.GradAccum > 1}) // the trainer's layout in one process
	if err != nil {
		return nil, nil, err
	}
	if opts.Params != nil {
		if err := tk.weights().SetParamsFrom(opts.Params); err != nil {
			return nil, nil, err
		}
	} else {
		tk.init(cfg.Seed)
	}
	src, closeData, err := batchSource(cfg)
	if err != nil {
		return nil, nil, err
	}
	defer closeData()

	res := &ProfileResult{
		Version: 1, Arch: cfg.Arch, Model: cfg.Model, BatchSize: B, SeqLen: T, GradAccum: cfg.GradAccum, Data: cfg.Data,
		Precision:   PrecisionOn(cfg.PrecisionName(), opts.GPU),
		WarmupSteps: opts.Warmup, Steps: opts.Steps,
	}
	var peak float64 // measured before the steps, so that the measurement is not profiled
	if pk, ok := be.(backend.Peaker); ok {
		peak = pk.PeakFLOPS() / 1e9
	}
	bar := progress.New(opts.Progress, int64(opts.Warmup+opts.Steps), "profile", "steps")
	defer bar.Finish()
	var profiled time.Duration
	counter, _ := be.(backend.CallCounter)
	var calls0 backend.HostCalls
	for i := range opts.Warmup + opts.Steps {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("interrupted at step %d of %d", i, opts.Warmup+opts.Steps)
		}
		if i == opts.Warmup {
			prof.Reset()
			if counter != nil {
				calls0 = counter.HostCalls()
			}
		}
		start := time.Now()
		prof.Begin("step")
		loss, acc, err := taskStep(tk, prof, cfg, src, i+1)
		prof.End()
		if err != nil {
			return nil, nil, err
		}
		if i >= opts.Warmup {
			profiled += time.Since(start)
		}
		res.Losses = append(res.Losses, loss)
		if cfg.IsBERT() {
			res.Accuracies = append(res.Accuracies, acc)
		}
		bar.Add(1)
	}
	if err := prof.Err(); err != nil {
		return nil, nil, fmt.Errorf("profile: backend sync: %w", err)
	}
	sec := profiled.Seconds() / float64(opts.Steps)
	res.StepMs = sec * 1000
	res.TokPerSec = float64(B*T*cfg.GradAccum) / sec
	res.Report = prof.Report(opts.ByShape)
	res.Report.PeakGFlops = peak
	if counter != nil {
		res.Calls = stepCallsOf(counter.HostCalls().Sub(calls0), opts.Steps)
	}
	res.Hints = profileHints(cfg, cfg.ModelPrecision(), budget, opts.GPU, prof.Report(true), opts.Steps, res.Calls)
	res.Trace = prof.Trace(map[string]any{
		"arch": cfg.Arch, "model": cfg.Model, "batch_size": B, "seq_len": T, "grad_accum": cfg.GradAccum,
		"warmup_steps": opts.Warmup, "steps": opts.Steps,
	})
	return res, tk, nil
}

// batchSource returns where a profile's micro-batches come from: the dataset's train shards
// when cfg.Data is set (windows of the run's row length, as in training), else random tokens
// drawn from cfg.Seed.
func batchSource(cfg Config) (src batchReader, closeFn func(), err error) {
	if cfg.Data == "" {
		return newRandomBatches(cfg.Model.VocabSize, cfg.specials(), cfg.Seed), func() {}, nil
	}
	ds, err := data.Open(cfg.Data)
	if err != nil {
		return nil, nil, err
	}
	loader, err := data.NewLoader(ds.TrainShards, cfg.BatchSize, cfg.rowLen(), cfg.Model.VocabSize, cfg.Shuffle, cfg.Seed)
	if err != nil {
		return nil, nil, err
	}
	return loader, func() { loader.Close() }, nil
}

// randomBatches is a batchReader of uniformly random tokens that are not special (BERT's
// framing and masking put those in), and random targets.
type randomBatches struct {
	rng    *rand.Rand
	tokens []int32 // the ids to draw from
}

func newRandomBatches(vocab int, specials tokenizer.Specials, seed uint64) *randomBatches {
	r := &randomBatches{rng: rand.New(rand.NewPCG(seed, 2))}
	for id := range vocab {
		if !specials.Is(id) {
			r.tokens = append(r.tokens, int32(id))
		}
	}
	return r
}

func (r *randomBatches) Next(inputs, targets []int32) error {
	for i := range inputs {
		inputs[i] = r.tokens[r.rng.IntN(len(r.tokens))]
		targets[i] = r.tokens[r.rng.IntN(len(r.tokens))]
	}
	return nil
}

// taskStep runs optimizer step number step (1-based) of tk's model on be as the trainer does
// in one process: zero the gradients, GradAccum micro-batches of forward and backward, the
// gradient statistics (norm and clipping) and one AdamW at the schedule's learning rate on
// the backend, then a sync. It returns the step's loss and, for a BERT, its masked-token
// accuracy (NaN for a GPT-2), as the trainer logs them.
func taskStep(tk task, be backend.Backend, cfg Config, src batchReader, step int) (loss, acc float64, err error) {
	w := tk.weights()
	w.ZeroGrad()
	A, k := cfg.GradAccum, tk.figures()
	scale := 1 / float32(A)
	for micro := range A {
		if err := tk.forward(src, step-1, micro, scale, micro); err != nil {
			return 0, 0, err
		}
		if err := tk.backward(scale, micro == 0); err != nil {
			return 0, 0, err
		}
	}
	opt := gpt.AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay}
	w.UpdateWithStats(opt, cfg.LRAt(step-1), step, w.GradStats(cfg.GradClip, 1))
	w.ParamsUpdatedAt(step)
	if err := be.Sync(); err != nil {
		return 0, 0, err
	}
	figs := make([]float32, A*k)
	for micro := range A {
		tk.results(micro, figs[micro*k:(micro+1)*k])
	}
	loss, acc = batchMetrics(figs, k)
	return loss, acc, nil
}
