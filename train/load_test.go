package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
)

// CheckOutput refuses the paths of a run's own files and folders and allows everything else,
// including new files beside them.
func TestCheckOutput(t *testing.T) {
	run := t.TempDir()
	ckpts := filepath.Join(run, "checkpoints")
	if err := os.Mkdir(ckpts, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{runFile, logFile, filepath.Join("checkpoints", "step_00000010.safetensors")} {
		if err := os.WriteFile(filepath.Join(run, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	refused := []string{
		run, run + "/", ckpts, ckpts + "/.",
		filepath.Join(ckpts, "step_00000010.safetensors"), filepath.Join(ckpts, "new.bin"),
		filepath.Join(run, runFile), filepath.Join(run, logFile), filepath.Join(run, samplesFile),
		filepath.Join(run, "events.out.tfevents.1.host.1.1"),
	}
	for _, p := range refused {
		err := CheckOutput(p, "--out")
		if err == nil || !strings.Contains(err.Error(), "--out "+p) || !strings.Contains(err.Error(), "training run "+run+" ") {
			t.Errorf("%s: got %v, want an error naming the path and the run", p, err)
		}
	}
	link := filepath.Join(t.TempDir(), "link") // a run's checkpoints reached through a link
	if err := os.Symlink(ckpts, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckOutput(filepath.Join(link, "step_00000010.safetensors"), "--out"); err == nil {
		t.Errorf("a checkpoint through a symbolic link: no error")
	}
	other := t.TempDir()
	for _, p := range []string{
		filepath.Join(run, "model.bin"), filepath.Join(run, "report.html"), filepath.Join(run, "export-hf"),
		other, filepath.Join(other, "checkpoints"), filepath.Join(other, runFile), filepath.Join(run, runFile, "x"),
	} {
		if err := CheckOutput(p, "--out"); err != nil {
			t.Errorf("%s: %v, want no error", p, err)
		}
	}
}

// Data whose ids mean other tokens to the model is refused: under --init weights of another
// vocabulary size, and after the run's dataset was tokenized again another way.
func TestCheckDataTokens(t *testing.T) {
	char := &data.Meta{Tokenizer: "char", Alphabet: "\n abc", VocabSize: 5}
	run := Config{Data: "ds", Model: gpt.Config{VocabSize: 5}, Tokenizer: TokenizerInfoFromMeta(char)}
	if err := checkDataTokens(run, char); err != nil {
		t.Errorf("the run's own data: %v", err)
	}
	if err := checkDataTokens(run, &data.Meta{Tokenizer: "char", Alphabet: "\n abd", VocabSize: 5}); err == nil || !strings.Contains(err.Error(), "another char tokenizer") {
		t.Errorf("another alphabet: %v", err)
	}
	if err := checkDataTokens(run, &data.Meta{Tokenizer: "byte", VocabSize: 257, EOT: 256}); err == nil || !strings.Contains(err.Error(), "the byte tokenizer now") {
		t.Errorf("another tokenizer: %v", err)
	}
	gpt2 := Config{Data: "ds", Init: "gpt2.bin", Model: gpt.Config{VocabSize: 50257}}
	if err := checkDataTokens(gpt2, char); err == nil || !strings.Contains(err.Error(), "--init gpt2.bin has a 50257-token vocabulary") {
		t.Errorf("char data under GPT-2 weights: %v", err)
	}
	if err := checkDataTokens(gpt2, &data.Meta{Tokenizer: "gpt2", VocabSize: 50257, EOT: 50256}); err != nil {
		t.Errorf("GPT-2 data under GPT-2 weights: %v", err)
	}
	padded := Config{Data: "ds", Init: "nanogpt.bin", Model: gpt.Config{VocabSize: 50304}} // nanoGPT's padded GPT-2
	if err := checkDataTokens(padded, &data.Meta{Tokenizer: "gpt2", VocabSize: 50257, EOT: 50256}); err != nil {
		t.Errorf("GPT-2 data under padded GPT-2 weights: %v", err)
	}
	if err := checkDataTokens(gpt2, nil); err != nil {
		t.Errorf("data without meta.json: %v", err)
	}
}

// A resume that passes over a damaged newest checkpoint sets it aside, and the checkpoints it
// then writes survive --keep-ckpts: pruning counted the damaged file among the newest and
// deleted each new checkpoint as soon as it was written.
func TestResumePastDamagedCheckpointKeepsNewOnes(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.CkptEvery, cfg.KeepCkpts, cfg.EvalEvery = 8, 4, 1, 0
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	damaged := checkpoint.Path(dir, 8)
	damageFile(t, damaged)
	var out strings.Builder
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, StopAt: 6, Out: &out}); err != nil {
		t.Fatal(err)
	}
	entries, _ := checkpoint.List(dir)
	var steps []int
	for _, e := range entries {
		steps = append(steps, e.Step)
	}
	if !slices.Equal(steps, []int{0, 6}) {
		t.Fatalf("checkpoints after the resume: steps %v, want [0 6]; output:\n%s", steps, out.String())
	}
	if _, err := os.Stat(damaged + ".unusable"); err != nil || !strings.Contains(out.String(), "set aside "+damaged+".unusable") {
		t.Errorf("the damaged checkpoint was not set aside (%v); output:\n%s", err, out.String())
	}
	out.Reset()
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, StopAt: 7, Out: &out}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(step 6)") {
		t.Errorf("the next resume did not start from step 6:\n%s", out.String())
	}
}

// Resume cuts the log after the checkpoint's step, torn lines included (one left mid-file broke
// plot and report), and the samples file the same way (samples came twice).
func TestTruncateLogAndSamples(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.jsonl")
	os.WriteFile(log, []byte("{\"step\":1,\"loss\":2}\n{\"step\":2,\"lo\n{\"step\":2,\"loss\":1}\n{\"step\":3,\"loss\":0.5}\n{\"step\":4,\"lo"), 0o644)
	if err := truncateLog(log, 2); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(log); string(b) != "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":1}\n" {
		t.Errorf("log after truncateLog(2): %q", b)
	}
	samples := filepath.Join(dir, "samples.txt")
	os.WriteFile(samples, []byte("---- step 5 ----\nto be\n---- step 10 ----\nor not\n---- step 15 ----\nto be\n"), 0o644)
	if err := truncateSamples(samples, 10); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(samples); string(b) != "---- step 5 ----\nto be\n---- step 10 ----\nor not\n" {
		t.Errorf("samples after truncateSamples(10): %q", b)
	}
}

