package train

import (
	"path/filepath"
	"testing"
)

// Mixed precision on the GPU resumes exactly: a bf16 run (stochastic rounding, whose bits depend
// on the step) stopped at step 6 and resumed repeats every loss of the uninterrupted run bit for
// bit, as on the CPU (TestMixedPrecisionResumeIsBitIdentical).
func TestCUDAMixedPrecisionResumeIsBitIdentical(t *testing.T) {
	be := cudaBackend(t)
	dataDir := writeDataset(t, 50)
	for _, prec := range []string{"bf16", "fp16"} {
		t.Run(prec, func(t *testing.T) {
			cfg := smallConfig(dataDir)
			cfg.Precision, cfg.StochasticRounding = prec, true
			if err := be.CheckDType(cfg.ModelPrecision().Compute); err != nil {
				t.Skip(err)
			}
			full, half := filepath.Join(t.TempDir(), "full"), filepath.Join(t.TempDir(), "half")
			if _, err := runTrain(t, Options{Config: cfg, RunDir: full, Backend: be}); err != nil {
				t.Fatal(err)
			}
			if _, err := runTrain(t, Options{Config: cfg, RunDir: half, StopAt: 6, Backend: be}); err != nil {
				t.Fatal(err)
			}
			if _, err := runTrain(t, Options{Config: cfg, RunDir: half, Resume: true, Backend: be}); err != nil {
				t.Fatal(err)
			}
			wantTrain := compareResumedLogs(t, full, half, cfg.Steps, 6)
			if wantTrain[cfg.Steps] >= wantTrain[1]-0.1 {
				t.Errorf("loss did not fall: step 1 %.3f, step %d %.3f", wantTrain[1], cfg.Steps, wantTrain[cfg.Steps])
			}
		})
	}
}
