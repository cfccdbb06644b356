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
