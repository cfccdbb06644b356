package atomicfile

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// age sets name's modification time d in the past.
func age(t *testing.T, name string, d time.Duration) {
	t.Helper()
	past := time.Now().Add(-d)
	if err := os.Chtimes(name, past, past); err != nil {
		t.Fatal(err)
	}
}

func entryNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// RemoveAbandoned takes the old, unlocked entries named by its prefix and digits, files and
// folders, and keeps those a live writer locks, those just made, a user's own names under the
// prefix, and everything else.
func TestRemoveAbandoned(t *testing.T) {
	dir := t.TempDir()
	prefix := ".f.bin.tmp-"
	mk := func(name string, folder bool) string {
		p := filepath.Join(dir, name)
		var err error
		if folder {
			if err = os.Mkdir(p, 0o755); err == nil {
				err = os.WriteFile(filepath.Join(p, "shard.bin"), []byte("part"), 0o644)
			}
		} else {
			err = os.WriteFile(p, []byte("part"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, name := range []string{prefix + "1", prefix + "2", "f.bin", ".g.bin.tmp-1", prefix + "3", prefix + "notes", prefix + "7x"} {
		mk(name, false)
	}
	mk(prefix+"4", true)
	live, release, err := MkdirTemp(dir, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	release2 := lock(filepath.Join(dir, prefix+"3"))
	defer release2()
	for _, name := range []string{prefix + "1", "f.bin", ".g.bin.tmp-1", prefix + "3", prefix + "4", prefix + "notes", prefix + "7x"} {
		age(t, filepath.Join(dir, name), 2*abandonedAge)
	}
	age(t, live, 2*abandonedAge) // a writer that has written nothing for a while

	removed := RemoveAbandoned(dir, prefix)
	slices.Sort(removed)
	if want := []string{prefix + "1", prefix + "4"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	want := []string{".f.bin.tmp-2", ".f.bin.tmp-3", ".f.bin.tmp-7x", ".f.bin.tmp-notes", filepath.Base(live), ".g.bin.tmp-1", "f.bin"}
	slices.Sort(want)
	if got := entryNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
	release()
	release2()
	if removed := RemoveAbandoned(dir, prefix); len(removed) != 2 {
		t.Errorf("once released, removed %v, want the two that were locked", removed)
	}
}

// A writer killed mid-write (kill -9) leaves its temp file; the next Write of the same path
// removes it once it is old, and never while the writer lives.
func TestWriteRemovesAKilledWritersTemp(t *testing.T) {
	if path := os.Getenv("ATOMICFILE_HELPER_WRITE"); path != "" {
		Write(path, func(w io.Writer) error {
			w.Write(make([]byte, 3<<20)) // past the buffer: on disk
			os.WriteFile(path+".ready", nil, 0o644)
			time.Sleep(time.Hour)
			return nil
		})
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.bin")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriteRemovesAKilledWritersTemp$")
	cmd.Env = append(os.Environ(), "ATOMICFILE_HELPER_WRITE="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path + ".ready"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the writer never wrote")
		}
	}
	temps, _ := filepath.Glob(filepath.Join(dir, ".ckpt.bin.tmp-*"))
	if len(temps) != 1 {
		t.Fatalf("temp files %v, want the writer's one", temps)
	}
	age(t, temps[0], 2*abandonedAge)
	if removed := RemoveAbandoned(dir, ".ckpt.bin.tmp-"); len(removed) != 0 {
		t.Fatalf("removed %v while its writer lives", removed)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := WriteBytes(path, []byte("next")); err != nil {
		t.Fatal(err)
	}
	if got, want := entryNames(t, dir), []string{"ckpt.bin", "ckpt.bin.ready"}; !slices.Equal(got, want) {
		t.Errorf("after the next write: %v, want %v", got, want)
	}
}
