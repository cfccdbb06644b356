package train

import (
	"fmt"
	"math"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/gpt"
)

// Precisions a run can be configured with (Config.Precision):
//   - fp32: fp32 storage and exact fp32 matmuls;
//   - tf32: fp32 storage, matmuls on a GPU's TF32 tensor cores (on the CPU the same as fp32);
//   - bf16: the model's mixed plan (gpt.Precision) with bf16 compute;
//   - fp16: the same in fp16, with dynamic loss scaling (LossScaler).
//
// An empty Precision, which runs saved before mixed precision have, is fp32.
var precisions = map[string]backend.DType{"fp32": backend.F32, "tf32": backend.F32, "bf16": backend.BF16, "fp16": backend.F16}

// ParsePrecision checks a --precision value and returns its compute format.
func ParsePrecision(s string) (backend.DType, error) {
	if s == "" {
		return backend.F32, nil
	}
	dt, ok := precisions[s]
	if !ok {
		return backend.F32, fmt.Errorf("unknown --precision %q; use fp32, tf32, bf16 or fp16", s)
	}
	return dt, nil
}

// ModelPrecision is the model's storage plan for this run.
func (c Config) ModelPrecision() gpt.Precision {
	dt, _ := ParsePrecision(c.Precision)
	p := gpt.Precision{Compute: dt, StochasticRounding: c.StochasticRounding}
	if c.GradPrecision != "" && c.GradPrecision != "fp32" {
		p.Grads = dt
	}
	return p
}

// PrecisionName is the run's precision as logged: "fp32" for runs saved without one.
func (c Config) PrecisionName() string {
	if c.Precision == "" {
		return "fp32"
	}
	return c.Precision
}

// PrecisionOn is the precision name that runs on a GPU (gpu) or on the CPU: tf32 is a mode of a
// GPU's matmul units, so the CPU runs it as plain fp32.
func PrecisionOn(name string, gpu bool) string {
	if name == "tf32" && !gpu {
		return "fp32"
	}
	return name
}

// validatePrecision checks the precision flags.
func (c Config) validatePrecision() error {
	dt, err := ParsePrecision(c.Precision)
	if err != nil {
		return err
	}
	switch g := c.GradPrecision; g {
	case "", "fp32", "bf16", "fp16":
	default:
		return fmt.Errorf("unknown --grad-precision %q; use fp32, bf16 or fp16", g)
	}
	if g := c.GradPrecision; g != "" && g != "fp32" && (dt == backend.F32 || g != dt.String()) {
		return fmt.Errorf("--grad-precision %s needs --precision %s (gradients are fp32 or the 16-bit compute format)", g, g)
	}
	if c.StochasticRounding && dt == backend.F32 {
		return fmt.Errorf("--stochastic-rounding needs --precision bf16 or fp16")
	}
	if dt != backend.F16 {
		return nil
	}
	s := c.lossScale()
	switch {
	case !(s.Init > 0) || math.IsInf(s.Init, 0):
		return fmt.Errorf("--loss-scale must be a positive number, got %g", s.Init)
	case s.Init > maxLossScale:
		return fmt.Errorf("--loss-scale %g is beyond what a float32 gradient can hold; use at most 2^64 (GradScaler starts at 2^16)", s.Init)
	case !(s.Growth >= 1) || math.IsInf(s.Growth, 0):
		return fmt.Errorf("--loss-scale-growth must be >= 1, got %g", s.Growth)
	case !(s.Backoff > 0 && s.Backoff < 1):
		return fmt.Errorf("--loss-scale-backoff must be in (0,1), got %g", s.Backoff)
	case s.Window < 1:
		return fmt.Errorf("--loss-scale-window must be >= 1, got %d", s.Window)
	}
	return nil
}

// isPowerOf2 says whether x is 2^k for an integer k.
func isPowerOf2(x float64) bool {
	frac, _ := math.Frexp(x)
	return frac == 0.5
}

// lossScaleFlags set LossScaleConfig, which only fp16 uses.
var lossScaleFlags = []string{"loss-scale", "loss-scale-growth", "loss-scale-backoff", "loss-scale-window"}

// CheckLossScaleFlags refuses the loss-scaling flags among set (the flags the user gave) when the
// run is not fp16, which would ignore them, and in fp16 a scale, growth or backoff given that is
// not a power of two (scaling by one is exact: the scaled gradients round as the unscaled ones
// would). c is the run's resolved config (a resumed run's precision is its own unless --precision
// changes it); a resumed run's own saved values go on unchecked, as they were accepted once.
func (c Config) CheckLossScaleFlags(set map[string]bool) error {
	if c.ModelPrecision().Compute == backend.F16 {
		s := c.lossScale()
		for _, f := range []struct {
			name, what string
			v          float64
		}{{"loss-scale", "GradScaler starts at 2^16 = 65536; scaling by one is exact, so the scaled gradients round as the unscaled ones would", s.Init},
			{"loss-scale-growth", "default 2; it keeps the loss scale a power of two, which scales exactly", s.Growth},
			{"loss-scale-backoff", "default 0.5; it keeps the loss scale a power of two, which scales exactly", s.Backoff}} {
			if set[f.name] && !isPowerOf2(f.v) {
				return fmt.Errorf("--%s must be a power of two (%s), got %g", f.name, f.what, f.v)
			}
		}
		return nil
	}
	for _, name := range lossScaleFlags {
		if set[name] {
			return fmt.Errorf("--%s applies to --precision fp16 only (dynamic loss scaling), and this run is %s: leave it out, or add --precision fp16", name, c.PrecisionName())
		}
	}
	return nil
}

