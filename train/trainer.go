package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/dist"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/internal/progress"
	"github.com/gpt2go/gpt2go/tensorboard"
	"golang.org/x/sys/unix"
)

// A run directory holds one training run:
//
//	RUNDIR/run.json                          the run's Config (what makes it "this run")
//	RUNDIR/log.jsonl                         one JSON object per step, val entries separately
//	RUNDIR/samples.txt                       text samples as training goes
//	RUNDIR/events.out.tfevents.*             the log's numbers and the samples for TensorBoard
//	RUNDIR/checkpoints/step_00000000.safetensors   initial weights, then every --ckpt-every steps
const (
	runFile     = "run.json"
	logFile     = "log.jsonl"
	samplesFile = "samples.txt"
)

// Options says where and how to run; Config says what to train.
type Options struct {
	Config  Config
	RunDir  string
	Resume  bool            // continue the run in RunDir from its newest good checkpoint
	Force   bool            // start over in a RunDir that already holds a run
	StopAt  int             // if > 0, checkpoint and stop after this step (the schedule still spans Config.Steps)
	Set     map[string]bool // flags the user gave explicitly (for --resume overrides)
	Backend backend.Backend
	Out     io.Writer // human-readable log
	Version string    // recorded in checkpoints

	// TensorBoard also writes the log's numbers and the text samples as TensorBoard events in
	// RunDir (a new events file per session; TensorBoard merges them).
	TensorBoard bool

	// Comm is the job's communicator for data-parallel training (dist.go); nil means one
	// process. Zero shards the optimizer state over its ranks (ZeRO-1).
	Comm dist.Comm
	Zero bool
	// pipeline overrides when a step is queued before the previous one is finished (step.go):
	// for tests, on the CPU too, or never.
	pipeline pipelineMode
	// NoGraphs runs every step's ops directly on a backend that could record them as graphs
	// (graphs.go; --cuda-graphs=false).
	NoGraphs bool

	// OverlapGrads makes DDP all-reduce each layer's gradient as soon as backward has produced
	// it, while backward goes on: on a second stream with a dist.Overlapper (NCCL), on a
	// goroutine of its own with a host-memory backend (MPI); otherwise the whole gradient is
	// all-reduced after backward.
	OverlapGrads bool
}

// State is the trainer state saved beside the weights; with it a resumed run is bit-identical.
type State struct {
	Step        int              `json:"step"` // optimizer updates done
	Loader      data.LoaderState `json:"loader"`
	TokensSeen  int64            `json:"tokens_seen"`
	TrainSecond float64          `json:"train_seconds"`
	// fp16: the loss scaler, and the steps it skipped (their updates were not applied, so AdamW's
	// step count is Step - SkippedSteps).
	LossScale    *LossScaler `json:"loss_scale,omitempty"`
	SkippedSteps int         `json:"skipped_steps,omitempty"`
	// The data-parallel layout that trained up to Step: ranks (0 in checkpoints from before it
	// was recorded: unknown) and --zero. A resume on another world size says how the global
	// batch changes (worldChange).
	WorldSize int `json:"world_size,omitempty"`
	Zero      int `json:"zero"`
}

// Summary is what a finished run reports.
type Summary struct {
	Steps       int // the run's step at the end
	Planned     int // its --steps: more than Steps after --stop-at
	LastLoss    float32
	LastValLoss float32 // NaN when never evaluated
	LastValAcc  float64 // BERT's masked-token accuracy; NaN when never evaluated or GPT-2
	Arch        string  // the run's model family (Config.Arch)
	Checkpoint  string
	MsPerStep   float64
}

// Trainer owns one run.
type Trainer struct {
	cfg           Config
	opts          Options
	be            backend.Backend
	task          task           // the model family's forward and backward (task.go)
	w             *gpt.Trainable // the model's parameters, gradients and moments
	model         *gpt.Model     // the GPT-2 model (samples, HellaSwag); nil for BERT
	ds            *data.Dataset
	train         *data.Loader
	val           *data.Loader
	text          *textCodec
	hellaswag     *hellaSwag // nil unless --eval-hellaswag-every
	state         State
	log           *os.File
	logFailed     bool                // a write to log failed (warned once)
	sampleWarned  bool                // a sample did not fit beside the model (warned once)
	cutShort      bool                // Ctrl-C cut a HellaSwag evaluation or a sample short
	samplesFailed bool                // a write to samples.txt failed (warned once)
	tb            *tensorboard.Writer // nil when off or after a write failed
	peak          float64             // the backend's peak FLOP/s (backend.Peaker), 0 if unknown
	out           io.Writer
	bar           *progress.Bar
	saveChunk     []float32 // writeCheckpoint's download buffer (backends without HostMemory)
	last          string    // path of the newest checkpoint
	lock          *checkpoint.RunLock

	// Data parallel (dist.go).
	comm         dist.Comm
	gathers      map[int]gatherBuf // by part length
	shardChunks  backend.Buf       // ZeRO-1: the chunks of shards gathered for a checkpoint
	commTime     time.Duration     // this step's time in collectives
	commWait     time.Duration     // of which the step waited for the overlapped all-reduces
	gradsReduced bool              // this step's gradient was all-reduced during backward
	normSums     []float64         // ZeRO-1: this rank's gradient block sums, and their encoding
	normEnc      []float32
	normAll      []float64 // ZeRO-1: every rank's block sums, decoded
	paramsCRC    uint32    // sameParams' hash at the last checkpoint

	// Steps (step.go).
	statsHost  [2][]float32 // GradStats' values of the last two steps, copied back
	lastEnd    time.Time    // when the last step finished
	totalMs    float64      // the timed steps' milliseconds (all but a run's first step)
	timedSteps int
	graphs     *stepGraphs // nil: the steps' ops run directly (graphs.go)
}