// A resume removes the temporary files of the trainer's writes that a crash cut short, and
// --force removes a --log file elsewhere with the rest of the run.
func TestResumeAndForceClearLeftovers(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.CkptEvery, cfg.EvalEvery = 4, 2, 0
	dir := filepath.Join(t.TempDir(), "run")
	cfg.LogFile = filepath.Join(t.TempDir(), "elsewhere.jsonl")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	stale := []string{filepath.Join(checkpoint.Dir(dir), ".step_00000006.safetensors.tmp-123"), filepath.Join(dir, ".log.jsonl.tmp-9")}
	other := filepath.Join(dir, ".report.html.tmp-5") // another command's, maybe being written
	for _, p := range append(stale, other) {
		os.WriteFile(p, []byte("partial"), 0o644)
	}
	cfg.Steps = 6
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, Set: map[string]bool{"steps": true}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another command's temporary file was removed: %v", err)
	}
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	if steps, _ := readLog(t, cfg.LogFile); len(steps) != 6 {
		t.Errorf("--force then 6 steps: %d steps in the --log file, want 6 (the old run's were kept)", len(steps))
	}
	// Without --log, --force clears RUN/log.jsonl; a --log that is not a regular file stays.
	cfg.LogFile = ""
	for range 2 {
		if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	if steps, _ := readLog(t, filepath.Join(dir, logFile)); len(steps) != 6 {
		t.Errorf("--force twice, 6 steps each: %d steps in log.jsonl, want 6", len(steps))
	}
	cfg.LogFile = "/dev/null"
	for range 2 {
		if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat("/dev/null"); err != nil || st.Mode().IsRegular() {
		t.Fatalf("/dev/null after --force --log /dev/null: %v, %v", st, err)
	}
}

// --force replaces a run only once the new one is sure to start: a new run that fails its
// checks (config, data, --init) leaves the old one whole. A --log file that is not the replaced
// run's own log is refused, never deleted or appended to.
func TestForceKeepsOldRunUntilNewStarts(t *testing.T) {
	ds := writeDataset(t, 50)
	cfg := smallConfig(ds)
	cfg.Steps, cfg.CkptEvery, cfg.EvalEvery = 2, 2, 0
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	runJSON, _ := os.ReadFile(filepath.Join(dir, runFile))
	ckpts, _ := checkpoint.List(dir)
	notes := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(notes, []byte("my notes, not a log\n"), 0o644)
	for name, change := range map[string]func(c *Config){
		"a bad schedule":           func(c *Config) { c.Schedule = "cosin" },
		"a batch over the data":    func(c *Config) { c.BatchSize = 100000 },
		"a missing --init":         func(c *Config) { c.Init = filepath.Join(t.TempDir(), "none.bin") },
		"a foreign --log":          func(c *Config) { c.LogFile = notes },
		"a --log in no folder":     func(c *Config) { c.LogFile = filepath.Join(t.TempDir(), "no", "log.jsonl") },
		"a --log that is a folder": func(c *Config) { c.LogFile = t.TempDir() },
	} {
		bad := cfg
		change(&bad)
		if _, err := runTrain(t, Options{Config: bad, RunDir: dir, Force: true}); err == nil {
			t.Fatalf("%s: the new run started", name)
		}
		after, _ := os.ReadFile(filepath.Join(dir, runFile))
		left, _ := checkpoint.List(dir)
		if !bytes.Equal(after, runJSON) || len(left) != len(ckpts) {
			t.Errorf("--force with %s: run.json changed or %d of %d checkpoints left", name, len(left), len(ckpts))
		}
	}
	if b, _ := os.ReadFile(notes); string(b) != "my notes, not a log\n" {
		t.Errorf("a refused --log file was changed: %q", b)
	}
	// The replaced run's own log may be named: RUN/log.jsonl, which --force then starts again.
	cfg.LogFile = filepath.Join(dir, logFile)
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err != nil {
		t.Errorf("--force --log RUN/log.jsonl: %v", err)
	}
	if steps, _ := readLog(t, cfg.LogFile); len(steps) != cfg.Steps {
		t.Errorf("--force --log RUN/log.jsonl: %d steps logged, want %d", len(steps), cfg.Steps)
	}
	// A run from before --log was stored absolute recorded it as given: relative to a working
	// directory no longer known, so --force leaves whatever that path names now alone.
	cfg.LogFile = ""
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	run, _ := os.ReadFile(filepath.Join(dir, runFile))
	os.WriteFile(filepath.Join(dir, runFile), bytes.Replace(run, []byte(`"log_every"`), []byte(`"log_file": "notes.txt", "log_every"`), 1), 0o644)
	t.Chdir(filepath.Dir(notes))
	old, err := setAsideOldRun(dir)
	if err == nil {
		err = old.drop()
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(notes); err != nil {
		t.Errorf("--force over a run that recorded a relative --log removed the file of that name here: %v", err)
	}
	// Without --force, an existing --log file is not appended to either.
	cfg.LogFile = notes
	if _, err := runTrain(t, Options{Config: cfg, RunDir: filepath.Join(t.TempDir(), "new")}); err == nil || !strings.Contains(err.Error(), "--log") {
		t.Errorf("a new run with --log onto a notes file: %v, want a refusal naming --log", err)
	}
}

// A --stop-at the run has passed is refused (it printed "done: 0 steps" and rewrote run.json),
// and a run without checkpoints is told how to start again rather than to resume.
func TestResumeEdgeMessages(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.CkptEvery, cfg.EvalEvery = 4, 2, 0
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, StopAt: 4}); err != nil {
		t.Fatal(err)
	}
	cfg.Steps = 8
	set := map[string]bool{"steps": true}
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, StopAt: 3, Set: set}); err == nil || !strings.Contains(err.Error(), "--stop-at 3 is not after step 4") {
		t.Errorf("--stop-at 3 at step 4: %v", err)
	}
	os.RemoveAll(checkpoint.Dir(dir))
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, Set: set}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("no checkpoints: %v", err)
	}
}

