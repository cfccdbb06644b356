package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
