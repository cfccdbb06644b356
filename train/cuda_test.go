package train

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/internal/gputest"
)

func cudaBackend(t *testing.T) *cuda.Backend {
	return gputest.Backend(t, cuda.Options{TF32: false})
}

// On one GPU the kernels reduce in a fixed order (no atomics), so a resumed run repeats the
// uninterrupted one bit for bit, as on the CPU.
func TestCUDAResumeIsBitIdentical(t *testing.T) { testResumeIsBitIdentical(t, cudaBackend(t)) }

// Steps queued before the previous one is read back and replayed as CUDA graphs (the GPU's
// default) give the bits of steps run one at a time without graphs, resumed runs included.
func TestCUDAPipelinedStepsMatch(t *testing.T) { testPipelinedStepsMatch(t, cudaBackend(t)) }

// Checkpoints are the same on both devices: train on the GPU, resume on the CPU, and the other
// way. The resumed losses then track the uninterrupted run's (not bit for bit: the devices round
// differently).
func TestCUDACheckpointResumesOnCPU(t *testing.T) {
	testResumeAcross(t, cudaBackend(t), cpu.New(0))
}

func TestCPUCheckpointResumesOnCUDA(t *testing.T) {
	testResumeAcross(t, cpu.New(0), cudaBackend(t))
}

// testResumeAcross trains to the end on first, and again to step 6 on first and from there on
// second, and compares the losses after step 6.
func testResumeAcross(t *testing.T, first, second backend.Backend) {
	cfg := smallConfig(writeDataset(t, 50))
	full := filepath.Join(t.TempDir(), "full")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: full, Backend: first}); err != nil {
		t.Fatal(err)
	}
	mixed := filepath.Join(t.TempDir(), "mixed")
	if _, err := runTrain(t, Options{Config: cfg, RunDir: mixed, StopAt: 6, Backend: first}); err != nil {
		t.Fatal(err)
	}
	if _, err := runTrain(t, Options{Config: cfg, RunDir: mixed, Resume: true, Backend: second}); err != nil {
		t.Fatal(err)
	}
	want, _ := readLog(t, filepath.Join(full, logFile))
	got, _ := readLog(t, filepath.Join(mixed, logFile))
	for step := 7; step <= cfg.Steps; step++ {
		if d := math.Abs(got[step] - want[step]); d > 1e-4*math.Abs(want[step]) {
			t.Errorf("step %d: resumed on %s, loss %v; uninterrupted on %s, %v", step, second.Name(), got[step], first.Name(), want[step])
		}
	}
}
