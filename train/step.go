package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/dist"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/progress"
)

// A training step runs in two halves. queueStep reads the step's micro-batches and queues their
// forward and backward passes and, in one process, the gradient statistics and the AdamW update
// on the backend (gpt.Trainable.GradStats and UpdateWithStats: the clip factor, the loss scale
// and the skip of a non-finite step are decided there, from values that never visit the host).
// finishStep waits for the step's figures (its losses and gradient norm, copied back behind
// the update), logs them and does the host's work after the step: validation, samples,
// checkpoints.
//
// On an asynchronous backend (a GPU; backend.Async) the loop queues step s+1 before it
// finishes step s, so the GPU always has the next step's work and never idles while the host
// reads, logs and prepares: there is no sync inside a step, and the log line of a step comes
// while the next one runs. A step after which the host has work (validation, a sample,
// HellaSwag, a checkpoint, the last step) is finished before the next is queued, as are all
// steps of an fp16 run (its loss scale for step s+1 depends on step s's gradients) and of a
// data-parallel one (its collectives exchange the figures on the host). The bits are those of
// running each step to its end: the same ops in the same order.

// stepRun is a queued step that is not finished yet.
type stepRun struct {
	step      int              // 1-based
	lr        float64          // its learning rate
	usedScale float64          // the loss scale of its backward (1 without fp16)
	start     time.Time        // when queueStep began
	loader    data.LoaderState // the training loader after its micro-batches
	slot      int              // its micro-batches' first task slot (task.forward)
	// One process: GradStats' buffer copied to stats, valid when fence is done.
	stats []float32
	fence backend.Fence
	// Data parallel: the sum of squares of the reduced gradient, and the figures of all ranks'
	// micro-batches.
	squares float64
	figs    []float32
}

// deviceUpdate says whether steps decide clipping and skipping on the backend and update with
// one AdamWAll (one process), rather than from the reduced gradient's norm on the host
// (data-parallel runs, whose ZeRO-1 shards update apart).
func (t *Trainer) deviceUpdate() bool { return !t.distributed() }

// pipelineMode is Options.pipeline.
type pipelineMode int

const (
	pipelineAuto pipelineMode = iota // on an asynchronous backend, unless SyncSteps()
	pipelineOn                       // on any backend (where a step's figures allow it)
	pipelineOff                      // never
)

// pipelined says whether step s+1 may be queued before step s is finished.
func (t *Trainer) pipelined() bool {
	if !t.deviceUpdate() || t.state.LossScale != nil || t.opts.pipeline == pipelineOff {
		return false
	}
	return t.opts.pipeline == pipelineOn || (backend.AsyncOf(t.be) != nil && !SyncSteps())
}

// SyncSteps says whether GPT2GO_SYNC_STEPS=1 asks training and `gpt2go bench` to wait for each
// step's end before queuing the next (the host then syncs with the GPU once per step): for
// comparisons (the ladder's rungs before "no syncs") and as a way around a suspected fault.
func SyncSteps() bool { return os.Getenv("GPT2GO_SYNC_STEPS") == "1" }

// hostWork says what the host does after step: validation, HellaSwag, a sample, a checkpoint
// (the last step has all of them that are on).
func (t *Trainer) hostWork(step int) (eval, hellaswag, sample, ckpt bool) {
	cfg := t.cfg
	last := step == cfg.Steps || step == t.opts.StopAt
	eval = t.val != nil && (step%cfg.EvalEvery == 0 || last)
	hellaswag = t.hellaswag != nil && (step%cfg.HellaSwagEvery == 0 || last)
	// Only a GPT-2 samples text (t.sample); a BERT step must not end the pipeline for nothing.
	sample = t.model != nil && cfg.SampleTokens > 0 && ((cfg.SampleEvery > 0 && step%cfg.SampleEvery == 0) || last)
	ckpt = (cfg.CkptEvery > 0 && step%cfg.CkptEvery == 0) || last
	return eval, hellaswag, sample, ckpt
}

