package train

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
)

// Evaluate returns the mean loss of model over n batches of loader, from its current position.
func Evaluate(model *gpt.Model, loader *data.Loader, B, T, n int) (float64, error) {
	losses := make([]float32, n)
	if err := evalFigures(newGPTTask(model, B, T), loader, 0, losses); err != nil {
		return 0, err
	}
	return meanInOrder(losses), nil
}

// meanInOrder is the mean of x summed in float64 from first to last: the order in which one
// process meets its micro-batches and validation batches, which data-parallel ranks reproduce.
func meanInOrder(x []float32) float64 {
	var sum float64
	for _, v := range x {
		sum += float64(v)
	}
	return sum / float64(len(x))
}

// BenchResult is the timing of full training steps (forward, backward, AdamW) on random tokens.
type BenchResult struct {
	Arch    string     `json:"arch,omitempty"` // "" for GPT-2, "bert"
	Model   gpt.Config `json:"model"`
	Backend string     `json:"backend"`
	// Precision is the storage plan (gpt.Precision's name; the caller may say tf32).
	Precision string `json:"precision"`
	// MatmulKernel names the CPU's float32 matmul micro-kernel (set by the caller; empty on GPUs).
	MatmulKernel string    `json:"matmul_kernel,omitempty"`
	BatchSize    int       `json:"batch_size"`
	SeqLen       int       `json:"seq_len"`
	Steps        int       `json:"steps"`
	StepMs       []float64 `json:"step_ms"` // each timed step
	MsPerStep    float64   `json:"ms_per_step"`
	MinMs        float64   `json:"min_ms"`
	TokPerSec    float64   `json:"tok_per_s"`
	GFlops       float64   `json:"gflop_per_s"` // achieved, from Config.FlopsPerToken
	// PeakGFlops is the backend's measured sgemm peak (backend.Peaker) and PctOfPeak is GFlops as a
	// percentage of it (model FLOPs utilisation); both are 0 when the backend has no Peaker.
	PeakGFlops float64 `json:"peak_gflop_per_s"`
	PctOfPeak  float64 `json:"pct_of_peak"`
	PeakHeapMB float64 `json:"peak_heap_mb"` // Go heap obtained from the OS
	// PeakRSSMB is the process's peak resident set (VmHWM), everything the benchmark held at once;
	// 0 where the OS does not report it.
	PeakRSSMB float64 `json:"peak_rss_mb"`
	// DeviceMemMB is the GPU memory the backend allocated (set by the caller; 0 on the CPU).
	DeviceMemMB float64 `json:"device_mem_mb,omitempty"`
	// Hints are the pitfalls found (Pitfalls) and LargestBatch the largest micro-batch whose
	// memory plan fits the device (0: unknown); set by the caller.
	Hints        []string `json:"hints,omitempty"`
	LargestBatch int      `json:"largest_batch,omitempty"`
	// Graphs says whether the steps ran as recorded graphs (backend.Grapher), or why not; empty
	// on a backend that records none.
	Graphs string `json:"graphs,omitempty"`
	// Calls is what the host queued per timed step, on a backend that counts it (a GPU).
	Calls *StepCalls `json:"host_calls,omitempty"`
}

// StepCalls are a step's host calls (backend.HostCalls), averaged over the timed steps.
type StepCalls struct {
	Launches float64 `json:"launches"`  // kernels, cuBLASLt matmuls and memsets
	Graphs   float64 `json:"graphs"`    // graph launches
	Copies   float64 `json:"copies"`    // host<->device copies
	LaunchMs float64 `json:"launch_ms"` // host time in the launch calls
}

// String says what the host queued per step, as bench and profile print it.
func (c *StepCalls) String() string {
	return fmt.Sprintf("per step, the host queued %.0f kernel launches (%.2f ms of host time), %.0f graph launches and %.0f copies",
		c.Launches, c.LaunchMs, c.Graphs, c.Copies)
}

// LaunchHint names the cost of launching a step's kernels one by one when a step makes more
// than 50 launches and graphs are off (measured: the host's time in the launch calls), and
// the way to replay them as graphs; "" otherwise.
func (r *BenchResult) LaunchHint() string {
	c := r.Calls
	if c == nil || c.Launches <= 50 || !strings.HasPrefix(r.Graphs, "off") {
		return ""
	}
	return fmt.Sprintf("%.0f kernel launches per step took the host %.2f ms per step (%.0f%% of the step); CUDA graphs replay each part of a step in one launch: leave out --cuda-graphs=false and GPT2GO_CUDA_GRAPHS=0 (graphs %s)",
		c.Launches, c.LaunchMs, 100*c.LaunchMs/r.MsPerStep, r.Graphs)
}

// Bench times steps training steps after warmup untimed ones, in fp32.
func Bench(be backend.Backend, cfg gpt.Config, B, T, warmup, steps int) (*BenchResult, error) {
	return BenchWithPrecision(be, cfg, gpt.Precision{}, B, T, warmup, steps)
}

