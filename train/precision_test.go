package train

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/prepare"
)

// GradScaler's rules: a step with an inf/NaN gradient is skipped and halves the scale (and
// restarts the count of clean steps); Window clean steps in a row double it.
func TestLossScalerUpdate(t *testing.T) {
	c := LossScaleConfig{Init: 1024, Growth: 2, Backoff: 0.5, Window: 3}
	s := NewLossScaler(c)
	for i, step := range []struct {
		finite, apply bool
		scale         float64
		clean         int
	}{
		{true, true, 1024, 1}, {true, true, 1024, 2}, {true, true, 2048, 0}, // grows after 3
		{false, false, 1024, 0}, // overflow: skip, halve, restart the count
		{true, true, 1024, 1}, {false, false, 512, 0}, {false, false, 256, 0},
		{true, true, 256, 1}, {true, true, 256, 2}, {true, true, 512, 0},
	} {
		if apply := s.Update(step.finite, c); apply != step.apply || s.Scale != step.scale || s.CleanSteps != step.clean {
			t.Fatalf("update %d (finite %v): apply %v, scale %g, clean %d; want %v, %g, %d",
				i, step.finite, apply, s.Scale, s.CleanSteps, step.apply, step.scale, step.clean)
		}
	}
}

// scaleLog is the fp16 part of a log: each step's loss scale and whether it was skipped.
type scaleLog struct {
	scale   map[int]float64
	skipped map[int]int
}

