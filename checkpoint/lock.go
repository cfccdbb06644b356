package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpt2go/gpt2go/data"
)

// lockFile is the run directory's writer lock. Readers (sample, eval, plot, report) never take it.
const lockFile = ".lock"

// RunLock is the exclusive right to write a run directory: its log, its checkpoints and their
// pruning. It is an flock(2) on RUNDIR/.lock, so the operating system releases it when the
// holder exits, however it exits: a kill -9 never leaves a stale lock behind. The file itself
// stays, holding the last holder's pid and host for the message a second writer gets.
type RunLock struct{ f *os.File }

// NotDataset refuses dir as a run directory when it is a prepared dataset (train --out or
// --resume DATASET, which took it for a run).
func NotDataset(dir string) error {
	if data.IsPrepared(dir) {
		return fmt.Errorf("%s is a prepared dataset (meta.json and shards), not a run directory; pass it as --data, and a run's folder as --out or --resume", dir)
	}
	return nil
}

// LockRunDir takes the writer lock of runDir, creating the directory if needed. When another
// process holds it, the error names that process (pid and host) and says what to do. A prepared
// dataset is refused before anything is written into it: a run would mix its files with the
// shards, and the .lock left behind made prepare refuse to replace the dataset.
func LockRunDir(runDir string) (*RunLock, error) {
	if err := NotDataset(runDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	path := filepath.Join(runDir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the run directory's lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = strings.TrimSpace(string(b))
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("run directory %s is being written by %s; wait for that run to finish or stop it (sample, eval, plot and report can read the run meanwhile)", runDir, holder)
		}
		return nil, fmt.Errorf("lock run directory %s: %w", runDir, err)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "an unknown host"
	}
	// Best effort: the lock holds without the note, which only serves the message above.
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d on %s\n", os.Getpid(), host)
		f.Sync()
	}
	return &RunLock{f: f}, nil
}

// Release gives the lock up; the run directory can then be written by another process. A nil
// RunLock and a second Release do nothing.
func (l *RunLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
	l.f = nil
}
