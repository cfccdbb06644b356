package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/safetensors"
)

// saveSteps saves a tiny checkpoint for each step into runDir.
func saveSteps(t *testing.T, runDir string, steps ...int) {
	t.Helper()
	for _, step := range steps {
		c := testCheckpoint(false)
		c.Step = step
		if err := Save(Path(runDir, step), c); err != nil {
			t.Fatal(err)
		}
	}
}

func listSteps(t *testing.T, runDir string) []int {
	t.Helper()
	entries, err := List(runDir)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, e := range entries {
		if e.Path != Path(runDir, e.Step) {
			t.Errorf("entry %+v: path is not Path(runDir, %d)", e, e.Step)
		}
		steps = append(steps, e.Step)
	}
	return steps
}

func TestPath(t *testing.T) {
	if got, want := Path("runs/a", 1500), filepath.Join("runs/a", "checkpoints", "step_00001500.safetensors"); got != want {
		t.Fatalf("Path = %q, want %q", got, want)
	}
	if got := filepath.Base(Path("r", 123456789)); got != "step_123456789.safetensors" {
		t.Fatalf("9-digit step: %q", got)
	}
}

func TestListIgnoresForeignFiles(t *testing.T) {
	run := t.TempDir()
	if steps := listSteps(t, run); steps != nil {
		t.Fatalf("run without a checkpoints dir: %v", steps)
	}
	saveSteps(t, run, 2000, 0, 123456789, 500)
	for _, name := range []string{
		".step_00003000.safetensors.tmp-12345", // a save in progress, or a crashed one
		"step_3000.safetensors",                // not zero-padded: not ours
		"step_000003000.safetensors",           // padded beyond 8 digits: not ours
		"step_-0000001.safetensors",
		"step_00004000.safetensors.bak",
		"notes.txt",
	} {
		os.WriteFile(filepath.Join(Dir(run), name), []byte("x"), 0o644)
	}
	os.Mkdir(filepath.Join(Dir(run), "step_00005000.safetensors"), 0o755)
	if got, want := listSteps(t, run), []int{0, 500, 2000, 123456789}; !reflect.DeepEqual(got, want) {
		t.Fatalf("List steps %v, want %v", got, want)
	}
}

func TestLoadLatest(t *testing.T) {
	run := t.TempDir()
	if _, _, _, err := LoadLatest(run); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty run: %v", err)
	}
	saveSteps(t, run, 0, 100, 200)
	c, path, warnings, err := LoadLatest(run)
	if err != nil || c.Step != 200 || path != Path(run, 200) || warnings != nil {
		t.Fatalf("LoadLatest = step %v, %q, %v, %v", c, path, warnings, err)
	}

	// Corrupt the newest: flip a data byte. Then also truncate the next one.
	newest := Path(run, 200)
	b, _ := os.ReadFile(newest)
	b[len(b)-1] ^= 1
	os.WriteFile(newest, b, 0o644)
	c, path, warnings, err = LoadLatest(run)
	if err != nil || c.Step != 100 || path != Path(run, 100) {
		t.Fatalf("LoadLatest with a corrupt newest = %v, %q, %v", c, path, err)
	}
	// The warning reads after the callers' "skipping ", without advice LoadLatest took itself.
	if want := "checkpoint " + newest + ", which is corrupt (checksum mismatch)"; len(warnings) != 1 || warnings[0].Error() != want || !errors.Is(warnings[0], ErrCorrupt) {
		t.Fatalf("warnings %v, want %q", warnings, want)
	}
	if _, err := os.Stat(newest); err != nil {
		t.Fatalf("the corrupt checkpoint was removed: %v", err)
	}
	// LoadLatestWeights skips it alike; a checkpoint with moments loads without them.
	c = testCheckpoint(true)
	c.Step = 150
	if err := Save(Path(run, 150), c); err != nil {
		t.Fatal(err)
	}
	c, path, warnings, err = LoadLatestWeights(run)
	if err != nil || c.Step != 150 || path != Path(run, 150) || len(warnings) != 1 || c.M != nil || c.V != nil || len(c.Params) == 0 {
		t.Fatalf("LoadLatestWeights = %+v, %q, %v, %v", c, path, warnings, err)
	}
	os.Remove(Path(run, 150))

	os.Truncate(Path(run, 100), 100)
	// A file whose name and content disagree about the step is skipped too.
	os.Rename(Path(run, 0), Path(run, 50))
	_, _, warnings, err = LoadLatest(run)
	if err == nil || !errors.Is(err, ErrNoneUsable) || !strings.Contains(err.Error(), "all 3 are damaged") || errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("LoadLatest with all broken: %v", err)
	}
	if len(warnings) != 3 || !strings.Contains(warnings[1].Error(), ", which is truncated (") || strings.Contains(warnings[1].Error(), "older") ||
		!strings.Contains(warnings[2].Error(), ", which holds step 0, not the step its name says") {
		t.Fatalf("warnings %q", warnings)
	}
}

