package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One writer at a time: a second lock on the same run directory is refused with the holder's pid
// and host, and succeeds once the first is released. (flock locks belong to an open file, so two
// locks in one process conflict as two processes' would.)
func TestLockRunDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	first, err := LockRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockRunDir(dir)
	want := fmt.Sprintf("is being written by pid %d on ", os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("second lock: err = %v, want one line containing %q", err, want)
	}
	first.Release()
	first.Release() // a second Release is harmless
	second, err := LockRunDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	second.Release()
	var none *RunLock
	none.Release()
}

// A prepared dataset is no run directory: locking it is refused, and no .lock is left in it
// (prepare would then refuse to replace the dataset).
func TestLockRunDirRefusesDataset(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"meta.json", "train_000000.bin"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := LockRunDir(dir)
	if err == nil || !strings.Contains(err.Error(), "is a prepared dataset") {
		l.Release()
		t.Fatalf("lock of a dataset: err = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, lockFile)); err == nil {
		t.Error("the refused lock left a .lock in the dataset")
	}
}