// Run trains from scratch or resumes, until Config.Steps updates are done or ctx is cancelled
// (then it saves a checkpoint and returns ctx's error).
func Run(ctx context.Context, opts Options) (*Summary, error) {
	t, err := open(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer t.close()
	return t.loop(ctx)
}

// open takes the run directory's writer lock, then sets up the run; the lock is held until close.
func open(ctx context.Context, opts Options) (*Trainer, error) {
	if opts.RunDir == "" {
		return nil, errors.New("no run directory; pass --out RUNDIR")
	}
	if opts.Resume { // before the lock, which would create the directory
		dir, err := ResumeDir(opts.RunDir)
		if err != nil {
			return nil, err
		}
		opts.RunDir = dir
	}
	if opts.Comm != nil && opts.Comm.Rank() != 0 {
		return openLocked(ctx, opts) // rank 0 holds the lock and writes the run directory
	}
	lock, err := checkpoint.LockRunDir(opts.RunDir)
	if err != nil {
		return nil, err
	}
	t, err := openLocked(ctx, opts)
	if err != nil {
		lock.Release()
		return nil, err
	}
	t.lock = lock
	return t, nil
}

func openLocked(ctx context.Context, opts Options) (*Trainer, error) {
	t := &Trainer{opts: opts, be: opts.Backend, out: opts.Out, comm: opts.Comm}
	if t.comm == nil {
		t.comm = dist.NewSingle(t.be)
	}
	if !t.rank0() {
		t.out = io.Discard // rank 0 speaks for the job
	}
	var ck *checkpoint.Checkpoint
	if opts.Resume {
		var err error
		if ck, err = t.loadForResume(); err != nil {
			return nil, err
		}
		defer ck.Close()
	} else {
		if t.rank0() { // refusals only: an old run is cleared once the new one is sure to start
			if err := checkNewRun(opts.RunDir, opts.Force, opts.Config.LogFile); err != nil {
				return nil, err
			}
		}
		t.cfg = opts.Config
	}
	if opts.Resume && !opts.Set["zero"] && t.cfg.Zero == 1 && !t.opts.Zero && t.comm.Size() > 1 {
		// A ZeRO-1 run resumed on ranks stays ZeRO-1 (the same bits as DDP, in less memory)
		// unless --zero says otherwise.
		t.opts.Zero = true
		fmt.Fprintln(t.out, "--zero 1, as the run was saved (ZeRO-1); pass --zero 0 for DDP")
	}
	t.cfg.WorldSize, t.cfg.Zero = t.comm.Size(), t.zeroStage()
	cfg := t.cfg
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.CheckLossScaleFlags(opts.Set); err != nil {
		return nil, err
	}
	if t.distributed() { // (a resumed run's own --grad-precision too)
		if err := CheckGradExchange(cfg.GradPrecision, t.comm.Size(), t.opts.Zero); err != nil {
			return nil, err
		}
	}
	if err := t.openData(); err != nil {
		return nil, err
	}
	tk, err := t.newTask(t.parallelLayout())
	if err != nil {
		t.close()
		return nil, err
	}
	t.task, t.w = tk, tk.weights()
	if err := t.openHellaSwag(); err != nil {
		t.close()
		return nil, err
	}

	// The ranks got here after loading the data, a checkpoint or --init weights, which may have
	// taken them minutes apart: they meet before the first collective (restore's or
	// initWeights'), whose own bound, --dist-timeout, counts from when it is queued.
	if t.distributed() {
		if err := dist.BarrierWithin(t.comm, soloTimeout); err != nil {
			t.close()
			return nil, err
		}
	}
	if t.distributed() {
		if err := t.sameStart(ck); err != nil {
			t.close()
			return nil, err
		}
	}
	if ck != nil {
		if err := t.restore(ck); err != nil {
			t.close()
			return nil, err
		}
	} else if err := t.initWeights(); err != nil {
		t.close()
		return nil, err
	} else if err := t.startNewRun(ctx); err != nil {
		t.close()
		return nil, err
	}
	t.startLossScaler()
	t.state.WorldSize, t.state.Zero = cfg.WorldSize, cfg.Zero
	if !t.rank0() {
		return t, nil
	}
	if err := atomicfile.WriteBytes(filepath.Join(opts.RunDir, runFile), cfg.marshal()); err != nil {
		t.close()
		return nil, err
	}
	logPath := t.logPath()
	if t.log, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		t.close()
		return nil, fmt.Errorf("open log: %w", err)
	}
	if opts.TensorBoard {
		if err := t.openTensorBoard(); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

// sameStart checks that every rank starts from the same step: each picks the run's newest good
// checkpoint itself, and a rank that sees the run folder otherwise (a stale network file system,
// a file it could not read) would train other weights on other data beside the rest.
func (t *Trainer) sameStart(ck *checkpoint.Checkpoint) error {
	step := -1 // a new run
	if ck != nil {
		step = ck.Step
	}
	all, err := t.gatherFloats([]float32{float32(step >> 16), float32(step & 0xffff)}) // exact in float32
	if err != nil {
		return err
	}
	for r := 0; r+1 < len(all); r += 2 {
		if s := int(all[r])<<16 + int(all[r+1]); s != step {
			return fmt.Errorf("rank %d starts from step %d of %s but rank %d from step %d: every rank must see the same checkpoints (a shared folder, no stale copies)",
				t.comm.Rank(), step, t.opts.RunDir, r/2, s)
		}
	}
	return nil
}

func (t *Trainer) logPath() string {
	if t.cfg.LogFile != "" {
		return t.cfg.LogFile
	}
	return filepath.Join(t.opts.RunDir, logFile)
}

// checkNewRun refuses a new run in dir when dir holds one and force is not given, and a --log
// file (newLog) that holds anything but the log of the run --force replaces. It changes nothing
// there but creating dir: startNewRun replaces the old run once the new one can start.
func checkNewRun(dir string, force bool, newLog string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create run directory: %w", err)
	}
	existing, _ := checkpoint.List(dir)
	_, statErr := os.Stat(filepath.Join(dir, runFile))
	hasRun := statErr == nil || len(existing) > 0
	if err := interruptedForce(dir); err != nil && !force {
		return fmt.Errorf("%w; or start over there with --force", err)
	}
	if hasRun && !force {
		return fmt.Errorf("run directory %s already holds a run; use --resume %s to continue it, --force to start over there, or another --out", dir, dir)
	}
	if newLog == "" {
		return nil
	}
	st, err := os.Stat(newLog)
	if errors.Is(err, fs.ErrNotExist) {
		parent := filepath.Dir(newLog)
		if !isDir(parent) {
			return fmt.Errorf("--log %s: folder %s does not exist; create it or give another path", newLog, parent)
		}
		if unix.Access(parent, unix.W_OK) != nil {
			return fmt.Errorf("--log %s: folder %s is not writable; give another path", newLog, parent)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("--log %s: %w", newLog, err)
	}
	if st.IsDir() {
		return fmt.Errorf("--log %s is a folder; give a file, such as %s", newLog, filepath.Join(newLog, logFile))
	}
	if !st.Mode().IsRegular() || st.Size() == 0 { // a device such as /dev/null, or an empty file
		if unix.Access(newLog, unix.W_OK) != nil {
			return fmt.Errorf("--log %s is not writable; give another path", newLog)
		}
		return nil
	}
	if log := recordedLog(dir); force && hasRun && log != "" {
		if old, err := os.Stat(log); err == nil && os.SameFile(st, old) {
			return nil // the old run's own log, which --force replaces
		}
	}
	return fmt.Errorf("--log %s already holds %d bytes that are not the log of the run in %s; a new run's log starts empty, so give a new file", newLog, st.Size(), dir)
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// recordedLog returns the log file of the run in dir (checkpoint.RunLog), or "" where that is
// not known.
func recordedLog(dir string) string {
	log, err := checkpoint.RunLog(dir)
	if err != nil {
		return ""
	}
	return log
}

// oldRun is a run that --force replaces, set aside until the new run has saved its first
// checkpoint: then it is deleted (drop), and if the new run fails before, it is put back.
type oldRun struct {
	dir   string   // the run directory
	aside string   // dir/.replaced, which holds the old run's files meanwhile
	moved []string // the names moved there
	log   string   // the old run's --log file elsewhere ("" for none, or unknown), kept until drop
}

// replacedDir is the folder of a run directory where --force keeps the old run meanwhile.
const replacedDir = ".replaced"

// interruptedForce is the error for a run directory where a --force was stopped (killed, a
// second Ctrl-C) before it finished: the old run waits in dir/.replaced, and what the new one
// wrote, if anything, is beside it. Nil when there is none.
func interruptedForce(dir string) error {
	aside := filepath.Join(dir, replacedDir)
	if !isDir(aside) {
		return nil
	}
	return fmt.Errorf("%s holds the run that an interrupted --force was replacing: to keep that run, move its files back over what the new one wrote (mv %s/* %s/, after removing %s/checkpoints if it exists); to keep the new one, delete %s",
		aside, aside, dir, dir, aside)
}

// setAsideOldRun moves the run in dir that --force replaces (its config, log, samples, profile,
// report, TensorBoard events and checkpoints) into dir/.replaced. What a --force killed at this
// point left there is what it was replacing, and goes.
func setAsideOldRun(dir string) (*oldRun, error) {
	old := &oldRun{dir: dir, aside: filepath.Join(dir, replacedDir)}
	if log := recordedLog(dir); log != "" && log != filepath.Join(dir, logFile) { // (which moves aside)
		if st, err := os.Stat(log); err == nil && st.Mode().IsRegular() { // (a device such as /dev/null stays)
			old.log = log
		}
	}
	if err := os.RemoveAll(old.aside); err != nil {
		return nil, err
	}
	if err := os.Mkdir(old.aside, 0o755); err != nil {
		return nil, fmt.Errorf("--force: %w", err)
	}
	names := []string{runFile, logFile, samplesFile, ProfileFile, "report.html", filepath.Base(checkpoint.Dir(dir))}
	events, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	for _, e := range events {
		names = append(names, filepath.Base(e))
	}
	for _, name := range names {
		err := renameAside(filepath.Join(dir, name), filepath.Join(old.aside, name))
		if err != nil && !os.IsNotExist(err) { // (checkpoints/ on a mount point of its own: EBUSY)
			err = fmt.Errorf("--force: set the old run aside: %w", err)
			if rerr := old.restore(false); rerr != nil {
				return nil, fmt.Errorf("%w; and putting it back failed: %v (its files are in %s)", err, rerr, old.aside)
			}
			return nil, err
		}
		if err == nil {
			old.moved = append(old.moved, name)
		}
	}
	return old, nil
}

// renameAside is os.Rename; tests make it fail.
var renameAside = os.Rename

// restore puts the old run's files back, first removing the checkpoints folder the new run
// made when newRun.
func (old *oldRun) restore(newRun bool) error {
	if newRun && slices.Contains(old.moved, filepath.Base(checkpoint.Dir(old.dir))) {
		if err := os.RemoveAll(checkpoint.Dir(old.dir)); err != nil {
			return err
		}
	}
	for _, name := range old.moved {
		if err := os.Rename(filepath.Join(old.aside, name), filepath.Join(old.dir, name)); err != nil {
			return err
		}
	}
	return os.Remove(old.aside)
}

// drop deletes the old run for good, its --log file elsewhere too.
func (old *oldRun) drop() error {
	if old.log != "" {
		os.Remove(old.log)
	}
	return os.RemoveAll(old.aside)
}

func (t *Trainer) loadForResume() (*checkpoint.Checkpoint, error) {
	dir := t.opts.RunDir
	if t.rank0() { // under the run's lock: no writer owns them
		removeStaleTemps(dir)
	}
	if err := interruptedForce(dir); err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	// Verified whole but not read: restore streams it into the model, so the process never holds
	// the parameters and both moments twice.
	ck, path, warnings, err := checkpoint.LoadLatestVerified(dir)
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return nil, fmt.Errorf("resume %s: %w: the run saved none (killed before its first, or --ckpt-every 0), so there is nothing to continue; start it again with --out %s --force", dir, err, dir)
	}
	for _, w := range warnings {
		fmt.Fprintf(t.out, "warning: skipping %v\n", w)
	}
	if errors.Is(err, checkpoint.ErrNoneUsable) {
		return nil, fmt.Errorf("resume %s: %w; the run cannot continue: start it again with --out %s --force, or train into a new --out", dir, err, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", dir, err)
	}
	if err := t.resumeFrom(ck, path); err != nil {
		ck.Close()
		return nil, err
	}
	if len(warnings) > 0 && t.rank0() { // under the run's lock
		moved, err := checkpoint.SetAside(dir, ck.Step)
		for _, m := range moved {
			fmt.Fprintf(t.out, "set aside %s\n", m)
		}
		if err != nil {
			ck.Close()
			return nil, err
		}
	}
	return ck, nil
}

// resumeFrom takes the config and state of the checkpoint ck at path.
func (t *Trainer) resumeFrom(ck *checkpoint.Checkpoint, path string) error {
	dir := t.opts.RunDir
	var saved Config
	if err := json.Unmarshal(ck.Config, &saved); err != nil {
		return fmt.Errorf("resume: checkpoint %s has an unreadable config: %w", path, err)
	}
	cfg, err := ApplyOverrides(saved, t.opts.Config, t.opts.Set)
	if err != nil {
		return err
	}
	t.cfg = cfg
	if err := json.Unmarshal(ck.State, &t.state); err != nil {
		return fmt.Errorf("resume: checkpoint %s has an unreadable state: %w", path, err)
	}
	t.last = path
	if t.state.Step >= cfg.Steps {
		return fmt.Errorf("run %s is already at step %d of %d; pass a larger --steps to train further", dir, t.state.Step, cfg.Steps)
	}
	if t.opts.StopAt > 0 && t.opts.StopAt <= t.state.Step {
		return fmt.Errorf("--stop-at %d is not after step %d, where run %s is; pass a later step", t.opts.StopAt, t.state.Step, dir)
	}
	fmt.Fprintf(t.out, "resuming %s from %s (step %d)\n", dir, path, ck.Step)
	if line := worldChange(cfg.BatchSize*cfg.SeqLen, saved.GradAccum, t.state.WorldSize, cfg.GradAccum, t.comm.Size()); line != "" {
		fmt.Fprintln(t.out, line)
	}
	return nil
}

func (t *Trainer) openData() error {
	cfg := t.cfg
	ds, err := data.Open(cfg.Data)
	if err != nil {
		return err
	}
	t.ds = ds
	if err := checkDataTokens(cfg, ds.Meta); err != nil {
		return err
	}
	if t.train, err = data.NewLoader(ds.TrainShards, cfg.BatchSize, cfg.rowLen(), cfg.Model.VocabSize, cfg.Shuffle, cfg.Seed); err != nil {
		return err
	}
	if unread, total := t.train.Unread(); unread*10 > total && t.rank0() {
		fmt.Fprintf(t.out, "warning: read in order, each pass leaves %d of the %d training tokens unread (%.0f%%: shards' tails shorter than a batch of B*T+1 tokens, %d shards shorter than one); use --shuffle, or prepare again with a larger --shard-tokens\n",
			unread, total, 100*float64(unread)/float64(total), len(t.train.Skipped()))
	}
	if len(ds.ValShards) > 0 && cfg.EvalEvery > 0 && cfg.EvalBatches > 0 {
		if t.val, err = data.NewEvalLoader(ds.ValShards, cfg.BatchSize, cfg.rowLen(), cfg.Model.VocabSize, cfg.EvalBatches); err != nil {
			return fmt.Errorf("validation data: %w (or train without validation: --eval-every 0)", err)
		}
		if rows, windows := int64(cfg.EvalBatches)*int64(cfg.BatchSize), t.val.Windows(); rows > windows && t.rank0() {
			fmt.Fprintf(t.out, "warning: --eval-batches %d reads %d rows per evaluation, but the validation split holds %d distinct windows of %d tokens, so each is read about %.1f times; --eval-batches %d reads each about once\n",
				cfg.EvalBatches, rows, windows, cfg.rowLen()+1, float64(rows)/float64(windows), max(1, windows/int64(cfg.BatchSize)))
		}
	}
	t.text = newTextCodec(t.cfg.Tokenizer)
	return nil
}

func (t *Trainer) initWeights() error {
	cfg := t.cfg
	if cfg.Init == "" {
		t.task.init(cfg.Seed)
	} else {
		loaded, err := OpenInit(context.Background(), cfg.Init, nil) // a download happened when the config was read
		if err != nil {
			return err
		}
		fileCfg := loaded.Config
		fileCfg.NoPositionalEmbs = cfg.Model.NoPositionalEmbs
		if fileCfg != cfg.Model {
			loaded.Close()
			return fmt.Errorf("--init %s holds a model %+v that differs from the configured %+v", cfg.Init, fileCfg, cfg.Model)
		}
		err = t.w.SetParamsFrom(loaded.ReadParams) // straight from the file
		loaded.Close()
		if err != nil {
			return err
		}
	}
	switch {
	case t.w.MasterSharded():
		// Each rank keeps its shard of the weights it made (every rank made the same: the
		// checkpoint of step 0 compares them) and the compute copy is gathered.
		if err := t.gatherCompute(); err != nil {
			return err
		}
	case t.distributed(): // every rank made the same weights; rank 0's are the job's anyway
		if err := t.comm.Broadcast(t.w.Params, 0); err != nil {
			return err
		}
		t.w.ParamsChanged()
	}
	t.state = State{}
	t.state.Loader = t.train.State()
	// Before step 0 is saved: a resume from it on another world size says so.
	t.state.WorldSize, t.state.Zero = t.cfg.WorldSize, t.cfg.Zero
	return nil
}

// startNewRun replaces the run --force names (every check that could refuse the new run has
// passed: its config, data, model and --init weights) and saves the initial weights as step 0.
// The old run is set aside first and deleted only once step 0 is saved: a failure to save it
// (a full disk) puts the old run back.
//
// Ctrl-C before the old run is deleted keeps it: the new run is not started.
func (t *Trainer) startNewRun(ctx context.Context) error {
	var old *oldRun
	if t.rank0() && t.opts.Force {
		if ctx.Err() != nil {
			return errors.New("interrupted before the new run started; the run --force was to replace is as it was")
		}
		var err error
		if old, err = setAsideOldRun(t.opts.RunDir); err != nil {
			return err
		}
	}
	if t.cfg.CkptEvery > 0 || t.cfg.Steps == 0 { // --steps 0: a run of its initial weights
		if err := saveStepZero(t); err != nil {
			if old == nil {
				return err
			}
			if rerr := old.restore(true); rerr != nil {
				return fmt.Errorf("%w; and putting back the run --force was replacing failed: %v (its files are in %s)", err, rerr, old.aside)
			}
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return fmt.Errorf("%w (the run --force was replacing is back in place; it stays on disk until the new run has saved its first checkpoint, so delete it yourself first if both do not fit)", err)
			}
			return fmt.Errorf("%w (the run --force was replacing is back in place)", err)
		}
	}
	if old != nil && ctx.Err() != nil {
		if err := old.restore(true); err != nil {
			return fmt.Errorf("interrupted before the new run started, and putting back the run --force was replacing failed: %v (its files are in %s)", err, old.aside)
		}
		return errors.New("interrupted before the new run started; the run --force was replacing is back in place")
	}
	if old != nil {
		return old.drop()
	}
	return nil
}

// saveStepZero saves a new run's initial weights; tests make it fail.
var saveStepZero = (*Trainer).saveCheckpoint

func (t *Trainer) restore(ck *checkpoint.Checkpoint) error {
	if !ck.HasMoments() {
		return fmt.Errorf("resume: checkpoint at step %d has no optimizer state (it is a weights-only export)", ck.Step)
	}
	if err := t.w.SetParamsFrom(ck.ReadParams); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if err := t.w.SetMomentsFrom(ck.ReadMoments); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	// The 16-bit parameter copy as the last update wrote it (its stochastic rounding is seeded
	// by the optimizer step).
	t.w.ParamsUpdatedAt(t.state.Step - t.state.SkippedSteps)
	if t.w.MasterSharded() { // each rank wrote its shard of the copy
		if err := t.gatherCompute(); err != nil {
			return err
		}
	}
	if err := t.train.Restore(t.state.Loader); err != nil {
		return fmt.Errorf("resume: data position: %w", err)
	}
	// Steps logged after the checkpoint were never saved; drop them so the log reads as one run.
	if !t.rank0() {
		return nil
	}
	if err := truncateSamples(filepath.Join(t.opts.RunDir, samplesFile), t.state.Step); err != nil {
		return err
	}
	return truncateLog(t.logPath(), t.state.Step)
}

// removeStaleTemps deletes the temporary files of the trainer's writes that a crash interrupted
// (a checkpoint's can be as large as the checkpoint): the hidden NAME.tmp-N files atomicfile
// writes and renames, of the checkpoints and the run's own files (not other commands' outputs,
// which may be being written now). Errors are ignored: they are litter.
func removeStaleTemps(dir string) {
	patterns := []string{filepath.Join(checkpoint.Dir(dir), ".step_*.tmp-*")}
	for _, name := range []string{runFile, logFile, samplesFile} {
		patterns = append(patterns, filepath.Join(dir, "."+name+".tmp-*"))
	}
	for _, pattern := range patterns {
		names, _ := filepath.Glob(pattern)
		for _, name := range names {
			os.Remove(name)
		}
	}
}

// truncateLog removes entries with "step" > step from a JSONL log (atomically), and lines that
// are not JSON: a line torn by a crash or a full disk, which would otherwise sit mid-file once
// the resumed run appends after it.
func truncateLog(path string, step int) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var kept bytes.Buffer
	for line := range bytes.SplitSeq(raw, []byte("\n")) {
		var e struct {
			Step int `json:"step"`
		}
		if len(line) == 0 || json.Unmarshal(line, &e) != nil || e.Step > step {
			continue
		}
		kept.Write(line)
		kept.WriteByte('\n')
	}
	if bytes.Equal(kept.Bytes(), raw) {
		return nil
	}
	return atomicfile.WriteBytes(path, kept.Bytes())
}

// truncateSamples removes the samples of steps after step from samples.txt (atomically): its
// sections start with a line "---- step N ----".
func truncateSamples(path string, step int) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	off := 0
	for line := range bytes.SplitAfterSeq(raw, []byte("\n")) {
		var n int
		if _, err := fmt.Sscanf(string(line), "---- step %d ----\n", &n); err == nil && n > step {
			return atomicfile.WriteBytes(path, raw[:off])
		}
		off += len(line)
	}
	return nil
}