// fullDevice checks plans as the CUDA backend does, against what is free now (total less what
// was allocated) with a 512 MiB reserve, and reports that budget.
type fullDevice struct {
	backend.Backend
	total, used int64
	full        bool // nothing is free once the model is allocated
}

func (g *fullDevice) Alloc(n int) backend.Buf { g.used += 4 * int64(n); return g.Backend.Alloc(n) }
func (g *fullDevice) AllocInt32(n int) backend.Buf {
	g.used += 4 * int64(n)
	return g.Backend.AllocInt32(n)
}
func (g *fullDevice) MemoryBudget() (backend.MemoryBudget, error) {
	free := g.total - g.used
	if g.full && g.used > 0 {
		free = 0
	}
	return backend.MemoryBudget{Place: "on the GPU", Free: free, Total: g.total, Reserve: 512 << 20, ReserveFor: "scratch"}, nil
}
func (g *fullDevice) CheckMemory(plan []backend.MemoryItem) error {
	b, _ := g.MemoryBudget()
	return backend.CheckPlan(plan, b, nil)
}

// A model sized to fill the device with its reserve still samples at the end (the sample's KV
// cache asked for the whole reserve again), and the last checkpoint is saved before the sample,
// which may not cost it.
func TestSampleOnAFullDevice(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.SampleTokens, cfg.CkptEvery = 8, 0
	setTokenizer(t, &cfg, &TokenizerInfo{Name: "char", Alphabet: "\nABCDEFGHIJKLMNOPQRSTUVWabcdefghijklmnopqrstuvwxyz", EOT: -1})
	plan := gpt.PlanBytes(cfg.Model.PrecisionMemoryPlan(cfg.BatchSize, cfg.SeqLen, cfg.ModelPrecision()))
	for _, full := range []bool{false, true} { // the model fills the device but its reserve, or all
		be := &fullDevice{Backend: cpu.New(2), total: plan + 512<<20, full: full}
		dir := filepath.Join(t.TempDir(), "run")
		var out strings.Builder
		if _, err := runTrain(t, Options{RunDir: dir, Config: cfg, Backend: be, Out: &out}); err != nil {
			t.Fatalf("full %v: %v", full, err)
		}
		if _, err := os.Stat(checkpoint.Path(dir, cfg.Steps)); err != nil {
			t.Errorf("full %v: no final checkpoint: %v", full, err)
		}
		if noSample := strings.Contains(out.String(), "warning: no samples: their KV cache does not fit"); noSample != full {
			t.Errorf("full %v: sample skipped %v; output:\n%s", full, noSample, out.String())
		}
	}
}