// BenchWithPrecision is Bench with the storage plan prec. An fp16 plan runs without loss scaling:
// the timing is the same. A backend that records graphs does (graphs.go) unless GraphsOff().
func BenchWithPrecision(be backend.Backend, cfg gpt.Config, prec gpt.Precision, B, T, warmup, steps int) (*BenchResult, error) {
	return BenchGraphs(context.Background(), be, cfg, prec, B, T, warmup, steps, false)
}

// GraphsOff says whether GPT2GO_CUDA_GRAPHS=0 asks training and `gpt2go bench` to run every op
// directly (what --cuda-graphs=false does for one command): for the ladder's rungs before
// "graphs", and as a way around a suspected fault.
func GraphsOff() bool { return os.Getenv("GPT2GO_CUDA_GRAPHS") == "0" }

// BenchGraphs is BenchWithPrecision with graphs off when noGraphs (as they are anyway with
// GPT2GO_CUDA_GRAPHS=0), stopping between steps when ctx is cancelled.
func BenchGraphs(ctx context.Context, be backend.Backend, cfg gpt.Config, prec gpt.Precision, B, T, warmup, steps int, noGraphs bool) (*BenchResult, error) {
	if steps < 1 || warmup < 0 {
		return nil, fmt.Errorf("bench needs --steps >= 1 and --warmup-steps >= 0")
	}
	model, err := gpt.NewWithPrecision(be, cfg, B, T, prec)
	if err != nil {
		return nil, err
	}
	model.InitGPT2(1)
	rng := rand.New(rand.NewPCG(1, 2))
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
	for i := range inputs {
		inputs[i], targets[i] = int32(rng.IntN(cfg.VocabSize)), int32(rng.IntN(cfg.VocabSize))
	}
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	// Each step is what the trainer queues (step.go): forward with the fused classifier, its
	// losses copied back, backward, the gradient statistics and one AdamW on the backend. Step
	// i+1 is queued before step i is waited for on an asynchronous backend, unless SyncSteps();
	// a step's time is the time between two steps' ends, the first timed one's from the end of
	// the warm-up.
	var graphs *stepGraphs // the step's two parts recorded as graphs, as the trainer does
	graphsNote := ""
	if g := backend.GrapherOf(be); g != nil {
		if graphsNote = graphsOff(noGraphs); graphsNote == "" {
			graphs = newStepGraphs(g, func(format string, args ...any) { graphsNote = fmt.Sprintf(format, args...) })
			defer graphs.close()
		}
	}
	losses := [2][]float32{backend.HostBuffer(be, B*T), backend.HostBuffer(be, B*T)}
	stats := [2][]float32{backend.HostBuffer(be, backend.StepStatsLen), backend.HostBuffer(be, backend.StepStatsLen)}
	sync := SyncSteps() || backend.AsyncOf(be) == nil // a synchronous backend has each step done when queued
	var prev backend.Fence
	var calls0 backend.HostCalls
	var best time.Duration
	var lastEnd, timedFrom time.Time
	stepMs := make([]float64, 0, steps)
	ended := func(i int) {
		now := time.Now()
		if i >= warmup {
			d := now.Sub(lastEnd)
			stepMs = append(stepMs, d.Seconds()*1000)
			if best == 0 || d < best {
				best = d
			}
		}
		lastEnd = now
	}
	for i := range warmup + steps {
		if ctx.Err() != nil {
			if prev != nil {
				prev.Wait() // the queued step's error matters no more
			}
			return nil, benchInterrupted(i, warmup+steps)
		}
		if i == warmup {
			if prev != nil {
				if err := prev.Wait(); err != nil {
					return nil, err
				}
				prev = nil
			}
			lastEnd = time.Now()
			timedFrom = lastEnd
			if cc, ok := be.(backend.CallCounter); ok {
				calls0 = cc.HostCalls()
			}
		}
		if err := model.SetBatch(inputs, targets, B, T); err != nil {
			return nil, err
		}
		if err := graphs.run("micro-batch", func() error {
			model.ZeroGrad()
			if err := model.ForwardTrainBatch(1); err != nil {
				return err
			}
			return model.Backward(1)
		}); err != nil {
			return nil, err
		}
		model.QueueLosses(losses[i%2])
		model.SetUpdateStep(opt, 1e-4, i+1)
		st := model.StatsBuffer()
		if err := graphs.run("update", func() error {
			model.GradStats(1, 1)
			model.QueueUpdate(opt, st)
			model.QueueParamsUpdate()
			return nil
		}); err != nil {
			return nil, err
		}
		backend.DownloadLater(be, stats[i%2], st)
		f := backend.FenceOf(be)
		if sync {
			if err := f.Wait(); err != nil {
				return nil, err
			}
			ended(i)
			continue
		}
		if prev != nil {
			if err := prev.Wait(); err != nil {
				return nil, err
			}
			ended(i - 1)
		}
		prev = f
	}
	if prev != nil {
		if err := prev.Wait(); err != nil {
			return nil, err
		}
		ended(warmup + steps - 1)
	}
	res := newBenchResult(cfg, be, prec, B, T, stepMs, lastEnd.Sub(timedFrom), best, cfg.FlopsPerToken(T))
	if cc, ok := be.(backend.CallCounter); ok {
		res.Calls = stepCallsOf(cc.HostCalls().Sub(calls0), steps)
	}
	if graphs != nil && !graphs.off {
		graphsNote = fmt.Sprintf("on: %d graphs recorded and replayed", graphs.recorded())
	}
	res.Graphs = graphsNote
	res.measurePeak(be)
	return res, nil
}

