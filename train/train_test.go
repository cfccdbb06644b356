package train

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/hf"
)

// writeDataset makes a small dataset with some structure to learn: a noisy counting sequence.
func writeDataset(t *testing.T, vocab int) string {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	gen := func(n int) []uint16 {
		toks := make([]uint16, n)
		for i := range toks {
			toks[i] = uint16(i % vocab)
			if rng.IntN(5) == 0 {
				toks[i] = uint16(rng.IntN(vocab))
			}
		}
		return toks
	}
	if err := data.WriteShard(filepath.Join(dir, "train_000000.bin"), gen(20000)); err != nil {
		t.Fatal(err)
	}
	if err := data.WriteShard(filepath.Join(dir, "val_000000.bin"), gen(3000)); err != nil {
		t.Fatal(err)
	}
	if err := data.WriteMeta(dir, &data.Meta{Tokenizer: "byte", VocabSize: vocab, EOT: -1}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setTokenizer makes info the tokenizer of the run and of its dataset's meta.json, which the
// trainer compares.
func setTokenizer(t *testing.T, cfg *Config, info *TokenizerInfo) {
	t.Helper()
	meta, err := data.ReadMeta(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	meta.Tokenizer, meta.Alphabet, meta.EOT, meta.Record = info.Name, info.Alphabet, info.EOT, info.Record
	if err := data.WriteMeta(cfg.Data, meta); err != nil {
		t.Fatal(err)
	}
	cfg.Tokenizer = info
}

func smallConfig(dataDir string) Config {
	c := Defaults()
	c.Model = gpt.Config{BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 16}
	c.Data = dataDir
	c.BatchSize, c.SeqLen, c.Steps = 4, 16, 12
	c.LR, c.MinLR, c.Warmup = 1e-2, 1e-3, 3
	c.EvalEvery, c.EvalBatches = 4, 2
	c.SampleEvery, c.SampleTokens = 0, 0
	c.CkptEvery, c.KeepCkpts, c.LogEvery = 6, 0, 0
	return c
}

func runTrain(t *testing.T, opts Options) (*Summary, error) {
	t.Helper()
	if opts.Backend == nil {
		opts.Backend = cpu.New(2)
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	return Run(context.Background(), opts)
}

// readLog returns the train losses (by step) and val losses of a JSONL log.
func readLog(t *testing.T, path string) (train map[int]float64, val map[int]float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	train, val = map[int]float64{}, map[int]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Step    int      `json:"step"`
			Loss    *float64 `json:"loss"`
			ValLoss *float64 `json:"val_loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("bad log line %q: %v", sc.Text(), err)
		}
		if e.Loss != nil {
			if _, dup := train[e.Step]; dup {
				t.Fatalf("log has step %d twice", e.Step)
			}
			train[e.Step] = *e.Loss
		}
		if e.ValLoss != nil {
			if _, dup := val[e.Step]; dup {
				t.Fatalf("log has val loss of step %d twice", e.Step)
			}
			val[e.Step] = *e.ValLoss
		}
	}
	return train, val
}

func TestResumeIsBitIdentical(t *testing.T) { testResumeIsBitIdentical(t, nil) }

// compareResumedLogs checks the log of a run stopped at stopAt and resumed (half) against the
// log of the same run uninterrupted (full): every training loss of the steps steps, and every
// evaluation, those after the resume included, with the same bits; no other evaluation but the
// one --stop-at makes at its last step. It returns the uninterrupted run's training losses.
func compareResumedLogs(t *testing.T, full, half string, steps, stopAt int) map[int]float64 {
	t.Helper()
	wantTrain, wantVal := readLog(t, filepath.Join(full, logFile))
	gotTrain, gotVal := readLog(t, filepath.Join(half, logFile))
	if len(wantTrain) != steps || len(gotTrain) != steps {
		t.Fatalf("logged %d and %d steps, want %d", len(wantTrain), len(gotTrain), steps)
	}
	for step, want := range wantTrain {
		if got := gotTrain[step]; got != want {
			t.Errorf("step %d: resumed loss %v != uninterrupted %v", step, got, want)
		}
	}
	if len(wantVal) == 0 {
		t.Fatal("the uninterrupted run logged no val loss; the test's config should evaluate")
	}
	for step, want := range wantVal {
		got, ok := gotVal[step]
		if !ok {
			t.Errorf("step %d: the resumed run logged no val loss (uninterrupted %v)", step, want)
		} else if got != want {
			t.Errorf("step %d: resumed val loss %v != uninterrupted %v", step, got, want)
		}
	}
	for step, got := range gotVal {
		if _, ok := wantVal[step]; !ok && step != stopAt {
			t.Errorf("step %d: the resumed run logged val loss %v, the uninterrupted run none", step, got)
		}
	}
	return wantTrain
}

// testResumeIsBitIdentical stops a run at step 6, resumes it and compares every loss with an
// uninterrupted run, on backend be (nil: the CPU).
func testResumeIsBitIdentical(t *testing.T, be backend.Backend) {
	dataDir := writeDataset(t, 50)
	for _, shuffle := range []bool{false, true} {
		t.Run(map[bool]string{false: "sequential", true: "shuffle"}[shuffle], func(t *testing.T) {
			cfg := smallConfig(dataDir)
			cfg.Shuffle = shuffle
			full := filepath.Join(t.TempDir(), "full")
			if _, err := runTrain(t, Options{Config: cfg, RunDir: full, Backend: be}); err != nil {
				t.Fatal(err)
			}
			half := filepath.Join(t.TempDir(), "half")
			const stopAt = 6
			if _, err := runTrain(t, Options{Config: cfg, RunDir: half, StopAt: stopAt, Backend: be}); err != nil {
				t.Fatal(err)
			}
			if _, err := runTrain(t, Options{Config: cfg, RunDir: half, Resume: true, Backend: be}); err != nil {
				t.Fatal(err)
			}
			wantTrain := compareResumedLogs(t, full, half, cfg.Steps, stopAt)
			// The loss must actually fall: the data is learnable.
			if wantTrain[cfg.Steps] >= wantTrain[1]-0.2 {
				t.Errorf("loss did not fall: step 1 %.3f, step %d %.3f", wantTrain[1], cfg.Steps, wantTrain[cfg.Steps])
			}
		})
	}
}

// Resuming with a larger --steps continues exactly where the schedule does not depend on the
// total (constant learning rate).
func TestResumeWithMoreSteps(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Schedule = "constant"
	full := filepath.Join(t.TempDir(), "full")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: full}); err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(t.TempDir(), "half")
	short := cfg
	short.Steps = 5
	if _, err := runTrain(t, Options{Config: short, RunDir: half}); err != nil {
		t.Fatal(err)
	}
	// Named by its checkpoints folder, the run resumes the same; a run that does not exist is
	// refused without creating anything, and a file is not a run.
	missing := filepath.Join(t.TempDir(), "missing")
	for _, dir := range []string{missing, filepath.Join(half, runFile)} {
		if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true}); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("resume %s: %v, want a one-line error", dir, err)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("resuming %s created it", missing)
	}
	if _, err := runTrain(t, Options{Config: cfg, RunDir: checkpoint.Dir(half), Resume: true, Set: map[string]bool{"steps": true}}); err != nil {
		t.Fatal(err)
	}
	want, _ := readLog(t, filepath.Join(full, logFile))
	got, _ := readLog(t, filepath.Join(half, logFile))
	for step := 1; step <= cfg.Steps; step++ {
		if got[step] != want[step] {
			t.Errorf("step %d: resumed loss %v != uninterrupted %v", step, got[step], want[step])
		}
	}
}

func TestRunDirHoldingARunIsRefused(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps = 2
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	_, err := runTrain(t, Options{Config: cfg, RunDir: dir})
	if err == nil || !strings.Contains(err.Error(), "already holds a run") || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("second run into the same dir: %v", err)
	}
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Force: true}); err != nil {
		t.Fatalf("--force: %v", err)
	}
	given := cfg
	given.BatchSize = 2
	_, err = runTrain(t, Options{Config: given, RunDir: dir, Resume: true, Set: map[string]bool{"batch-size": true}})
	if err == nil || !strings.Contains(err.Error(), "--batch-size (saved 4, given 2)") {
		t.Fatalf("unsafe override on resume: %v", err)
	}
}

// nanInit writes an llm.c file for cfg's model whose final LayerNorm weight is NaN (the first
// loss is then NaN) and returns its path.
func nanInit(t *testing.T, cfg Config) string {
	t.Helper()
	params := make([]float32, cfg.Model.NumParams())
	for i := range params {
		params[i] = 0.01
	}
	params[len(params)-2*cfg.Model.Channels] = float32(math.NaN())
	init := filepath.Join(t.TempDir(), "nan.bin")
	if err := gpt.WriteLLMC(init, cfg.Model, params); err != nil {
		t.Fatal(err)
	}
	return init
}

// A NaN loss stops the run at its step, keeping the last good checkpoint (here step 0's). In fp16
// too: a non-finite loss is not a gradient overflow to skip with a smaller loss scale, even when
// the scale would overflow the gradients as well (2^40).
func TestNonFiniteLossStopsAndKeepsCheckpoint(t *testing.T) {
	dataDir := writeDataset(t, 50)
	for _, prec := range []string{"fp32", "fp16"} {
		t.Run(prec, func(t *testing.T) {
			cfg := smallConfig(dataDir)
			cfg.Init = nanInit(t, cfg)
			cfg.Precision = prec
			if prec == "fp16" {
				cfg.LossScale = LossScaleConfig{Init: 0x1p40, Growth: 2, Backoff: 0.5, Window: 3}
			}
			dir := filepath.Join(t.TempDir(), "run")
			_, err := runTrain(t, Options{Config: cfg, RunDir: dir})
			if err == nil || !strings.Contains(err.Error(), "step 1: loss NaN") || !strings.Contains(err.Error(), "not finite") {
				t.Fatalf("NaN loss: %v", err)
			}
			entries, _ := checkpoint.List(dir)
			if len(entries) != 1 || entries[0].Step != 0 {
				t.Fatalf("checkpoints after NaN stop: %+v, want only step 0", entries)
			}
			if _, err := checkpoint.Load(entries[0].Path); err != nil {
				t.Fatalf("step-0 checkpoint unusable: %v", err)
			}
			log, err := os.ReadFile(filepath.Join(dir, logFile))
			if err != nil {
				t.Fatal(err)
			}
			if lines := strings.Split(strings.TrimSpace(string(log)), "\n"); len(lines) != 1 ||
				!strings.Contains(lines[0], `"error":"non-finite"`) || strings.Contains(lines[0], "skipped") {
				t.Errorf("log after a NaN loss: %s; want one step-1 entry marked non-finite, not a skipped step", log)
			}
		})
	}
}

func TestCheckpointsArePrunedKeepingStepZero(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps, cfg.CkptEvery, cfg.KeepCkpts = 10, 2, 2
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	entries, _ := checkpoint.List(dir)
	var steps []int
	for _, e := range entries {
		steps = append(steps, e.Step)
	}
	if len(steps) != 3 || steps[0] != 0 || steps[1] != 8 || steps[2] != 10 {
		t.Fatalf("checkpoints %v, want [0 8 10]", steps)
	}
}

func TestLRSchedule(t *testing.T) {
	c := Defaults()
	c.LR, c.MinLR, c.Warmup, c.Steps = 1e-3, 1e-4, 10, 110
	cases := []struct {
		schedule string
		step     int
		want     float64
	}{
		{"cosine", 0, 1e-4}, {"cosine", 9, 1e-3}, {"cosine", 10, 1e-3},
		{"cosine", 60, 1e-4 + 0.5*9e-4}, {"cosine", 110, 1e-4}, // index 110: after the last update
		{"cosine", 109, 1e-4 + 0.5*(1+math.Cos(math.Pi*99/100))*9e-4}, // the last update's
		{"linear", 60, 1e-3 - 0.5*9e-4}, {"linear", 35, 1e-3 - 0.25*9e-4},
		{"constant", 5, 6e-4}, {"constant", 100, 1e-3},
	}
	for _, tc := range cases {
		c.Schedule = tc.schedule
		if got := c.LRAt(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s step %d: lr %g, want %g", tc.schedule, tc.step, got, tc.want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	base := smallConfig("x")
	cases := map[string]func(*Config){
		"seq-len":                         func(c *Config) { c.SeqLen = 17 },
		"batch-size":                      func(c *Config) { c.BatchSize = 0 },
		"lr-schedule":                     func(c *Config) { c.Schedule = "step" },
		"n_head":                          func(c *Config) { c.Model.NumHeads = 3 },
		"--lr":                            func(c *Config) { c.LR = math.NaN() },
		"--weight-decay must be a finite": func(c *Config) { c.WeightDecay = math.NaN() },
		"--min-lr must be a finite":       func(c *Config) { c.MinLR = math.NaN() },
		"--beta1 must be a finite":        func(c *Config) { c.Beta1 = math.NaN() },
		"--grad-clip must be a finite":    func(c *Config) { c.GradClip = math.Inf(1) },
		"--eps must be a finite":          func(c *Config) { c.Eps = math.Inf(1) },
	}
	for want, mutate := range cases {
		c := base
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// With in-order batches, one batch of 4 sequences and two accumulated micro-batches of 2 cover
// the same tokens, so the first step's loss and gradient agree to float rounding.
func TestGradAccumMatchesLargerBatch(t *testing.T) {
	dataDir := writeDataset(t, 50)
	run := func(B, accum int) (loss, norm float64) {
		cfg := smallConfig(dataDir)
		cfg.BatchSize, cfg.GradAccum, cfg.Steps, cfg.EvalEvery = B, accum, 1, 0
		dir := filepath.Join(t.TempDir(), "run")
		if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(filepath.Join(dir, logFile))
		defer f.Close()
		var e struct{ Loss, GradNorm float64 }
		raw, _ := io.ReadAll(f)
		json.Unmarshal([]byte(strings.Split(string(raw), "\n")[0]), &struct {
			Loss     *float64 `json:"loss"`
			GradNorm *float64 `json:"grad_norm"`
		}{&e.Loss, &e.GradNorm})
		return e.Loss, e.GradNorm
	}
	l1, n1 := run(4, 1)
	l2, n2 := run(2, 2)
	if math.Abs(l1-l2) > 1e-6 || math.Abs(n1-n2) > 1e-5*n1 || n1 == 0 {
		t.Fatalf("B=4: loss %v norm %v; B=2 x 2 accumulated: loss %v norm %v", l1, n1, l2, n2)
	}
}

// trainedRun trains a small run and returns its directory and its weights (LoadWeights).
func trainedRun(t *testing.T) (string, *Loaded) {
	t.Helper()
	run := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: smallConfig(writeDataset(t, 50)), RunDir: run}); err != nil {
		t.Fatal(err)
	}
	eager, err := LoadWeights(run)
	if err != nil {
		t.Fatal(err)
	}
	return run, eager
}

// OpenWeights verifies a run's newest checkpoint but leaves its weights in the file: ReadParams
// reads LoadWeights' values from it, and the inference model built from it gives the same loss.
func TestOpenWeights(t *testing.T) {
	run, eager := trainedRun(t)
	lazy, err := OpenWeights(run)
	if err != nil {
		t.Fatal(err)
	}
	if lazy.Params != nil || lazy.Config != eager.Config || lazy.Step != eager.Step || lazy.Source != eager.Source || lazy.Run == nil {
		t.Fatalf("OpenWeights: %d params held, config %+v step %d source %s; LoadWeights: config %+v step %d source %s",
			len(lazy.Params), lazy.Config, lazy.Step, lazy.Source, eager.Config, eager.Step, eager.Source)
	}
	var got []float32
	if err := lazy.ReadParams(func(off int, chunk []float32) error { got = append(got, chunk...); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, eager.Params) {
		t.Fatalf("ReadParams gave %d values unlike LoadWeights' %d", len(got), len(eager.Params))
	}
	tokens := []int32{1, 5, 9, 2, 7, 7, 3, 0}
	var losses []float32
	for _, l := range []*Loaded{eager, lazy} {
		m, err := l.NewInferenceModel(cpu.New(1), 1, len(tokens), gpt.Precision{})
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Forward(tokens, tokens, 1, len(tokens))
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
	}
	if losses[0] != losses[1] {
		t.Errorf("loss %v from OpenWeights' model, %v from LoadWeights'", losses[1], losses[0])
	}
	lazy.Close()

	// The run's checkpoints folder stands for the run; a Hugging Face folder or any other folder
	// gets a one-line error that says what to pass.
	viaFolder, err := OpenWeights(checkpoint.Dir(run) + "/")
	if err != nil {
		t.Fatal(err)
	}
	viaFolder.Close()
	if viaFolder.Source != eager.Source {
		t.Errorf("OpenWeights(RUN/checkpoints/) read %s, want %s", viaFolder.Source, eager.Source)
	}
	t.Chdir(checkpoint.Dir(run)) // "." inside the checkpoints folder too
	viaDot, err := OpenWeights(".")
	if err != nil {
		t.Fatal(err)
	}
	viaDot.Close()
	if viaDot.Step != eager.Step {
		t.Errorf("OpenWeights(.) inside RUN/checkpoints read step %d, want %d", viaDot.Step, eager.Step)
	}
	hfDir := t.TempDir()
	if _, err := hf.Write(hfDir, eager.Config, eager.Params, nil); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{hfDir: "--init " + hfDir, t.TempDir(): "not a gpt2go run"} {
		_, err := OpenWeights(dir)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("OpenWeights(%s): %v, want one line containing %q", dir, err, want)
		}
	}
}

// Close closes the file OpenWeights or OpenInit left open, for a checkpoint, an llm.c file and a
// Hugging Face folder alike; ReadParams fails after it, and LoadInit closes its own.
func TestLoadedClose(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd to count open files")
		}
		return len(ents)
	}
	run, eager := trainedRun(t)
	llmc := filepath.Join(t.TempDir(), "m.bin")
	if err := gpt.WriteLLMC(llmc, eager.Config, eager.Params); err != nil {
		t.Fatal(err)
	}
	hfDir := t.TempDir()
	if _, err := hf.Write(hfDir, eager.Config, eager.Params, nil); err != nil {
		t.Fatal(err)
	}
	opens := map[string]func() (*Loaded, error){
		"checkpoint": func() (*Loaded, error) { return OpenWeights(run) },
		"llm.c":      func() (*Loaded, error) { return OpenInit(context.Background(), llmc, nil) },
		"hf":         func() (*Loaded, error) { return OpenInit(context.Background(), hfDir, nil) },
		"load llm.c": func() (*Loaded, error) { return LoadInit(context.Background(), llmc, nil) },
	}
	for name, open := range opens {
		before := fds()
		l, err := open()
		if err != nil {
			t.Fatal(err)
		}
		want := eager.Params
		if name == "hf" { // the Hugging Face reader pads the vocabulary its own way
			m, err := hf.Read(hfDir)
			if err != nil {
				t.Fatal(err)
			}
			want = m.Params
		}
		got, err := gpt.ReadAll(l.ReadParams, l.Config.NumParams())
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: ReadParams: %v", name, err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
		if after := fds(); after != before {
			t.Errorf("%s: %d open files after Close, %d before", name, after, before)
		}
		if l.Params == nil {
			if err := l.ReadParams(func(int, []float32) error { return nil }); err == nil {
				t.Errorf("%s: ReadParams after Close gave no error", name)
			}
		}
		l.Close() // twice is harmless
	}
}

// deviceLike is the CPU backend seen as a GPU is: without HostMemory, so that checkpoints are
// downloaded and streamed into the file a chunk at a time (checkpoint.Checkpoint.Stream).
type deviceLike struct{ backend.Backend }

// A run on a backend without host memory saves checkpoints (downloaded 1000 values at a time)
// that resume bit for bit.
func TestResumeIsBitIdenticalWithoutHostMemory(t *testing.T) {
	defer func(n int) { saveChunkLen = n }(saveChunkLen)
	saveChunkLen = 1000
	be := deviceLike{cpu.New(2)}
	if _, ok := backend.Backend(be).(backend.HostMemory); ok {
		t.Fatal("deviceLike has HostMemory")
	}
	testResumeIsBitIdentical(t, be)
}