// Non-finite values of either float width are logged as strings: a float32 NaN val_loss failed
// json.Marshal and the whole entry, val_acc with it, was dropped.
func TestSanitizeFloat32(t *testing.T) {
	b, err := json.Marshal(sanitize(map[string]any{"step": 3, "val_loss": float32(math.NaN()), "val_acc": 0.5, "loss": math.Inf(1)}))
	if err != nil || string(b) != `{"loss":"+Inf","step":3,"val_acc":0.5,"val_loss":"NaN"}` {
		t.Errorf("%s, %v", b, err)
	}
}

// A model.safetensors cut short is said to be, whether --init names the file or its folder (the
// file was "neither an llm.c model file (wrong magic 2584 ...) nor a Hugging Face GPT-2 model").
func TestInitTruncatedSafetensors(t *testing.T) {
	weights, err := os.ReadFile("../hf/testdata/tiny/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile("../hf/testdata/tiny/config.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.safetensors")
	for _, size := range []int{len(weights) / 2, 100} { // in the data, in the header
		if err := os.WriteFile(path, weights[:size], 0o644); err != nil {
			t.Fatal(err)
		}
		for _, spec := range []string{path, dir} {
			_, err := InitConfig(context.Background(), spec, nil)
			if err == nil || !strings.Contains(err.Error(), "not a valid safetensors file") || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("--init %s cut to %d bytes: %v; want it called a truncated safetensors file", spec, size, err)
			}
		}
	}
}