// newBenchResult is the result of timed steps of B x T tokens, which took total and the fastest
// best, each stepMs, for a model of flopsPerToken training FLOPs per token.
func newBenchResult(cfg gpt.Config, be backend.Backend, prec gpt.Precision, B, T int, stepMs []float64, total, best time.Duration, flopsPerToken float64) *BenchResult {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	sec := total.Seconds() / float64(len(stepMs))
	return &BenchResult{
		Model: cfg, Backend: be.Name(), Precision: prec.String(), BatchSize: B, SeqLen: T, Steps: len(stepMs), StepMs: stepMs,
		MsPerStep: sec * 1000, MinMs: best.Seconds() * 1000,
		TokPerSec:  float64(B*T) / sec,
		GFlops:     flopsPerToken * float64(B*T) / sec / 1e9,
		PeakHeapMB: float64(ms.HeapSys) / (1 << 20),
		PeakRSSMB:  float64(PeakRSS()) / (1 << 20),
	}
}

// measurePeak sets the backend's measured sgemm peak and the share of it the steps reached. It
// runs after the steps so that they start from the same state with or without a Peaker; the
// backend caches the figure, so a second bench does not pay for it again.
func (r *BenchResult) measurePeak(be backend.Backend) {
	if p, ok := be.(backend.Peaker); ok {
		if peak := p.PeakFLOPS(); peak > 0 {
			r.PeakGFlops = peak / 1e9
			r.PctOfPeak = 100 * r.GFlops / r.PeakGFlops
		}
	}
}

// BenchRun times training steps of run's model at its batch shape and precision on random
// tokens: a GPT-2 as BenchGraphs does (graphs off when noGraphs), a BERT encoder with each step
// framed, masked and run as its training runs one (taskStep), waited for before the next; a
// BERT records no graphs. Only the model, batch shape, precision, tokenizer (a BERT's special
// tokens) and seed of run matter, and the optimizer's settings. Cancelling ctx stops it
// between steps.
func BenchRun(ctx context.Context, be backend.Backend, run Config, warmup, steps int, noGraphs bool) (*BenchResult, error) {
	if !run.IsBERT() {
		return BenchGraphs(ctx, be, run.Model, run.ModelPrecision(), run.BatchSize, run.SeqLen, warmup, steps, noGraphs)
	}
	if steps < 1 || warmup < 0 {
		return nil, fmt.Errorf("bench needs --steps >= 1 and --warmup-steps >= 0")
	}
	if err := run.Validate(); err != nil {
		return nil, err
	}
	tk, err := newTaskOn(be, run, gpt.Parallel{SeparateAccum: run.GradAccum > 1})
	if err != nil {
		return nil, err
	}
	tk.init(run.Seed)
	src := newRandomBatches(run.Model.VocabSize, run.specials(), run.Seed)
	var best time.Duration
	var timedFrom time.Time
	stepMs := make([]float64, 0, steps)
	for i := range warmup + steps {
		if ctx.Err() != nil {
			return nil, benchInterrupted(i, warmup+steps)
		}
		start := time.Now()
		if i == warmup {
			timedFrom = start
		}
		if _, _, err := taskStep(tk, be, run, src, i+1); err != nil {
			return nil, err
		}
		if i >= warmup {
			d := time.Since(start)
			stepMs = append(stepMs, d.Seconds()*1000)
			if best == 0 || d < best {
				best = d
			}
		}
	}
	B, T := run.BatchSize*run.GradAccum, run.SeqLen
	res := newBenchResult(run.Model, be, run.ModelPrecision(), B, T, stepMs, time.Since(timedFrom), best, tk.flopsPerToken(T))
	res.Arch, res.BatchSize = run.Arch, run.BatchSize
	res.measurePeak(be)
	return res, nil
}

// benchInterrupted is the error of a bench stopped before step i (from 0) of n, warm-up included.
func benchInterrupted(i, n int) error {
	return fmt.Errorf("interrupted at step %d of %d", i, n)
}

// PeakRSS returns the peak resident set size of this process in bytes (VmHWM in
// /proc/self/status), or 0 where that file does not exist (not Linux).
func PeakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		// "VmHWM:     123456 kB"
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 2 && fields[1] == "kB" {
				kb, err := strconv.ParseInt(fields[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