func (t *Trainer) close() {
	if t.train != nil {
		t.train.Close()
	}
	if t.val != nil {
		t.val.Close()
	}
	if t.log != nil {
		t.log.Close()
	}
	if t.tb != nil {
		t.tb.Close()
	}
	t.lock.Release()
}

// loop runs the remaining steps.
func (t *Trainer) loop(ctx context.Context) (*Summary, error) {
	cfg := t.cfg
	B, T := cfg.BatchSize, cfg.SeqLen
	fmt.Fprintf(t.out, "model: %s\n", cfg.describeModel())
	fmt.Fprintf(t.out, "data: %s (%d train shards, %d val shards); backend: %s\n", cfg.Data, len(t.ds.TrainShards), len(t.ds.ValShards), t.be.Name())
	fmt.Fprintf(t.out, "training: %d steps of %d x %d tokens x %d accum, lr %g -> %g %s, warmup %d\n",
		cfg.Steps, B, T, cfg.GradAccum, cfg.LR, cfg.MinLR, cfg.Schedule, cfg.Warmup)
	fmt.Fprintf(t.out, "precision: %s\n", t.precisionLine())
	if t.distributed() {
		fmt.Fprintf(t.out, "%s\n", t.worldLine())
	}

	if p, ok := t.be.(backend.Peaker); ok {
		t.peak = p.PeakFLOPS()
		fmt.Fprintf(t.out, "mfu: relative to the backend's peak of %.1f GFLOP/s\n", t.peak/1e9)
	}
	if t.tb != nil {
		fmt.Fprintf(t.out, "tensorboard: %s (view with: tensorboard --logdir %s)\n", t.tb.Path(), t.opts.RunDir)
	}
	sum := &Summary{LastValLoss: float32(math.NaN()), LastValAcc: math.NaN(), Arch: cfg.Arch, Planned: cfg.Steps}
	t.bar = progress.NewQuiet(t.out, int64(cfg.Steps), "train", "steps")
	t.bar.StartAt(int64(t.state.Step))
	defer t.bar.Finish()
	var graphsLine string
	t.graphs, graphsLine = t.graphsFor()
	defer t.graphs.close()
	if graphsLine != "" {
		fmt.Fprintf(t.out, "cuda graphs: %s\n", graphsLine)
	}
	var pending *stepRun // a pipelined step, queued and not finished (step.go)
	for {
		next := t.state.Step + 1
		if pending != nil {
			next = pending.step + 1
		}
		more := next <= cfg.Steps && (t.opts.StopAt <= 0 || next <= t.opts.StopAt)
		stop := false
		if more {
			var err error
			if stop, err = t.stopRequested(ctx.Err() != nil); err != nil {
				return sum, err
			}
		}
		if !more || stop {
			if pending != nil {
				if err := t.finishStep(ctx, pending, sum); err != nil {
					return sum, err
				}
			}
			if !stop {
				break
			}
			if cerr := t.saveCheckpoint(); cerr != nil {
				return sum, fmt.Errorf("interrupted at step %d and the checkpoint failed: %w", t.state.Step, cerr)
			}
			return sum, fmt.Errorf("interrupted at step %d; saved %s; continue with --resume %s", t.state.Step, t.last, t.opts.RunDir)
		}
		r, err := t.queueStep(next)
		if err != nil {
			if pending != nil { // the step before is whole: log it (or its own failure) first
				if ferr := t.finishStep(ctx, pending, sum); ferr != nil {
					return sum, ferr
				}
			}
			return sum, err
		}
		if pending != nil {
			if err := t.finishStep(ctx, pending, sum); err != nil {
				return sum, err
			}
			pending = nil
		}
		eval, hellaswag, sample, ckpt := t.hostWork(next)
		if t.pipelined() && !eval && !hellaswag && !sample && !ckpt {
			pending = r
			continue
		}
		if err := t.finishStep(ctx, r, sum); err != nil {
			return sum, err
		}
	}
	if t.timedSteps > 0 {
		sum.MsPerStep = t.totalMs / float64(t.timedSteps)
	}
	if t.comm.Size() > 1 { // the last step's checkpoint compared them
		t.bar.Println("data parallel: the %d ranks end with the same parameters (CRC-32C %08x at step %d)", t.comm.Size(), t.paramsCRC, t.state.Step)
	}
	sum.Checkpoint = t.last
	if t.cutShort && ctx.Err() != nil { // Ctrl-C during the last step's host work: not a clean end
		next := "the run is complete"
		if t.state.Step < cfg.Steps {
			next = "continue with --resume " + t.opts.RunDir
		}
		return sum, fmt.Errorf("interrupted after step %d, during its HellaSwag evaluation or sample, which were dropped; saved %s; %s", t.state.Step, t.last, next)
	}
	return sum, nil
}