// RunArch reads a run's family from the run directory, its checkpoints folder or a checkpoint
// file in it, and says nothing ("") of anything else.
func TestRunArch(t *testing.T) {
	run := t.TempDir()
	ckpts := filepath.Join(run, "checkpoints")
	if err := os.MkdirAll(ckpts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"run.json": `{"arch": "bert"}`, "log.jsonl": "{}\n", "checkpoints/step_00000001.safetensors": "x"} {
		if err := os.WriteFile(filepath.Join(run, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for path, want := range map[string]string{
		run: "bert", ckpts: "bert", filepath.Join(ckpts, "step_00000001.safetensors"): "bert",
		filepath.Join(run, "log.jsonl"): "", filepath.Join(run, "run.json"): "", filepath.Join(run, "nope"): "",
	} {
		if got := RunArch(path); got != want {
			t.Errorf("RunArch(%s) = %q, want %q", path, got, want)
		}
	}
}

// --force sets the old run aside and deletes it only once the new run's step 0 is saved: when
// that fails (a full disk), the old run is put back as it was.
func TestForceRestoresOldRunWhenStepZeroFails(t *testing.T) {
	cfg, dir := forcedRun(t)
	before := runFiles(dir)
	saveStepZero = func(*Trainer) error { return errors.New("write step 0: no space left on device") }
	defer func() { saveStepZero = (*Trainer).saveCheckpoint }()
	bigger := cfg
	bigger.Model.NumLayers = 3
	_, err := runTrain(t, Options{Config: bigger, RunDir: dir, Force: true, TensorBoard: true})
	if err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "back in place") {
		t.Fatalf("--force with step 0 failing: %v", err)
	}
	checkRunKept(t, "--force with step 0 failing", dir, before)
	// Once step 0 is saved, the old run goes, .replaced with it.
	saveStepZero = (*Trainer).saveCheckpoint
	if _, err := runTrain(t, Options{Config: bigger, RunDir: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, replacedDir)); !os.IsNotExist(err) {
		t.Errorf("the replaced run was kept: %v", err)
	}
	if events, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*")); len(events) != 0 {
		t.Errorf("the replaced run's events were kept: %v", events)
	}
}

// A run whose every checkpoint is damaged says why each was passed over and what to do next.
func TestResumeWithNoUsableCheckpoint(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.CkptEvery, cfg.KeepCkpts, cfg.EvalEvery = 4, 4, 0, 0
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	entries, _ := checkpoint.List(dir)
	for _, e := range entries {
		damageFile(t, e.Path)
	}
	cfg.Steps = 8
	var out strings.Builder
	_, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, Set: map[string]bool{"steps": true}, Out: &out})
	if err == nil || !errors.Is(err, checkpoint.ErrNoneUsable) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("resume with every checkpoint damaged: %v", err)
	}
	if n := strings.Count(out.String(), "warning: skipping"); n != len(entries) {
		t.Errorf("%d warnings for %d damaged checkpoints:\n%s", n, len(entries), out.String())
	}
}

