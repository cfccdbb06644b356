package report

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/viz"
)

func write(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestBuildFromRunDir(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "run.json", `{"steps": 4, "lr": 0.001, "model": {"n_layer": 2}}`)
	write(t, dir, "log.jsonl", `{"step":1,"loss":3.0,"lr":0.001,"grad_norm":1,"ms":10,"tok_s":100}
{"step":2,"loss":2.5,"lr":0.001,"grad_norm":1,"ms":20,"tok_s":50}
{"step":2,"val_loss":2.6}
{"step":3,"loss":2.0,"lr":0.001,"grad_norm":1,"ms":20,"tok_s":50}
{"step":3,"hellaswag_acc":0.25,"hellaswag_acc_norm":0.5}
`)
	// A resumed run sampled step 2 again: the later text wins.
	write(t, dir, "samples.txt", "---- step 2 ----\nold\n---- step 2 ----\nnew text\nline two\n---- step 3 ----\nthird\n")
	p, err := Build(Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Samples) != 2 || p.Samples[0].Text != "new text\nline two" || p.Samples[1].Step != 3 {
		t.Errorf("samples = %+v", p.Samples)
	}
	got := summaryMap(p)
	for key, want := range map[string]string{"steps done": "3 of 4", "last train loss": "2.0000", "best val loss": "2.6000 (step 2)",
		"mean throughput": "50 tok/s", "mean step time": "20.0 ms", "training time": "50ms"} {
		if got[key] != want {
			t.Errorf("summary %q = %q, want %q", key, got[key], want)
		}
	}
	if len(p.Charts) != 3 {
		t.Errorf("%d charts, want 3", len(p.Charts))
	}
	if len(p.Evals) != 2 || p.Evals[0].Key != "hellaswag_acc" {
		t.Errorf("evals = %+v", p.Evals)
	}
	if p.Profile != nil || !strings.Contains(strings.Join(p.Notes, " "), "gpt2go profile") {
		t.Errorf("a run without profile.json should say how to add one; notes %q", p.Notes)
	}
	var html bytes.Buffer
	if err := p.Render(&html); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="chart-loss"`, "<svg", "new text", "model.n_layer", "hellaswag_acc_norm"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if strings.Contains(html.String(), "<?xml") {
		t.Error("inline SVG still carries its XML header")
	}
}

// The run's profile.json (train.ProfileResult) gives the report its table and hints.
func TestBuildWithProfile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "run.json", `{"steps": 1}`)
	write(t, dir, "log.jsonl", `{"step":1,"loss":3.0,"lr":0.001,"grad_norm":1,"ms":10,"tok_s":100}`+"\n")
	write(t, dir, "profile.json", `{"version":1,"steps":2,"backend":"cpu","sync_each_op":true,"wall_ms":12.5,
"rows":[{"name":"MatmulForward","kind":"op","calls":4,"self_ms":7.5,"total_ms":7.5,"self_pct":60}],
"hints":["--n-embd 96 is not a multiple of 64: every matmul runs on ragged tiles"]}`)
	p, err := Build(Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if p.Profile == nil || p.Profile.WallMs != 12.5 || len(p.Profile.Rows) != 1 || len(p.Profile.Hints) != 1 {
		t.Fatalf("profile = %+v", p.Profile)
	}
	var html bytes.Buffer
	if err := p.Render(&html); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="profile"`, "MatmulForward", "12.5 ms recorded", "hint: --n-embd 96 is not a multiple of 64"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

func TestBuildRejectsNonRunDir(t *testing.T) {
	_, err := Build(Options{RunDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "not a run directory") {
		t.Fatalf("want a not-a-run-directory error, got %v", err)
	}
}

// A BERT run's report gives its masked-token accuracy a summary line and a chart of its own.
func TestBuildBERTRun(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "run.json", `{"arch": "bert", "steps": 3, "model": {"n_layer": 2}}`)
	write(t, dir, "log.jsonl", `{"step":1,"loss":3.0,"acc":0.1,"lr":0.001,"grad_norm":1,"ms":10,"tok_s":100}
{"step":2,"loss":2.5,"acc":0.2,"lr":0.001,"grad_norm":1,"ms":20,"tok_s":50}
{"step":2,"val_loss":2.6,"val_acc":0.25}
{"step":3,"loss":2.4,"acc":0.3,"lr":0.001,"grad_norm":1,"ms":20,"tok_s":50}
{"step":3,"val_loss":2.7,"val_acc":0.2}
`)
	p := build(t, dir)
	got := summaryMap(p)
	if got["last val masked-token accuracy"] != "0.2000" || got["best val masked-token accuracy"] != "0.2500 (step 2)" {
		t.Errorf("summary = %+v", p.Summary)
	}
	var html bytes.Buffer
	if err := p.Render(&html); err != nil {
		t.Fatal(err)
	}
	if len(p.Charts) != 4 || !strings.Contains(html.String(), `id="chart-acc"`) || !strings.Contains(html.String(), "Masked-token accuracy") {
		t.Errorf("%d charts; the accuracy chart is missing", len(p.Charts))
	}
}

// The summary's precision lines: the run's precision with its options (fp32 for a run.json from
// before mixed precision), and for fp16 the last loss scale and the steps the scaler skipped.
func TestPrecisionSummary(t *testing.T) {
	fp16Log := map[string]*viz.Series{
		"loss_scale": {Steps: []float64{1, 2, 3}, Values: []float64{65536, 32768, 32768}},
		"skipped":    {Steps: []float64{1, 2, 3}, Values: []float64{1, 0, 0}},
	}
	for _, c := range []struct {
		name string
		cfg  map[string]any
		log  map[string]*viz.Series
		want []KV
	}{
		{"old run", map[string]any{"steps": 4.0}, nil, []KV{{"precision", "fp32"}}},
		{"tf32", map[string]any{"precision": "tf32"}, nil, []KV{{"precision", "tf32"}}},
		{"bf16 default", map[string]any{"precision": "bf16", "grad_precision": "fp32", "stochastic_rounding": false}, nil,
			[]KV{{"precision", "bf16"}}},
		{"bf16 options", map[string]any{"precision": "bf16", "grad_precision": "bf16", "stochastic_rounding": true}, nil,
			[]KV{{"precision", "bf16, bf16 gradients, stochastic rounding"}}},
		{"fp16", map[string]any{"precision": "fp16", "grad_precision": "fp32"}, fp16Log,
			[]KV{{"precision", "fp16"}, {"loss scale", "32768 (1 step skipped)"}}},
	} {
		if got := precisionSummary(c.cfg, c.log); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// Build puts them in the report's summary, from run.json and log.jsonl.
	dir := t.TempDir()
	write(t, dir, "run.json", `{"steps": 3, "precision": "fp16", "grad_precision": "fp32"}`)
	write(t, dir, "log.jsonl", `{"step":1,"loss":3.0,"ms":10,"loss_scale":65536,"skipped":1}
{"step":2,"loss":2.5,"ms":10,"loss_scale":32768,"skipped":0}
{"step":3,"loss":2.0,"ms":10,"loss_scale":32768,"skipped":0}
`)
	got := summaryMap(build(t, dir))
	if got["precision"] != "fp16" || got["loss scale"] != "32768 (1 step skipped)" {
		t.Errorf("report summary precision %q, loss scale %q", got["precision"], got["loss scale"])
	}
}

// build is Build of the run in dir, which must succeed.
func build(t *testing.T, dir string) *Page {
	t.Helper()
	p, err := Build(Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// summaryMap is p's summary as a map from key to value.
func summaryMap(p *Page) map[string]string {
	got := map[string]string{}
	for _, kv := range p.Summary {
		got[kv.Key] = kv.Value
	}
	return got
}