// nonFinite stops the run without saving its weights, leaving the last good checkpoint as it is.
func (t *Trainer) nonFinite(step int, loss, norm float64) error {
	t.writeLog(map[string]any{"step": step, "loss": loss, "grad_norm": norm, "error": "non-finite"})
	where := "no checkpoint was saved"
	if t.last != "" {
		where = "the last good checkpoint is " + t.last
	}
	return fmt.Errorf("step %d: loss %v, grad norm %v is not finite; stopped without saving weights from it (%s); try a lower --lr or --grad-clip 1", step, loss, norm, where)
}

// evaluate returns the mean validation loss over the EvalBatches batches spread evenly over the
// validation split (the same rows, and for BERT the same masks, at every evaluation), and BERT's
// masked-token accuracy (NaN for GPT-2).
func (t *Trainer) evaluate() (loss float32, acc float64, err error) {
	var figs []float32
	if t.distributed() {
		figs, err = t.evalSplit()
	} else {
		t.val.Reset()
		figs = make([]float32, t.cfg.EvalBatches*t.task.figures())
		err = evalFigures(t.task, t.val, 0, figs)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("validation: %w", err)
	}
	l, acc := batchMetrics(figs, t.task.figures())
	return float32(l), acc, nil
}

// Sampling defaults shared by training-time samples and gpt2go sample.
const (
	SampleTemperature = 0.8
	SampleTopK        = 40
)

