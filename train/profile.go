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
	// (Loaded.ReadParams, or gpt.HostParams for weights in memory); nil means GPT-2's
	// initialisation.
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
	Version     int        `json:"version"` // 1
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

func runProfile(ctx context.Context, be backend.Backend, opts ProfileOptions) (*ProfileResult, *gpt.Model, error) {
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
	model, err := gpt.NewWithPrecision(prof, cfg.Model, B, T, cfg.ModelPrecision())
	if err != nil {
		return nil, nil, err
	}
	if opts.Params != nil {
		if err := model.SetParamsFrom(opts.Params); err != nil {
			return nil, nil, err
		}
	} else {
		model.InitGPT2(cfg.Seed)
	}
	next, closeData, err := batchSource(cfg)
	if err != nil {
		return nil, nil, err
	}
	defer closeData()

	res := &ProfileResult{
		Version: 1, Model: cfg.Model, BatchSize: B, SeqLen: T, GradAccum: cfg.GradAccum, Data: cfg.Data,
		Precision:   cfg.PrecisionName(),
		WarmupSteps: opts.Warmup, Steps: opts.Steps,
	}
	var peak float64 // measured before the steps, so that the measurement is not profiled
	if pk, ok := be.(backend.Peaker); ok {
		peak = pk.PeakFLOPS() / 1e9
	}
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
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
		loss, err := trainStep(model, cfg, next, inputs, targets, i+1)
		prof.End()
		if err != nil {
			return nil, nil, err
		}
		if i >= opts.Warmup {
			profiled += time.Since(start)
		}
		res.Losses = append(res.Losses, loss)
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
	res.Hints = profileHints(cfg.Model, B, T, cfg.ModelPrecision(), budget, opts.GPU, prof.Report(true), opts.Steps, res.Calls)
	res.Trace = prof.Trace(map[string]any{
		"model": cfg.Model, "batch_size": B, "seq_len": T, "grad_accum": cfg.GradAccum,
		"warmup_steps": opts.Warmup, "steps": opts.Steps,
	})
	return res, model, nil
}

// batchSource returns a function that fills one (B,T) batch: from the dataset's train shards
// when cfg.Data is set, else random tokens drawn from cfg.Seed.
func batchSource(cfg Config) (next func(inputs, targets []int32) error, closeFn func(), err error) {
	if cfg.Data == "" {
		rng := rand.New(rand.NewPCG(cfg.Seed, 2))
		return func(inputs, targets []int32) error {
			for i := range inputs {
				inputs[i], targets[i] = int32(rng.IntN(cfg.Model.VocabSize)), int32(rng.IntN(cfg.Model.VocabSize))
			}
			return nil
		}, func() {}, nil
	}
	ds, err := data.Open(cfg.Data)
	if err != nil {
		return nil, nil, err
	}
	loader, err := data.NewLoader(ds.TrainShards, cfg.BatchSize, cfg.SeqLen, cfg.Model.VocabSize, cfg.Shuffle, cfg.Seed)
	if err != nil {
		return nil, nil, err
	}
	return loader.Next, func() { loader.Close() }, nil
}

// trainStep runs optimizer step number step (1-based) as the trainer does: zero the gradients,
// GradAccum micro-batches of forward and backward, the gradient statistics (norm and clipping)
// and one AdamW at the schedule's learning rate on the backend, then a sync. It returns the mean loss over the micro-batches.
func trainStep(m *gpt.Model, cfg Config, next func(inputs, targets []int32) error, inputs, targets []int32, step int) (float64, error) {
	m.ZeroGrad()
	var loss float64
	for range cfg.GradAccum {
		if err := next(inputs, targets); err != nil {
			return 0, err
		}
		scale := 1 / float32(cfg.GradAccum)
		l, err := m.ForwardTrain(inputs, targets, cfg.BatchSize, cfg.SeqLen, scale)
		if err != nil {
			return 0, err
		}
		if err := m.Backward(scale); err != nil {
			return 0, err
		}
		loss += float64(l)
	}
	opt := gpt.AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay}
	m.UpdateWithStats(opt, cfg.LRAt(step-1), step, m.GradStats(cfg.GradClip, 1))
	m.ParamsUpdatedAt(step)
	return loss / float64(cfg.GradAccum), m.Backend().Sync()
}