func readScaleLog(t *testing.T, path string) scaleLog {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := scaleLog{scale: map[int]float64{}, skipped: map[int]int{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct {
			Step      int      `json:"step"`
			LossScale *float64 `json:"loss_scale"`
			Skipped   *int     `json:"skipped"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.LossScale != nil {
			out.scale[e.Step] = *e.LossScale
		}
		if e.Skipped != nil {
			out.skipped[e.Step] = *e.Skipped
		}
	}
	return out
}

// A forced overflow: an fp16 run that starts with a loss scale of 2^40 overflows the fp16
// gradients (the logits' gradient alone is about scale/(B*T)), so its first steps are skipped,
// halving the scale each time, without touching the weights and without counting as a NaN
// failure; then the clean steps apply and the scale grows after every Window of them. The scale
// and the skips are logged at every step, in log.jsonl and as TensorBoard's train/loss_scale and
// train/skipped.
func TestFP16ForcedOverflowSkipsAndHalves(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Precision = "fp16"
	cfg.LossScale = LossScaleConfig{Init: 0x1p40, Growth: 2, Backoff: 0.5, Window: 3}
	cfg.Steps, cfg.CkptEvery, cfg.KeepCkpts = 30, 1, 0
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, TensorBoard: true}); err != nil {
		t.Fatalf("an fp16 overflow must not stop the run: %v", err)
	}
	log := readScaleLog(t, filepath.Join(dir, logFile))
	if len(log.scale) != cfg.Steps || len(log.skipped) != cfg.Steps {
		t.Fatalf("logged the loss scale at %d and skips at %d steps, want all %d", len(log.scale), len(log.skipped), cfg.Steps)
	}
	firstClean := 0
	for step := 1; step <= cfg.Steps; step++ {
		if log.skipped[step] == 0 {
			firstClean = step
			break
		}
		if want := math.Ldexp(1, 40-(step-1)); log.scale[step] != want {
			t.Fatalf("skipped step %d ran at loss scale %g, want %g (halved after each skip)", step, log.scale[step], want)
		}
	}
	if firstClean < 2 {
		t.Fatalf("no step was skipped at loss scale 2^40 (first clean step %d)", firstClean)
	}
	scalars, _, _ := tensorBoardView(t, dir)
	for _, tag := range []struct {
		name   string
		logged func(step int) float64
	}{
		{"train/loss_scale", func(step int) float64 { return log.scale[step] }},
		{"train/skipped", func(step int) float64 { return float64(log.skipped[step]) }},
	} {
		if len(scalars[tag.name]) != cfg.Steps {
			t.Errorf("TensorBoard %s has %d points, want one per step (%d)", tag.name, len(scalars[tag.name]), cfg.Steps)
		}
		for step := 1; step <= cfg.Steps; step++ {
			if got, want := scalars[tag.name][int64(step)], float32(tag.logged(step)); got != want {
				t.Errorf("TensorBoard %s at step %d is %g, log.jsonl says %g", tag.name, step, got, want)
			}
		}
	}
	// The weights after the skipped steps are the initial ones.
	initial, err := checkpoint.Load(checkpoint.Path(dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	skippedTo, err := checkpoint.Load(checkpoint.Path(dir, firstClean-1))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(initial.Params, skippedTo.Params) || !slices.Equal(initial.M, skippedTo.M) {
		t.Errorf("skipped steps 1..%d changed the weights or moments", firstClean-1)
	}
	// Replaying the logged skips through GradScaler's rules gives every logged scale: halved on a
	// skip, doubled after 3 clean steps in a row (here it grows back until it overflows again).
	replay, grew, skips := NewLossScaler(cfg.LossScale), false, 0
	for step := 1; step <= cfg.Steps; step++ {
		if log.scale[step] != replay.Scale {
			t.Fatalf("step %d ran at loss scale %g, GradScaler's rules give %g", step, log.scale[step], replay.Scale)
		}
		before := replay.Scale
		replay.Update(log.skipped[step] == 0, cfg.LossScale)
		grew = grew || replay.Scale > before
		skips += log.skipped[step]
	}
	if !grew {
		t.Error("the loss scale never grew after 3 clean steps")
	}
	var st State
	last, err := checkpoint.Load(checkpoint.Path(dir, cfg.Steps))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(last.State, &st); err != nil || st.LossScale == nil || st.SkippedSteps != skips || st.LossScale.Scale != replay.Scale {
		t.Errorf("checkpoint state %s: want the loss scaler at %g and %d skipped steps", last.State, replay.Scale, skips)
	}
}

// Exact resume in bf16 and fp16: stopping at step 6 and resuming gives the losses, validation
// losses and (fp16) loss scales of the uninterrupted run bit for bit. The fp16 run skips steps
// and grows its scale on both sides of the resume point, so the scaler state must round-trip.
func TestMixedPrecisionResumeIsBitIdentical(t *testing.T) {
	dataDir := writeDataset(t, 50)
	for _, prec := range []string{"bf16", "fp16"} {
		t.Run(prec, func(t *testing.T) {
			cfg := smallConfig(dataDir)
			cfg.Precision, cfg.StochasticRounding = prec, true
			cfg.LossScale = LossScaleConfig{Init: 0x1p21, Growth: 2, Backoff: 0.5, Window: 2}
			full, half := filepath.Join(t.TempDir(), "full"), filepath.Join(t.TempDir(), "half")
			if _, err := runTrain(t, Options{Config: cfg, RunDir: full}); err != nil {
				t.Fatal(err)
			}
			if _, err := runTrain(t, Options{Config: cfg, RunDir: half, StopAt: 6}); err != nil {
				t.Fatal(err)
			}
			if _, err := runTrain(t, Options{Config: cfg, RunDir: half, Resume: true}); err != nil {
				t.Fatal(err)
			}
			wantTrain := compareResumedLogs(t, full, half, cfg.Steps, 6)
			if prec == "fp16" {
				want, got := readScaleLog(t, filepath.Join(full, logFile)), readScaleLog(t, filepath.Join(half, logFile))
				skips := 0
				for step := range cfg.Steps {
					skips += want.skipped[step+1]
					if got.scale[step+1] != want.scale[step+1] || got.skipped[step+1] != want.skipped[step+1] {
						t.Errorf("step %d: resumed scale %g skipped %d, uninterrupted %g %d", step+1,
							got.scale[step+1], got.skipped[step+1], want.scale[step+1], want.skipped[step+1])
					}
				}
				if skips == 0 || want.scale[cfg.Steps] == want.scale[1] {
					t.Errorf("the fp16 run should both skip and grow its scale (skips %d, scale %g -> %g)", skips, want.scale[1], want.scale[cfg.Steps])
				}
			}
			if wantTrain[cfg.Steps] >= wantTrain[1]-0.1 {
				t.Errorf("loss did not fall: step 1 %.3f, step %d %.3f", wantTrain[1], cfg.Steps, wantTrain[cfg.Steps])
			}
		})
	}
}

// A bf16 or fp16 checkpoint holds fp32 master weights: they load anywhere in fp32, and a run
// resumed in fp32 continues from them. Precision flags are validated.
func TestPrecisionConfig(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Precision = "int8" }, "--precision"},
		{func(c *Config) { c.GradPrecision = "bf16" }, "--grad-precision"},
		{func(c *Config) { c.Precision, c.GradPrecision = "bf16", "fp16" }, "--grad-precision"},
		{func(c *Config) { c.StochasticRounding = true }, "--stochastic-rounding"},
		{func(c *Config) { c.Precision, c.LossScale.Backoff = "fp16", 1 }, "--loss-scale-backoff"},
		{func(c *Config) { c.Precision, c.LossScale.Init = "fp16", 0 }, "--loss-scale"},
	} {
		cfg := smallConfig("x")
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %+v: error %v, want one naming %s", cfg, err, c.want)
		}
	}
	cfg := smallConfig("x")
	cfg.Precision, cfg.GradPrecision = "bf16", "bf16"
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	pow2 := smallConfig("x")
	pow2.Precision, pow2.LossScale = "fp16", LossScaleConfig{Init: 0x1p-3, Growth: 1, Backoff: 0.25, Window: 7}
	if err := pow2.Validate(); err != nil {
		t.Errorf("powers of two refused: %v", err)
	}
	if p := cfg.ModelPrecision(); p != (gpt.Precision{Compute: p.Compute, Grads: p.Compute}) || p.Compute.String() != "bf16" {
		t.Errorf("model precision %v", p)
	}
	var old Config // a run.json from before mixed precision
	if err := json.Unmarshal([]byte(`{"batch_size": 4}`), &old); err != nil || old.PrecisionName() != "fp32" || old.ModelPrecision().Mixed() {
		t.Errorf("a config without a precision must mean fp32: %+v", old)
	}
}

// The shortened char recipe (scripts/shakespeare-char.sh, 100 of its 2000 steps with the warmup
// scaled down) in bf16 and fp16 ends within 0.03 of fp32's validation loss, the bound for
// the full recipe. Needs Tiny Shakespeare ($GPT2GO_SHAKESPEARE or ../shared/data).
func TestCharRecipeShortInEveryPrecision(t *testing.T) {
	path := os.Getenv("GPT2GO_SHAKESPEARE")
	if path == "" {
		path = filepath.Join("..", "..", "shared", "data", "tinyshakespeare.txt")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("Tiny Shakespeare not available (%v); set GPT2GO_SHAKESPEARE to its path", err)
	}
	dataDir, err := prepare.Resolve(path, t.TempDir(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := data.Open(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.Model = gpt.Config{NumLayers: 4, NumHeads: 4, Channels: 128, BlockSize: 64, VocabSize: ds.Meta.VocabSize, PaddedVocabSize: ds.Meta.VocabSize}
	cfg.Data, cfg.BatchSize, cfg.SeqLen, cfg.Shuffle = dataDir, 12, 64, true
	cfg.LR, cfg.MinLR, cfg.Warmup, cfg.Beta2, cfg.WeightDecay, cfg.GradClip = 1e-3, 1e-4, 15, 0.99, 0.1, 1
	cfg.Steps, cfg.EvalEvery, cfg.EvalBatches = 100, 100, 20
	cfg.SampleEvery, cfg.SampleTokens, cfg.CkptEvery, cfg.LogEvery = 0, 0, 0, 0
	val := map[string]float32{}
	for _, prec := range []string{"fp32", "bf16", "fp16"} {
		c := cfg
		c.Precision = prec
		sum, err := runTrain(t, Options{Config: c, RunDir: filepath.Join(t.TempDir(), prec)})
		if err != nil {
			t.Fatal(err)
		}
		val[prec] = sum.LastValLoss
	}
	t.Logf("val loss after %d steps: fp32 %.4f, bf16 %.4f, fp16 %.4f", cfg.Steps, val["fp32"], val["bf16"], val["fp16"])
	for _, prec := range []string{"bf16", "fp16"} {
		if d := math.Abs(float64(val[prec] - val["fp32"])); !(d <= 0.03) {
			t.Errorf("%s val loss %.4f is %.4f from fp32's %.4f; want within 0.03", prec, val[prec], d, val["fp32"])
		}
	}
}

// --loss-scale given on resume starts the scaler over from it (a user passes it to leave a bad
// scale); without it the saved scaler carries on. A scale beyond float32 is refused.
func TestFP16LossScaleOnResume(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Precision = "fp16"
	cfg.LossScale = LossScaleConfig{Init: 0x1p16, Growth: 2, Backoff: 0.5, Window: 1}
	cfg.Steps, cfg.CkptEvery = 4, 2
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, StopAt: 2}); err != nil {
		t.Fatal(err)
	}
	cfg.LossScale.Init = 1024
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, Set: map[string]bool{"loss-scale": true}}); err != nil {
		t.Fatal(err)
	}
	log := readScaleLog(t, filepath.Join(dir, logFile))
	if log.scale[3] != 1024 {
		t.Errorf("step 3 after a resume with --loss-scale 1024 ran at %g", log.scale[3])
	}
	big := cfg
	big.LossScale.Init = 1e40
	if err := big.Validate(); err == nil || !strings.Contains(err.Error(), "--loss-scale") {
		t.Errorf("--loss-scale 1e40: %v, want a refusal", err)
	}
	s := NewLossScaler(LossScaleConfig{Init: maxLossScale})
	s.Update(true, LossScaleConfig{Init: maxLossScale, Growth: 2, Backoff: 0.5, Window: 1})
	if s.Scale != maxLossScale {
		t.Errorf("the scale grew past its bound to %g", s.Scale)
	}
}

// In fp16 a loss scale, growth or backoff given that is not a power of two is refused in one line;
// the same values saved by a run that predates the rule resume (no flag given), and the defaults
// and other powers of two pass.
func TestLossScaleFlagsPowersOfTwo(t *testing.T) {
	for _, c := range []struct {
		flag string
		edit func(*LossScaleConfig)
	}{
		{"loss-scale", func(s *LossScaleConfig) { s.Init = 1e12 }},
		{"loss-scale", func(s *LossScaleConfig) { s.Init = 3 * 0x1p14 }},
		{"loss-scale-growth", func(s *LossScaleConfig) { s.Growth = 1.5 }},
		{"loss-scale-backoff", func(s *LossScaleConfig) { s.Backoff = 0.3 }},
	} {
		cfg := smallConfig("x")
		cfg.Precision = "fp16"
		c.edit(&cfg.LossScale)
		if err := cfg.Validate(); err != nil {
			t.Errorf("--%s: a saved run's config %+v is refused: %v", c.flag, cfg.LossScale, err)
		}
		if err := cfg.CheckLossScaleFlags(map[string]bool{"steps": true}); err != nil {
			t.Errorf("--%s not given: %v", c.flag, err)
		}
		err := cfg.CheckLossScaleFlags(map[string]bool{c.flag: true})
		if err == nil || !strings.HasPrefix(err.Error(), "--"+c.flag+" must be a power of two") || strings.Contains(err.Error(), "\n") {
			t.Errorf("--%s given as %+v: %v, want a one-line refusal", c.flag, cfg.LossScale, err)
		}
	}
	cfg := smallConfig("x")
	cfg.Precision, cfg.LossScale = "fp16", LossScaleConfig{Init: 0x1p-3, Growth: 1, Backoff: 0.25, Window: 7}
	if err := cfg.CheckLossScaleFlags(map[string]bool{"loss-scale": true, "loss-scale-growth": true, "loss-scale-backoff": true}); err != nil {
		t.Errorf("powers of two refused: %v", err)
	}
}

// The loss-scaling flags given to a run that is not fp16, which would ignore them, are refused
// in one line naming fp16, checked on the run's resolved precision: a bf16 run refuses them (also
// when it starts, before it reads its data), an fp16 one takes them.
func TestLossScaleFlagsOutsideFP16(t *testing.T) {
	for _, prec := range []string{"", "fp32", "tf32", "bf16", "fp16"} {
		for _, name := range lossScaleFlags {
			cfg := smallConfig("x")
			cfg.Precision = prec
			err := cfg.CheckLossScaleFlags(map[string]bool{name: true, "steps": true})
			if prec == "fp16" {
				if err != nil {
					t.Errorf("fp16 refuses --%s: %v", name, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), "--"+name+" applies to --precision fp16 only") ||
				!strings.Contains(err.Error(), "this run is "+cfg.PrecisionName()) || strings.Contains(err.Error(), "\n") {
				t.Errorf("--precision %q with --%s: %v, want a one-line refusal naming fp16", prec, name, err)
			}
		}
		cfg := smallConfig("x")
		cfg.Precision = prec
		if err := cfg.CheckLossScaleFlags(map[string]bool{"precision": true, "lr": true}); err != nil {
			t.Errorf("--precision %q without loss-scaling flags: %v", prec, err)
		}
	}
	cfg := smallConfig("no such data")
	cfg.Precision = "bf16"
	_, err := runTrain(t, Options{Config: cfg, RunDir: filepath.Join(t.TempDir(), "run"), Set: map[string]bool{"loss-scale-window": true}})
	if err == nil || !strings.Contains(err.Error(), "--loss-scale-window applies to --precision fp16 only") {
		t.Errorf("a bf16 run given --loss-scale-window: %v", err)
	}
}
