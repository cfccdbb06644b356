package atomicfile

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readTree returns the files of dir (one level) and their contents.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		m[e.Name()] = string(b)
	}
	return m
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// WriteDir over an earlier output: a fill that fails half-way, or a rename of the swap that
// fails, leaves the old files as they were and no staging or aside folder; a success replaces
// the owned files all together (an owned file not written again goes) and keeps the others.
// The files are moved one at a time, the folder itself kept, with and without other files.
func TestWriteDirAllOrNothing(t *testing.T) {
	owns := func(name string) bool { return name == "model" || name == "config" || name == "vocab" }
	for _, tc := range []struct {
		name    string
		extra   map[string]string // other files in the folder
		renames int               // in a replace: each old file aside, each new one in
	}{
		{name: "its own files", renames: 5},
		{name: "other files", extra: map[string]string{"README.md": "mine"}, renames: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(r func(string, string) error) { rename = r }(rename)
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			old := map[string]string{"model": "old weights", "config": "old config", "vocab": "old vocab"}
			maps.Copy(old, tc.extra)
			if err := WriteDir(dir, owns, func(staging string) error {
				writeFiles(t, staging, map[string]string{"model": "old weights", "config": "old config", "vocab": "old vocab"})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			writeFiles(t, dir, tc.extra)
			folder, _ := os.Stat(dir) // kept: a shell inside it, a mount on it
			check := func(when string) {
				t.Helper()
				if got := readTree(t, dir); !maps.Equal(got, old) {
					t.Errorf("%s: the folder holds %v, want the old %v", when, got, old)
				}
				if names := slices.Collect(maps.Keys(readTree(t, parent))); !slices.Equal(names, []string{"out"}) {
					t.Errorf("%s: left beside the folder: %v", when, names)
				}
			}
			boom := errors.New("boom")
			newFiles := func(staging string) error {
				writeFiles(t, staging, map[string]string{"model": "new weights"})
				if _, err := os.Stat(filepath.Join(dir, "config")); err != nil {
					t.Errorf("the old config is gone while the new files are written: %v", err)
				}
				writeFiles(t, staging, map[string]string{"config": "new config"})
				return nil
			}
			err := WriteDir(dir, owns, func(staging string) error {
				writeFiles(t, staging, map[string]string{"model": "new weights"})
				return boom // half-way: no config yet
			})
			if !errors.Is(err, boom) {
				t.Fatalf("got %v, want the fill's error", err)
			}
			check("a fill that fails half-way")
			// The nth rename of the swap fails, for each n until none is left to fail: the
			// last try replaces the files.
			nth := 1
			for ; ; nth++ {
				n := 0
				rename = func(from, to string) error {
					if n++; n == nth {
						return errors.New("rename refused")
					}
					return os.Rename(from, to)
				}
				err := WriteDir(dir, owns, newFiles)
				if err == nil {
					break
				}
				if !strings.Contains(err.Error(), "rename refused") {
					t.Fatalf("rename %d failing: got %v", nth, err)
				}
				check(fmt.Sprintf("rename %d of %d failing", nth, n))
			}
			if nth-1 != tc.renames {
				t.Errorf("the replace took %d renames, want %d", nth-1, tc.renames)
			}
			want := map[string]string{"model": "new weights", "config": "new config"}
			maps.Copy(want, tc.extra)
			if got := readTree(t, dir); !maps.Equal(got, want) {
				t.Errorf("after the replace the folder holds %v, want %v", got, want)
			}
			if st, err := os.Stat(dir); err != nil || !os.SameFile(st, folder) {
				t.Errorf("the folder was replaced, not its files: %v", err)
			}
			if names := slices.Collect(maps.Keys(readTree(t, parent))); !slices.Equal(names, []string{"out"}) {
				t.Errorf("left beside the folder: %v", names)
			}
		})
	}
}

// What a killed WriteDir leaves, a staging folder beside a new folder or inside an existing
// one, and the old files set aside mid-swap, goes with the next WriteDir of that folder.
func TestWriteDirRemovesAKilledWritersFolders(t *testing.T) {
	owns := func(name string) bool { return name == "model" }
	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	leave := func(folder string) {
		if err := os.MkdirAll(folder, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, folder, map[string]string{"model": "part"})
		age(t, folder, 2*abandonedAge)
	}
	fill := func(staging string) error {
		writeFiles(t, staging, map[string]string{"model": "weights"})
		return nil
	}
	leave(filepath.Join(parent, ".out.tmp-1"))
	if err := WriteDir(dir, owns, fill); err != nil {
		t.Fatal(err)
	}
	if got := entryNames(t, parent); !slices.Equal(got, []string{"out"}) {
		t.Errorf("beside a new folder: %v, want out alone", got)
	}
	leave(filepath.Join(dir, ".new-2"))
	leave(filepath.Join(dir, ".old-3"))
	leave(filepath.Join(dir, ".old-drafts")) // the user's
	if err := WriteDir(dir, owns, fill); err != nil {
		t.Fatal(err)
	}
	if got := entryNames(t, dir); !slices.Equal(got, []string{".old-drafts", "model"}) {
		t.Errorf("in a replaced folder: %v, want the user's .old-drafts and model", got)
	}
}
