package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteReplacesAndFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	if err := WriteBytes(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		w.Write([]byte("partial new content"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("want boom, got %v", err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Fatalf("failed write changed the file: %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp file left behind: %v", entries)
	}
	if err := WriteBytes(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Fatalf("got %q", got)
	}
}

// A file in a folder that does not exist yet gets the folder, and mode 0644 less the umask; one
// under a regular file fails.
func TestWriteCreatesTheFolder(t *testing.T) {
	old := syscall.Umask(0o022) // the machine's own may be 077
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "new", "sub", "f.bin")
	if err := WriteBytes(path, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
		t.Fatalf("read back %q, %v", b, err)
	}
	mode := func(p string) os.FileMode {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	if err := WriteBytes(path, []byte("x")); err != nil || mode(path) != 0o644 {
		t.Errorf("mode %v (%v) under umask 022, want 0644", mode(path), err)
	}
	// A replaced file keeps its mode; a new one follows the umask.
	os.Chmod(path, 0o600)
	if err := WriteBytes(path, []byte("z")); err != nil || mode(path) != 0o600 {
		t.Errorf("a 0600 file became %v (%v) when replaced", mode(path), err)
	}
	syscall.Umask(0o077)
	private := filepath.Join(dir, "private.bin")
	if err := WriteBytes(private, []byte("p")); err != nil || mode(private) != 0o600 {
		t.Errorf("mode %v (%v) under umask 077, want 0600", mode(private), err)
	}
	if err := WriteBytes(filepath.Join(path, "g.bin"), []byte("y")); err == nil {
		t.Error("a file under a regular file was written")
	}
}

// A full disk or a read-only file system is said with what to do, and the error names the file,
// not the temp file it was being written as.
func TestWriteSaysWhatToDoAboutTheDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.bin")
	err := Write(path, func(w io.Writer) error { return &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC} })
	if err == nil || !strings.Contains(err.Error(), "write "+path) || !strings.Contains(err.Error(), "the disk is full: free space on it, or write elsewhere") {
		t.Errorf("ENOSPC: %v", err)
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{syscall.EDQUOT, "the disk quota is used up"}, {fmt.Errorf("x: %w", syscall.EROFS), "read-only: write elsewhere"}, {errors.New("other"), ""},
	} {
		if got := Hint(c.err); c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("Hint(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