// queueStep runs step's micro-batches (this rank's W*A share) and queues or applies what follows.
func (t *Trainer) queueStep(step int) (*stepRun, error) {
	cfg, m := t.cfg, t.w
	W, rank, A, k := t.comm.Size(), t.comm.Rank(), cfg.GradAccum, t.task.figures()
	r := &stepRun{step: step, lr: cfg.LRAt(step - 1), usedScale: float64(t.lossScale()), start: time.Now(), slot: step % 2 * A}
	t.commTime, t.commWait, t.gradsReduced = 0, 0, false
	gt, split := t.task.(graphTask)
	t.graphs.useScale(r.usedScale)
	if !split {
		m.ZeroGrad()
	}
	// The step's W*A micro-batches: this rank's are r*A .. r*A+A-1 (dist.go).
	for micro := range W * A {
		if micro/A != rank {
			if err := t.train.Skip(); err != nil {
				return nil, err
			}
			continue
		}
		scale := t.lossScale() / float32(W*A)
		first, last, slot := micro%A == 0, micro%A == A-1, r.slot+micro%A
		if !split {
			if err := t.task.forward(t.train, step-1, micro, scale, slot); err != nil {
				return nil, err
			}
			if err := t.backward(scale, first, last); err != nil {
				return nil, err
			}
			continue
		}
		// The host reads and uploads the micro-batch; the backend's work on it may be a graph.
		if err := gt.load(t.train, slot); err != nil {
			return nil, err
		}
		key := fmt.Sprintf("micro-batch (first %v, last %v, loss scale %g)", first, last, scale)
		if err := t.graphs.run(key, func() error {
			if first {
				m.ZeroGrad()
			}
			if err := gt.forwardBatch(scale); err != nil {
				return err
			}
			return t.backward(scale, first, last)
		}); err != nil {
			return nil, err
		}
		gt.collect(slot)
	}
	r.loader = t.train.State()
	if !t.deviceUpdate() {
		// The micro-batches' figures were copied back asynchronously (task.collect): wait for
		// them before reading (these steps wait for the GPU in reduceGrads anyway).
		if err := backend.FenceOf(t.be).Wait(); err != nil {
			return nil, err
		}
		mine := make([]float32, A*k)
		for i := range A {
			t.task.results(r.slot+i, mine[i*k:(i+1)*k])
		}
		var err error
		if r.figs, err = t.gatherFloats(mine); err != nil {
			return nil, err
		}
		r.figs = append([]float32(nil), r.figs...) // gatherFloats' buffer is reused
		r.squares, err = t.reduceGrads()
		return r, err
	}
	updateStep := step - t.state.SkippedSteps
	m.SetUpdateStep(t.adamW(), r.lr, updateStep)
	stats := m.StatsBuffer()
	if err := t.graphs.run("update", func() error {
		if m.GradStats(cfg.GradClip, r.usedScale) != stats {
			return fmt.Errorf("GradStats wrote into another buffer")
		}
		m.QueueUpdate(t.adamW(), stats)
		if t.state.LossScale == nil {
			// Without fp16 a skipped (non-finite) step stops the run, so the compute copy may
			// follow at once (with the seed SetUpdateStep uploaded); with fp16, finishStep
			// rewrites it once it knows the update was applied.
			m.QueueParamsUpdate()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if t.statsHost[step%2] == nil {
		t.statsHost[step%2] = backend.HostBuffer(t.be, backend.StepStatsLen)
	}
	r.stats = t.statsHost[step%2]
	backend.DownloadLater(t.be, r.stats, stats)
	r.fence = backend.FenceOf(t.be)
	return r, nil
}

// adamW is the optimizer's configuration.
func (t *Trainer) adamW() gpt.AdamWConfig {
	cfg := t.cfg
	return gpt.AdamWConfig{Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay}
}

// finishStep waits for step r, checks it, records it and does the host's work after it.
func (t *Trainer) finishStep(ctx context.Context, r *stepRun, sum *Summary) error {
	cfg, step := t.cfg, r.step
	A, W, k := cfg.GradAccum, t.comm.Size(), t.task.figures()
	var st backend.StepStats
	figs := r.figs
	if r.fence != nil {
		if err := r.fence.Wait(); err != nil {
			return err
		}
		st = backend.DecodeStepStats(r.stats)
		figs = make([]float32, A*k)
		for i := range A {
			t.task.results(r.slot+i, figs[i*k:(i+1)*k])
		}
	} else {
		st = backend.StepStatsOf(r.squares, cfg.GradClip, r.usedScale)
	}
	loss, acc := batchMetrics(figs, k)
	if math.IsNaN(loss) || math.IsInf(loss, 0) || (!st.Finite && t.state.LossScale == nil) {
		return t.nonFinite(step, loss, st.Norm)
	}
	skipped := false
	if s := t.state.LossScale; s != nil && !s.Update(st.Finite, cfg.lossScale()) {
		// An fp16 gradient overflowed: the update is skipped, as GradScaler does (on the backend
		// it already was).
		skipped = true
		t.state.SkippedSteps++
		if s.Scale < minLossScale {
			return fmt.Errorf("step %d: the gradients are not finite even with the loss scale at %g; stopped before updating the weights", step, s.Scale)
		}
	} else if r.fence == nil {
		if err := t.update(t.adamW(), r.lr, step-t.state.SkippedSteps, float64(st.Scale)); err != nil {
			return err
		}
	} else if s != nil {
		t.w.ParamsUpdatedAt(step - t.state.SkippedSteps)
	}
	if r.fence == nil {
		if err := t.be.Sync(); err != nil {
			return err
		}
	}
	// A step's time runs from its start, or from the previous step's end if that came later
	// (pipelined steps overlap): the time between two steps' ends.
	now := time.Now()
	from := r.start
	if t.lastEnd.After(from) {
		from = t.lastEnd
	}
	elapsed := now.Sub(from)
	t.lastEnd = now
	ms := float64(elapsed.Microseconds()) / 1000
	B, T := cfg.BatchSize, cfg.SeqLen
	tokens := B * T * A * W
	tokPerSec := float64(tokens) / elapsed.Seconds()
	t.state.Step = step
	t.state.TokensSeen += int64(tokens)
	t.state.TrainSecond += elapsed.Seconds()
	t.state.Loader = r.loader
	if step > 1 || cfg.Steps == 1 { // the first step includes warm-up costs
		t.totalMs += ms
		t.timedSteps++
	}
	sum.Steps, sum.LastLoss = step, float32(loss)
	entry := map[string]any{"step": step, "loss": loss, "lr": r.lr, "grad_norm": st.Norm, "ms": ms, "tok_s": tokPerSec}
	var extra string // the step line's optional figures
	if !math.IsNaN(acc) {
		entry["acc"] = acc
		extra += fmt.Sprintf(" | acc %.3f", acc)
	}
	if t.state.LossScale != nil {
		entry["loss_scale"], entry["skipped"] = r.usedScale, map[bool]int{false: 0, true: 1}[skipped]
		if skipped {
			extra += fmt.Sprintf(" | skipped: gradient overflow at loss scale %g, now %g", r.usedScale, t.state.LossScale.Scale)
		}
	}
	if t.distributed() {
		commMs := float64(t.commTime.Microseconds()) / 1000
		entry["comm_ms"] = commMs
		extra += fmt.Sprintf(" | comm %.1f ms", commMs)
		if _, beside := t.comm.(dist.Overlapper); t.gradsReduced && !beside { // a GPU's host never waits for them
			waitMs := float64(t.commWait.Microseconds()) / 1000
			entry["comm_wait_ms"] = waitMs
			extra += fmt.Sprintf(" (waited %.1f)", waitMs)
		}
	}
	if t.peak > 0 {
		// Model FLOPs utilisation: the FLOPs the model needs (Config.FlopsPerToken) per
		// second of this step, as a fraction of the backend's peak.
		mfu := t.task.flopsPerToken(T) * float64(B*T*A) / elapsed.Seconds() / t.peak
		entry["mfu"] = mfu
		extra += fmt.Sprintf(" | mfu %.1f%%", 100*mfu)
	}
	t.writeLog(entry)
	t.bar.Set(int64(step))
	if eta := progress.FormatETA(t.bar.ETA()); eta != "" {
		extra += " | " + eta
	}
	if cfg.LogEvery > 0 && (step%cfg.LogEvery == 0 || step == 1 || step == cfg.Steps) {
		t.bar.Println("step %*d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s%s",
			len(fmt.Sprint(cfg.Steps)), step, cfg.Steps, loss, r.lr, st.Norm, ms, tokPerSec, extra)
	}
	return t.afterStep(ctx, step, sum)
}

// afterStep does the host's work after step (hostWork).
func (t *Trainer) afterStep(ctx context.Context, step int, sum *Summary) error {
	cfg := t.cfg
	eval, hellaswag, sample, ckpt := t.hostWork(step)
	if eval {
		vl, vacc, err := t.evaluate()
		if err != nil {
			return err
		}
		sum.LastValLoss, sum.LastValAcc = vl, vacc
		entry, line := map[string]any{"step": step, "val_loss": vl}, ""
		if !math.IsNaN(vacc) {
			entry["val_acc"], line = vacc, fmt.Sprintf(" | val acc %.4f", vacc)
		}
		t.writeLog(entry)
		t.bar.Println("step %*d/%d | val loss %.4f%s", len(fmt.Sprint(cfg.Steps)), step, cfg.Steps, vl, line)
	}
	if hellaswag {
		if err := t.solo(func() error { return t.evalHellaSwag(ctx, step) }); err != nil {
			return err
		}
	}
	if ckpt { // before the sample: a sample that fails must not cost the step's checkpoint
		if err := t.saveCheckpoint(); err != nil {
			return err
		}
	}
	if sample {
		return t.solo(func() error {
			err := t.sample(ctx, step)
			if pe := (*backend.PlanError)(nil); errors.As(err, &pe) {
				// Its KV cache does not fit beside the training model: the run goes on without.
				if !t.sampleWarned {
					t.sampleWarned = true
					t.bar.Println("warning: no samples: their KV cache does not fit beside the model (%s); --sample-tokens 0 turns them off", pe.Text)
				}
				return nil
			}
			return err
		})
	}
	return nil
}
