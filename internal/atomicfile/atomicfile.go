// Package atomicfile writes files so that a reader sees either the old content or the complete new
// content, never a torn file: write to a temp file in the same directory, fsync, rename, fsync the dir.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Write creates or replaces path with what fill writes, creating its folder if need be (an
// output named in a new folder: --out results/loss.png). A new file gets mode 0644 less the
// umask, as any file a program creates; a replaced file keeps its mode. On any error the old file
// is left untouched and the temp file is removed.
func Write(path string, fill func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the folder of %s: %w%s", path, err, Hint(err))
	}
	perm, replacing := fs.FileMode(0o644), false
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() {
		perm, replacing = st.Mode().Perm(), true
	}
	prefix := "." + filepath.Base(path) + ".tmp-"
	RemoveAbandoned(dir, prefix) // a killed writer's, which can be as large as the file
	tmp, err := createTemp(dir, prefix, perm)
	if err != nil {
		return fmt.Errorf("create a file in %s for %s: %w%s", dir, filepath.Base(path), unwrapPath(err), Hint(err))
	}
	defer lock(tmp.Name())() // past the rename, which moves the lock with the file
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// The temp file's name means nothing to the user: errors name path, and say what to do
	// about a full or read-only disk.
	failed := func(what string, err error) error {
		if pe, ok := err.(*fs.PathError); ok && pe.Path == tmp.Name() {
			err = pe.Err
		}
		return fmt.Errorf("%s %s: %w%s", what, path, err, Hint(err))
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = fill(bw); err != nil {
		return failed("write", err)
	}
	if err = bw.Flush(); err != nil {
		return failed("write", err)
	}
	if replacing {
		_ = tmp.Chmod(perm) // past the umask; best effort (FAT and CIFS mounts fix modes)
	}
	if err = tmp.Sync(); err != nil {
		return failed("fsync", err)
	}
	if err = tmp.Close(); err != nil {
		return failed("close", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return failed("rename into", err)
	}
	return SyncDir(dir)
}

// Hint is what to do about err when it is a full disk, an exhausted quota or a read-only file
// system ("; ..." to append to a message), else "".
func Hint(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return "; the disk is full: free space on it, or write elsewhere"
	case errors.Is(err, syscall.EDQUOT):
		return "; the disk quota is used up: free space in it, or write elsewhere"
	case errors.Is(err, syscall.EROFS):
		return "; the file system is read-only: write elsewhere"
	}
	return ""
}

// unwrapPath drops the *fs.PathError around err, whose path is a temp name.
func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// createTemp creates a new file prefix+random in dir with mode perm (less the umask), as
// os.CreateTemp does with 0600.
func createTemp(dir, prefix string, perm fs.FileMode) (*os.File, error) {
	var f *os.File
	_, err := unusedName(dir, prefix, "temp file", func(name string) (err error) {
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		return err
	})
	return f, err
}

// MkdirTemp creates a new folder prefix+random in dir with mode 0755 less the umask, as a
// folder of outputs to share should be (os.MkdirTemp makes 0700 ones, which other users cannot
// read), and returns its path: a staging folder to rename into place. The folder is locked as
// in use until release is called (or the process ends), so that RemoveAbandoned leaves it be;
// release is a no-op after an error.
func MkdirTemp(dir, prefix string) (path string, release func(), err error) {
	path, err = unusedName(dir, prefix, "folder", func(name string) error { return os.Mkdir(name, 0o755) })
	if err != nil {
		return path, func() {}, err
	}
	return path, lock(path), nil
}

// lock marks the temp file or folder name as in use until release is called, with an
// exclusive flock that the kernel drops when the process dies however it dies. Best effort: on
// a file system without flock nothing is marked, and RemoveAbandoned removes nothing there
// either; should the open fail, the entry is only at risk once it is abandonedAge old.
func lock(name string) (release func()) {
	f, err := os.Open(name)
	if err != nil {
		return func() {}
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	return func() { f.Close() }
}

// abandonedAge is how old a temp file or folder must be before RemoveAbandoned takes it: its
// writer creates it and locks it a moment later, and this covers that moment.
var abandonedAge = time.Minute

// RemoveAbandoned deletes the temp files and staging folders dir/prefixN (N decimal digits, as
// Write, MkdirTemp and WriteDir name them) that a writer killed
// mid-write left behind (kill -9, a crash, a power cut: the data of a checkpoint or a prepared
// dataset can be gigabytes): those older than abandonedAge whose lock no live process holds.
// It returns the names it removed; failures are ignored, as the entries are litter.
func RemoveAbandoned(dir, prefix string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		// Only names unusedName makes: the prefix and the decimal digits of a random number
		// (a user's own .old-drafts in a folder being exported into is not litter).
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || strings.Trim(rest, "0123456789") != "" {
			continue
		}
		name := filepath.Join(dir, e.Name())
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < abandonedAge {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		// A lock taken is one no live writer holds; any other failure (a live writer, no
		// flock on this file system) keeps the entry.
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil && os.RemoveAll(name) == nil {
			removed = append(removed, e.Name())
		}
		f.Close()
	}
	return removed
}

// unusedName calls create with dir/prefix+random until it fails with something other than
// "exists", and returns that name.
func unusedName(dir, prefix, what string, create func(name string) error) (string, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		if err := create(name); !errors.Is(err, fs.ErrExist) {
			return name, err
		}
	}
	return "", fmt.Errorf("no unused %s name in %s", what, dir)
}

// WriteBytes is Write for content already in memory.
func WriteBytes(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// SyncDir fsyncs the folder dir, so that the renames and creations in it survive a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s for fsync: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
