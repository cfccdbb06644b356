package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/backend/cuda"
)

// bench --json prints one object holding every figure the text output shows.
func TestBenchJSONFields(t *testing.T) {
	js := mustRun(t, "bench", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--vocab-size", "100",
		"--batch-size", "2", "--seq-len", "8", "--warmup-steps", "1", "--steps", "3", "--threads", "1", "--json")
	var res struct {
		Backend    string    `json:"backend"`
		BatchSize  int       `json:"batch_size"`
		SeqLen     int       `json:"seq_len"`
		Steps      int       `json:"steps"`
		StepMs     []float64 `json:"step_ms"`
		MsPerStep  float64   `json:"ms_per_step"`
		MinMs      float64   `json:"min_ms"`
		TokPerSec  float64   `json:"tok_per_s"`
		GFlops     float64   `json:"gflop_per_s"`
		PeakGFlops float64   `json:"peak_gflop_per_s"`
		PctOfPeak  float64   `json:"pct_of_peak"`
		PeakRSSMB  float64   `json:"peak_rss_mb"`
		Kernel     string    `json:"matmul_kernel"`
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatalf("bench --json %q: %v", js, err)
	}
	if strings.Count(strings.TrimSpace(js), "\n") != 0 {
		t.Errorf("bench --json printed more than one line: %q", js)
	}
	if res.Backend != "cpu (1 thread)" || res.BatchSize != 2 || res.SeqLen != 8 || res.Steps != 3 || len(res.StepMs) != 3 {
		t.Errorf("bench --json describes the wrong run: %s", js)
	}
	if !(res.MinMs > 0 && res.MinMs <= res.MsPerStep && res.TokPerSec > 0 && res.GFlops > 0) {
		t.Errorf("bench --json timings are not positive and consistent: %s", js)
	}
	if !(res.PeakGFlops > 0 && res.PctOfPeak > 0) {
		t.Errorf("bench --json has no sgemm peak or %% of peak: %s", js)
	}
	if res.Kernel != cpu.MatmulKernel() || res.Kernel == "" {
		t.Errorf("bench --json matmul_kernel = %q, want %q", res.Kernel, cpu.MatmulKernel())
	}
	if runtime.GOOS == "linux" && !(res.PeakRSSMB > 0) {
		t.Errorf("bench --json peak_rss_mb = %g, want > 0", res.PeakRSSMB)
	}
}

// The text output names the same figures.
func TestBenchText(t *testing.T) {
	out := mustRun(t, "bench", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--vocab-size", "100",
		"--batch-size", "2", "--seq-len", "8", "--steps", "1", "--threads", "1")
	for _, want := range []string{"ms/step (min ", "tok/s", "GFLOP/s", "% of the measured sgemm peak", "peak RSS"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
}

// train --cpuprofile writes a Go CPU profile (a gzip stream) of the run.
func TestTrainCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	mustRun(t, trainArgs(prepared(t), filepath.Join(dir, "run"), "--steps", "3", "--cpuprofile", prof)...)
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("--cpuprofile wrote %d bytes that are not a gzip-compressed profile", len(b))
	}
	mustFail(t, "--cpuprofile", trainArgs(prepared(t), filepath.Join(dir, "run2"), "--steps", "1",
		"--cpuprofile", filepath.Join(dir, "no-such-dir", "cpu.prof"))...)
}

// bench --verbose on a GPU lists the matmul algorithms it timed, with the gain over cuBLASLt's
// first choice per shape and for one call of each.
func TestPrintTuned(t *testing.T) {
	var sb strings.Builder
	printTuned(&sb, nil, "x")
	if sb.Len() != 0 {
		t.Fatalf("no shapes printed %q", sb.String())
	}
	printTuned(&sb, []cuda.TunedShape{
		{Key: "t10 m768 n16384 k768", Candidates: 8, Index: 3, Micros: 50, FirstMicro: 100},
		{Key: "t01 m768 n768 k16384", Candidates: 6, Index: 0, Micros: 150, FirstMicro: 150, Cached: true},
	}, "")
	out := sb.String()
	for _, want := range []string{"cache none", "t10 m768 n16384 k768", "2.00x", "1.00x (cached)",
		"200.0 us with the picks, 250.0 us with the heuristic's first (1.25x)"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