// A --force stopped before it finished (killed) leaves the old run in RUNDIR/.replaced: a new run
// there without --force and a resume both say where it is and how to keep either run; --force
// discards it.
func TestInterruptedForceIsNamed(t *testing.T) {
	cfg, dir := forcedRun(t)
	if _, err := setAsideOldRun(dir); err != nil { // what a --force killed before step 0 leaves
		t.Fatal(err)
	}
	for name, opts := range map[string]Options{
		"a new run": {Config: cfg, RunDir: dir},
		"a resume":  {Config: cfg, RunDir: dir, Resume: true},
	} {
		if _, err := runTrain(t, opts); err == nil || !strings.Contains(err.Error(), "interrupted --force") || !strings.Contains(err.Error(), "mv ") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err != nil {
		t.Fatal(err)
	}
	if isDir(filepath.Join(dir, replacedDir)) {
		t.Error("--force kept the interrupted --force's old run")
	}
}

// When part of the old run cannot be set aside (checkpoints/ a mount point of its own: EBUSY),
// --force stops and what was moved goes back: the checkpoints are never touched.
func TestForceSetAsideFailureKeepsOldRun(t *testing.T) {
	cfg, dir := forcedRun(t)
	before := runFiles(dir)
	renameAside = func(from, to string) error {
		if filepath.Base(from) == "checkpoints" {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: syscall.EBUSY}
		}
		return os.Rename(from, to)
	}
	defer func() { renameAside = os.Rename }()
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err == nil || !strings.Contains(err.Error(), "set the old run aside") {
		t.Fatalf("--force with checkpoints/ busy: %v", err)
	}
	checkRunKept(t, "--force with checkpoints/ busy", dir, before)
}

// Ctrl-C while a --force run sets up (its data, model, step 0) keeps the run it was to replace.
func TestForceInterruptedKeepsOldRun(t *testing.T) {
	cfg, dir := forcedRun(t)
	before := runFiles(dir)
	for _, when := range []string{"before", "during"} {
		ctx, cancel := context.WithCancel(context.Background())
		if when == "before" {
			cancel()
		} else {
			saveStepZero = func(t *Trainer) error { cancel(); return t.saveCheckpoint() } // Ctrl-C as step 0 is saved
		}
		_, err := Run(ctx, Options{Config: cfg, RunDir: dir, Force: true, Backend: cpu.New(1), Out: io.Discard})
		saveStepZero = (*Trainer).saveCheckpoint
		cancel()
		if err == nil || !strings.Contains(err.Error(), "interrupted before the new run started") {
			t.Errorf("Ctrl-C %s step 0: %v", when, err)
		}
		checkRunKept(t, "Ctrl-C "+when+" step 0", dir, before)
	}
}

// forcedRun trains the run the --force tests replace: 2 steps, checkpoints at 0 and 2, and
// TensorBoard events.
func forcedRun(t *testing.T) (Config, string) {
	t.Helper()
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.CkptEvery, cfg.EvalEvery = 2, 2, 0
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, TensorBoard: true}); err != nil {
		t.Fatal(err)
	}
	return cfg, dir
}

// runFiles reads every file under the run folder dir but its lock, by path.
func runFiles(dir string) map[string][]byte {
	files := map[string][]byte{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != ".lock" {
			files[path], _ = os.ReadFile(path)
		}
		return nil
	})
	return files
}

// checkRunKept checks that the run in dir holds exactly the files before (its config, log,
// events, checkpoints), byte for byte, and no .replaced folder: after what, the run is as it was.
func checkRunKept(t *testing.T, what, dir string, before map[string][]byte) {
	t.Helper()
	after := runFiles(dir)
	if len(after) != len(before) || len(before) < 4 {
		t.Errorf("%s: files before %d, after %d", what, len(before), len(after))
	}
	for path, b := range before {
		if !bytes.Equal(after[path], b) {
			t.Errorf("%s: %s changed or went", what, path)
		}
	}
	if isDir(filepath.Join(dir, replacedDir)) {
		t.Errorf("%s: %s was left", what, replacedDir)
	}
}

// damageFile flips a byte near the end of the file at path (a checkpoint's tensor data), as a
// bad disk or a torn copy would.
func damageFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-10] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