// sample writes a text sample to the log and RUNDIR/samples.txt. It uses its own RNG seeded by
// the step, so sampling never changes the training trajectory.
//
// Cancelling ctx (Ctrl-C) cuts the sample short: it is dropped, and the run stops at once.
func (t *Trainer) sample(ctx context.Context, step int) error {
	if t.text == nil || t.model == nil {
		return nil
	}
	seqs, _, err := t.model.GenerateBatch(ctx, t.text.start(), 1, gpt.SampleOptions{
		Tokens: t.cfg.SampleTokens, Temperature: SampleTemperature, TopK: SampleTopK, Seed: t.cfg.Seed + uint64(step),
	}, nil)
	if err != nil && ctx.Err() != nil {
		t.bar.Println("step %d: sample interrupted, not saved", step)
		t.cutShort = true
		return nil
	}
	if err != nil {
		return err
	}
	out := seqs[0]
	// Valid UTF-8 for the log, TensorBoard (whose text plugin fails on a whole run's samples for
	// one bad byte) and the report: an early byte-level model emits lone bytes >= 0x80.
	text := strings.ToValidUTF8(t.text.decode(out[len(t.text.start()):]), "\uFFFD")
	t.bar.Println("---- sample at step %d ----\n%s\n----", step, text)
	if t.tb != nil {
		t.tensorBoardDone(t.tb.Text(int64(step), "samples", tensorboard.Preformatted(text)))
	}
	// samples.txt is a convenience beside the log: a write that fails (a full disk) is said once,
	// as the log's are, and the run goes on to its next checkpoint.
	path := filepath.Join(t.opts.RunDir, samplesFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		err = appendLine(f, fmt.Appendf(nil, "---- step %d ----\n%s\n", step, text)) // whole or not at all
		err = errors.Join(err, f.Close())
	}
	if err != nil && !t.samplesFailed {
		t.samplesFailed = true
		t.bar.Println("warning: %s lost step %d's sample (printed above) and may lose more: %v", path, step, err)
	}
	return nil
}

