package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if err := checkDataTokens(gpt2, nil); err != nil {
		t.Errorf("data without meta.json: %v", err)
	}
}
