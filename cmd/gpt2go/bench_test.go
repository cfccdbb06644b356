package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
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

// train --cpuprofile writes a Go CPU profile (a gzip stream) of the run, and replaces an
// earlier one. It refuses up front a path that is not a profile (a checkpoint given by
// mistake), a run's file or folder, or a folder, and leaves it as it was.
func TestTrainCPUProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	os.WriteFile(prof, nil, 0o644) // an empty file: nothing to lose
	data := prepared(t)
	mustRun(t, trainArgs(data, filepath.Join(dir, "run"), "--steps", "3", "--cpuprofile", prof)...)
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("--cpuprofile wrote %d bytes that are not a gzip-compressed profile", len(b))
	}
	if err := checkProfileOutput(prof); err != nil {
		t.Errorf("an earlier profile is refused: %v", err)
	}
	notProfile := filepath.Join(dir, "model.safetensors")
	os.WriteFile(notProfile, []byte("weights"), 0o644)
	gz := filepath.Join(dir, "notes.gz") // gzip, but not a profile
	os.WriteFile(gz, gzipped("notes"), 0o644)
	ckpt := filepath.Join(dir, "run", "checkpoints", "step_00000003.safetensors")
	for path, want := range map[string]string{
		notProfile: "is not a Go CPU profile", gz: "is not a Go CPU profile",
		ckpt: "would overwrite part of the training run", filepath.Join(dir, "run"): "would overwrite part of the training run",
		dir: "is a folder",
	} {
		before, _ := os.ReadFile(path)
		mustFail(t, want, trainArgs(data, filepath.Join(dir, "run2"), "--steps", "1", "--cpuprofile", path)...)
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Errorf("--cpuprofile %s changed it", path)
		}
	}
}

// A profile whose writes fail (a full disk) is an error when the profile stops, and the earlier
// profile at the path stays as it was, with no temp file beside it: not a torn profile and
// exit 0.
func TestCPUProfileWriteFailure(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.prof")
	old := gzipped("\x0a\x04\x08\x01\x10\x02") // a profile's first field, sample_type
	os.WriteFile(prof, old, 0o644)
	if err := checkProfileOutput(prof); err != nil {
		t.Fatalf("the earlier profile is refused: %v", err)
	}
	w := writeProfile
	defer func() { writeProfile = w }()
	full := errors.New("no space left on device")
	writeProfile = func(path string, fill func(io.Writer) error) error {
		return w(path, func(io.Writer) error { return fill(failingWriter{full}) })
	}
	stop, err := startCPUProfile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); !errors.Is(err, full) || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Errorf("stop: %v, want the write's error, naming --cpuprofile", err)
	}
	if b, _ := os.ReadFile(prof); !bytes.Equal(b, old) {
		t.Errorf("the earlier profile became %d bytes", len(b))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("left in the folder: %v", entries)
	}
}

// gzipped returns s as a gzip stream.
func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

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

// A train run whose profile cannot be written still prints its summary, then fails.
func TestTrainCPUProfileFailureKeepsSummary(t *testing.T) {
	w := writeProfile
	defer func() { writeProfile = w }()
	full := errors.New("no space left on device")
	writeProfile = func(path string, fill func(io.Writer) error) error {
		return w(path, func(io.Writer) error { return fill(failingWriter{full}) })
	}
	dir := t.TempDir()
	code, out, errOut := gpt2go(t, trainArgs(prepared(t), filepath.Join(dir, "run"), "--steps", "2", "--cpuprofile", filepath.Join(dir, "cpu.prof"))...)
	if code != 1 || !strings.Contains(out, "done: 2 steps") || !strings.Contains(errOut, "--cpuprofile") {
		t.Errorf("exit %d, stdout %q, stderr %q; want the summary, then the profile's error", code, out, errOut)
	}
}