func (t *Trainer) writeLog(entry map[string]any) {
	if t.log == nil { // not rank 0
		return
	}
	t.logTensorBoard(entry)
	b, err := json.Marshal(sanitize(entry))
	if err != nil {
		b, _ = json.Marshal(map[string]any{"step": entry["step"], "error": "unloggable entry: " + err.Error()})
	}
	if err := appendLine(t.log, append(b, '\n')); err != nil && !t.logFailed {
		t.logFailed = true // said once; the run goes on (a resume drops a torn line)
		fmt.Fprintf(t.out, "warning: the log %s lost step %v's entry and may lose more: %v\n", t.logPath(), entry["step"], err)
	}
}

// appendable is a log file that appendLine writes to: an *os.File opened for appending.
type appendable interface {
	io.Writer
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
}

// appendLine appends line to f whole or not at all: a write that fails part-way (a full disk) is
// cut back to where it began, so that the next entry, once there is room, does not start inside
// a torn one (which the plots would refuse as not JSON). A device such as /dev/null is written
// as it is.
func appendLine(f appendable, line []byte) error {
	st, serr := f.Stat()
	_, err := f.Write(line)
	if err != nil && serr == nil && st.Mode().IsRegular() {
		if terr := f.Truncate(st.Size()); terr != nil {
			err = fmt.Errorf("%w (and a torn line stays: %v)", err, terr)
		}
	}
	return err
}