// LossScaleConfig is dynamic loss scaling as torch.amp.GradScaler does it (its init_scale,
// growth_factor, backoff_factor and growth_interval), used in fp16 only: fp16's smallest normal
// value is 6.1e-5, below which gradients lose precision and then vanish, so the loss gradient is
// multiplied by Scale and the gradients divided by it again before clipping and AdamW.
type LossScaleConfig struct {
	Init    float64 `json:"init"`    // the first scale
	Growth  float64 `json:"growth"`  // multiplies the scale after Window clean steps in a row
	Backoff float64 `json:"backoff"` // multiplies the scale after a step with an inf/NaN gradient
	Window  int     `json:"window"`  // clean steps before the scale grows
}

// DefaultLossScale is GradScaler's default: 2^16, doubled every 2000 clean steps, halved on
// overflow.
func DefaultLossScale() LossScaleConfig {
	return LossScaleConfig{Init: 65536, Growth: 2, Backoff: 0.5, Window: 2000}
}

// lossScale is the loss scaling of the run: GradScaler's defaults for a run saved without one.
func (c Config) lossScale() LossScaleConfig {
	if c.LossScale == (LossScaleConfig{}) {
		return DefaultLossScale()
	}
	return c.LossScale
}

// LossScaler is the state of dynamic loss scaling; it is saved in checkpoints (State), so a
// resumed run scales exactly as the uninterrupted one.
type LossScaler struct {
	Scale      float64 `json:"scale"`
	CleanSteps int     `json:"clean_steps"` // steps with finite gradients since the scale last changed
}

// minLossScale is where the scaler gives up: gradients that are not finite even at this scale
// are not an overflow.
const minLossScale = 0x1p-24

// NewLossScaler starts at the configured scale.
func NewLossScaler(c LossScaleConfig) *LossScaler { return &LossScaler{Scale: c.Init} }

// Update records whether this step's (scaled) gradients were all finite and returns whether the
// step may be applied: on an inf or NaN the step is skipped and the scale multiplied by Backoff;
// after Window finite steps in a row it is multiplied by Growth.
func (s *LossScaler) Update(finite bool, c LossScaleConfig) (apply bool) {
	if !finite {
		s.Scale *= c.Backoff
		s.CleanSteps = 0
		return false
	}
	s.CleanSteps++
	if s.CleanSteps >= c.Window {
		s.Scale = min(s.Scale*c.Growth, maxLossScale)
		s.CleanSteps = 0
	}
	return true
}

// maxLossScale bounds the loss scale: gradients of order 1 times it stay far inside float32.
const maxLossScale = 1 << 64

// startLossScaler gives an fp16 run a loss scaler if its state has none (a new run, or one saved
// in another precision); other precisions have none.
func (t *Trainer) startLossScaler() {
	if t.cfg.ModelPrecision().Compute != backend.F16 {
		t.state.LossScale = nil
		return
	}
	if t.state.LossScale == nil {
		t.state.LossScale = NewLossScaler(t.cfg.lossScale())
	} else if t.opts.Resume && t.opts.Set["loss-scale"] { // given on resume: start over from it
		t.state.LossScale = NewLossScaler(t.cfg.lossScale())
	}
}

// lossScale is the factor the loss gradient is multiplied by this step: 1 unless fp16.
func (t *Trainer) lossScale() float32 {
	if t.state.LossScale == nil {
		return 1
	}
	return float32(t.state.LossScale.Scale)
}

// precisionLine describes the run's precision for the first log lines.
func (t *Trainer) precisionLine() string {
	cfg := t.cfg
	line := cfg.PrecisionName()
	p := cfg.ModelPrecision()
	switch {
	case p.Mixed():
		line += fmt.Sprintf(" (fp32 master weights and AdamW moments, %v parameter copy and activations, %v gradients", p.Compute, p.Grads)
		if p.StochasticRounding {
			line += ", stochastic rounding"
		}
		if s := t.state.LossScale; s != nil {
			ls := cfg.lossScale()
			line += fmt.Sprintf(", loss scale %g (x%g after %d clean steps, x%g on overflow)", s.Scale, ls.Growth, ls.Window, ls.Backoff)
		}
		line += ")"
	case cfg.Precision == "tf32":
		line += " (fp32 storage, TF32 matmuls where the device has them)"
	}
	return line
}

// NewInferenceModel builds a forward-only model (gpt.NewInference: no gradients or moments) on
// be for batches up to (B,T) holding the loaded weights (ReadParams), in the storage plan prec
// (rounded to its compute format as they are uploaded: a forward-only model has no fp32 master).
func (l *Loaded) NewInferenceModel(be backend.Backend, B, T int, prec gpt.Precision, opts ...gpt.InferenceOption) (*gpt.Model, error) {
	m, err := gpt.NewInference(be, l.Config, B, T, prec, opts...)
	if err != nil {
		return nil, err
	}
	if err := m.SetParamsFrom(l.ReadParams); err != nil {
		return nil, err
	}
	return m, nil
}
