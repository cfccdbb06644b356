package train

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/tensorboard"
)

// tensorBoardView reads a run directory's events files as TensorBoard does: in name order, a
// SessionLog START at step s dropping the points at steps >= s read before it.
func tensorBoardView(t *testing.T, dir string) (scalars map[string]map[int64]float32, texts map[int64]string, files int) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	sort.Strings(paths)
	scalars, texts = map[string]map[int64]float32{}, map[int64]string{}
	for _, p := range paths {
		events, err := tensorboard.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) == 0 || events[0].FileVersion != "brain.Event:2" {
			t.Fatalf("%s does not start with the file version", p)
		}
		for _, e := range events {
			if e.SessionLog == 1 {
				for _, series := range scalars {
					for step := range series {
						if step >= e.Step {
							delete(series, step)
						}
					}
				}
			}
			for _, v := range e.Values {
				switch {
				case v.HasSimple:
					if scalars[v.Tag] == nil {
						scalars[v.Tag] = map[int64]float32{}
					}
					scalars[v.Tag][e.Step] = v.Simple
				case v.Plugin == "text" && v.Tag == "samples" && len(v.Strings) == 1:
					texts[e.Step] = v.Strings[0]
				default:
					t.Fatalf("unexpected value %+v", v)
				}
			}
		}
	}
	return scalars, texts, len(paths)
}

// A run that crashed after its last checkpoint and resumed: TensorBoard's view must equal the
// JSONL log (which resume truncates), every number of every entry under its tag.
func TestTensorBoardMirrorsLogAcrossResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := smallConfig(writeDataset(t, 50))
	cfg.CkptEvery, cfg.SampleEvery, cfg.SampleTokens = 4, 4, 8
	alphabet := "\n"
	for c := ' '; len(alphabet) < cfg.Model.VocabSize; c++ {
		alphabet += string(c)
	}
	setTokenizer(t, &cfg, &TokenizerInfo{Name: "char", Alphabet: alphabet, EOT: -1})
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, StopAt: 6, TensorBoard: true}); err != nil {
		t.Fatal(err)
	}
	// Lose the step-6 checkpoint, as a crash right before it would: the resumed session starts
	// from step 4 and logs steps 5 and 6 again.
	if err := os.Remove(checkpoint.Path(dir, 6)); err != nil {
		t.Fatal(err)
	}
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir, Resume: true, Set: map[string]bool{}, TensorBoard: true}); err != nil {
		t.Fatal(err)
	}

	scalars, texts, files := tensorBoardView(t, dir)
	if files != 2 {
		t.Errorf("%d events files, want one per session", files)
	}
	train, val := readLog(t, filepath.Join(dir, logFile))
	if len(train) != cfg.Steps {
		t.Fatalf("log has %d steps, want %d", len(train), cfg.Steps)
	}
	for tag, want := range map[string]map[int]float64{"train/loss": train, "val/loss": val} {
		got := scalars[tag]
		if len(got) != len(want) {
			t.Errorf("%s: %d points, want %d (the log's)", tag, len(got), len(want))
		}
		for step, w := range want {
			if g, ok := got[int64(step)]; !ok || g != float32(w) {
				t.Errorf("%s at step %d: %v (present %v), want %v", tag, step, g, ok, float32(w))
			}
		}
	}
	wantTags := []string{"train/lr", "train/grad_norm", "perf/ms_per_step", "perf/tok_per_s"}
	if _, ok := any(cpu.New(1)).(backend.Peaker); ok {
		wantTags = append(wantTags, "perf/mfu")
	}
	for _, tag := range wantTags {
		if len(scalars[tag]) != cfg.Steps {
			t.Errorf("%s: %d points, want %d", tag, len(scalars[tag]), cfg.Steps)
		}
	}
	if len(scalars) != len(wantTags)+2 {
		t.Errorf("tags %v, want %v plus the losses", keys(scalars), wantTags)
	}
	if mfu, ok := scalars["perf/mfu"][3]; ok && !(mfu > 0 && mfu < 1) {
		t.Errorf("mfu %v is not a fraction", mfu)
	}
	for _, step := range []int64{4, 8, 12} {
		if s := texts[step]; !strings.HasPrefix(s, "```\n") || !strings.HasSuffix(s, "\n```") {
			t.Errorf("sample at step %d: %q, want a Markdown code block", step, s)
		}
	}
}

func TestTensorBoardOff(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Steps = 2
	if _, err := runTrain(t, Options{Config: cfg, RunDir: dir}); err != nil {
		t.Fatal(err)
	}
	if _, _, files := tensorBoardView(t, dir); files != 0 {
		t.Errorf("%d events files with TensorBoard off", files)
	}
}

func TestTensorBoardTag(t *testing.T) {
	for key, want := range map[string]string{
		"loss": "train/loss", "val_loss": "val/loss", "tok_s": "perf/tok_per_s", "mfu": "perf/mfu",
		"hellaswag_acc": "hellaswag/acc", "hellaswag_acc_norm": "hellaswag/acc_norm", "entropy": "train/entropy",
		"acc": "train/masked_acc", "val_acc": "val/masked_acc", "_x": "train/_x",
	} {
		if got := tensorBoardTag(key); got != want {
			t.Errorf("tensorBoardTag(%q) = %q, want %q", key, got, want)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