// sanitize replaces NaN/Inf (which JSON cannot hold) with strings.
func sanitize(entry map[string]any) map[string]any {
	for k, v := range entry {
		f, ok := v.(float64)
		if f32, is32 := v.(float32); is32 { // (a float32 NaN failed json.Marshal, dropping the entry)
			f, ok = float64(f32), true
		}
		if ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			entry[k] = fmt.Sprint(f)
		}
	}
	return entry
}

// saveCheckpoint writes the current weights, moments and state, then prunes old checkpoints.
// With several ranks every rank calls it (ZeRO-1 gathers the moments) and rank 0 writes.
func (t *Trainer) saveCheckpoint() error {
	if t.comm.Size() > 1 {
		crc, err := t.sameParams()
		if err != nil {
			return err
		}
		t.paramsCRC = crc
	}
	arrays, err := t.checkpointArrays()
	if err != nil {
		return err
	}
	return t.solo(func() error { return t.writeCheckpoint(arrays) })
}

// saveChunkLen is how many values a checkpoint moves at a time: writeCheckpoint's downloads from
// a backend without host memory, and gatherShard's from each rank (a variable for the tests).
var saveChunkLen = 1 << 20

// writeCheckpoint writes the weights and both moments (checkpointArrays) and the state, after
// the log's lines up to it are on disk (a power loss would otherwise leave a checkpoint whose
// steps the log lacks).
func (t *Trainer) writeCheckpoint(arrays [3]ckptArray) error {
	if t.log != nil {
		t.log.Sync() // best effort: a log that cannot sync says so when written
	}
	m := t.w
	state, err := json.Marshal(t.state)
	if err != nil {
		return err
	}
	ck := &checkpoint.Checkpoint{
		Step: t.state.Step, Config: t.cfg.marshal(), State: state,
		Tensors: paramTensors(m), Software: "gpt2go " + t.opts.Version,
	}
	if hm, ok := t.be.(backend.HostMemory); ok {
		// Host-memory backends are written straight from their buffers: no second copy of
		// 3 x the parameters.
		host := func(a ckptArray) []float32 {
			if a.host != nil {
				return a.host
			}
			return hm.HostFloats(a.buf)
		}
		ck.Params, ck.M, ck.V = host(arrays[0]), host(arrays[1]), host(arrays[2])
	} else {
		// Downloaded a chunk at a time as Save writes them (twice: the checksum pass, then the
		// file), so the host never holds 3 x the parameters (18 GB for GPT-2 1.5B) but what
		// ZeRO-1 gathered.
		n := m.Grads.Len()
		if t.saveChunk == nil {
			t.saveChunk = make([]float32, min(n, saveChunkLen))
		}
		ck.StreamMoments = true
		ck.Stream = func(i int, sink func(int, []float32) error) error {
			if arrays[i].host != nil {
				return sink(0, arrays[i].host)
			}
			for off := 0; off < n; off += len(t.saveChunk) {
				part := t.saveChunk[:min(len(t.saveChunk), n-off)]
				t.be.Download(part, t.be.View(arrays[i].buf, off, len(part)))
				if err := t.be.Sync(); err != nil {
					return err
				}
				if err := sink(off, part); err != nil {
					return err
				}
			}
			return nil
		}
	}
	path := checkpoint.Path(t.opts.RunDir, t.state.Step)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := checkpoint.Save(path, ck); err != nil {
		return err
	}
	t.last = path
	return checkpoint.Prune(t.opts.RunDir, t.cfg.KeepCkpts, t.state.Step)
}

// ParamTensors describes the model's flat parameter layout for a checkpoint (a trainable or
// NewInference model's; an int8 model's buffers leave its matmul weights out).
func ParamTensors(m *gpt.Model) []checkpoint.ParamTensor { return paramTensors(m.Weights()) }

func paramTensors(m *gpt.Trainable) []checkpoint.ParamTensor {
	specs, offs := m.Specs(), m.Offsets()
	out := make([]checkpoint.ParamTensor, len(specs))
	for i, s := range specs {
		out[i] = checkpoint.ParamTensor{Name: s.Name, Shape: s.Shape, Offset: offs[i]}
	}
	return out
}