func TestPrune(t *testing.T) {
	tests := []struct {
		name  string
		steps []int
		keep  int
		want  []int
	}{
		{"keep 2", []int{0, 100, 200, 300, 400}, 2, []int{0, 300, 400}},
		{"keep 1", []int{0, 100, 200}, 1, []int{0, 200}},
		{"keep 0 keeps all", []int{0, 100, 200}, 0, []int{0, 100, 200}},
		{"negative keeps all", []int{0, 100, 200}, -1, []int{0, 100, 200}},
		{"keep more than there are", []int{0, 100}, 5, []int{0, 100}},
		{"only step 0", []int{0}, 1, []int{0}},
		{"no step 0", []int{100, 200, 300}, 1, []int{300}},
		{"empty run", nil, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := t.TempDir()
			saveSteps(t, run, tt.steps...)
			tmp := filepath.Join(Dir(run), ".step_00000500.safetensors.tmp-1")
			if tt.steps != nil {
				os.WriteFile(tmp, nil, 0o644)
			}
			if err := Prune(run, tt.keep, 1<<30); err != nil {
				t.Fatal(err)
			}
			if got := listSteps(t, run); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("after Prune(%d): %v, want %v", tt.keep, got, tt.want)
			}
			if _, err := os.Stat(tmp); tt.steps != nil && err != nil {
				t.Fatal("Prune removed a file that is not a checkpoint")
			}
		})
	}
}

// withVersion rewrites the checkpoint at path as one of format version v (its header checksum
// made again), as a newer gpt2go would write it.
func withVersion(t *testing.T, path string, v int) {
	t.Helper()
	h, err := safetensors.ReadFileHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	specs := make([]safetensors.Spec, len(h.Tensors))
	for i, ti := range h.Tensors {
		specs[i] = ti.Spec()
	}
	meta := maps.Clone(h.Metadata)
	meta[keyVersion] = strconv.Itoa(v)
	b = bytes.Replace(b, []byte(fmt.Sprintf("%q:%q", keyVersion, h.Metadata[keyVersion])), []byte(fmt.Sprintf("%q:%q", keyVersion, meta[keyVersion])), 1)
	b = bytes.Replace(b, []byte(h.Metadata[keyHeaderCRC]), []byte(fmt.Sprintf("%08x", headerCRC(meta, specs))), 1)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Resume goes back past a damaged checkpoint, not past one of a newer format: that one is the
// run's newest state, which an older gpt2go must not train over.
func TestLoadLatestStopsAtNewerVersion(t *testing.T) {
	run := t.TempDir()
	saveSteps(t, run, 0, 100)
	withVersion(t, Path(run, 100), Version+1)
	if _, err := Load(Path(run, 100)); !errors.Is(err, ErrTooNew) {
		t.Fatalf("the rewritten file: %v, want ErrTooNew", err)
	}
	_, _, _, err := LoadLatest(run)
	if !errors.Is(err, ErrTooNew) || !strings.Contains(err.Error(), "upgrade gpt2go") {
		t.Fatalf("LoadLatest: %v, want the newer version's error", err)
	}
}

// Prune keeps the step just saved and leaves later steps (from before a resume went back past
// them) alone.
func TestPruneKeepsSaved(t *testing.T) {
	run := t.TempDir()
	saveSteps(t, run, 0, 100, 200, 300)
	if err := Prune(run, 1, 200); err != nil {
		t.Fatal(err)
	}
	if got := listSteps(t, run); !reflect.DeepEqual(got, []int{0, 200, 300}) {
		t.Fatalf("after Prune(keep 1, saved 200): %v, want [0 200 300]", got)
	}
	moved, err := SetAside(run, 200)
	if err != nil || len(moved) != 1 || moved[0] != Path(run, 300)+".unusable" {
		t.Fatalf("SetAside: %v, %v", moved, err)
	}
	if got := listSteps(t, run); !reflect.DeepEqual(got, []int{0, 200}) {
		t.Fatalf("after SetAside(200): %v, want [0 200]", got)
	}
	saveSteps(t, run, 300) // damaged again, later: the first one set aside stays
	if moved, err := SetAside(run, 200); err != nil || len(moved) != 1 || moved[0] != Path(run, 300)+".unusable-2" {
		t.Fatalf("SetAside again: %v, %v", moved, err)
	}
}

func TestRunLog(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ runJSON, want, err string }{
		{"", filepath.Join(dir, "log.jsonl"), ""},                           // no run.json
		{`{"steps": 10}`, filepath.Join(dir, "log.jsonl"), ""},              // no --log
		{`{"log_file": "/var/log/a.jsonl"}`, "/var/log/a.jsonl", ""},        // --log, absolute
		{`{"log_file": "a.jsonl"}`, "", "relative to where it was started"}, // an older run's relative --log
	} {
		os.Remove(filepath.Join(dir, "run.json"))
		if tc.runJSON != "" {
			if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(tc.runJSON), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := RunLog(dir)
		if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("run.json %q: RunLog = %q, %v; want %q, error with %q", tc.runJSON, got, err, tc.want, tc.err)
		}
	}
}
