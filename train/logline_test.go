package train

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// halfFull is a log file on a disk that takes only the first n bytes of the next write.
type halfFull struct {
	*os.File
	n int
}

func (h *halfFull) Write(p []byte) (int, error) {
	if len(p) <= h.n {
		return h.File.Write(p)
	}
	w, _ := h.File.Write(p[:h.n])
	return w, syscall.ENOSPC
}

// A log line that a full disk tears is cut back, so that the next line starts on a line of its
// own and the file stays one JSON object per line.
func TestAppendLineIsWholeOrNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := &halfFull{File: f, n: 1 << 20}
	if err := appendLine(log, []byte(`{"step": 1}`+"\n")); err != nil {
		t.Fatal(err)
	}
	log.n = 5 // the disk fills
	if err := appendLine(log, []byte(`{"step": 2}`+"\n")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a torn write: %v, want ENOSPC", err)
	}
	log.n = 1 << 20 // room again
	if err := appendLine(log, []byte(`{"step": 3}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{\"step\": 1}\n{\"step\": 3}\n" {
		t.Errorf("log %q; want steps 1 and 3 on lines of their own", b)
	}
	// A device is written as it is.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if err := appendLine(null, []byte("x\n")); err != nil {
		t.Errorf("/dev/null: %v", err)
	}
}
