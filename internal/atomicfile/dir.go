package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// rename is os.Rename; tests make it fail.
var rename = os.Rename

// WriteDir creates or replaces the folder dir's files with those fill writes into an empty
// staging folder (the path it is given), so that dir holds either its old files or all the new
// ones, never a mix: a multi-file output (an export's weights beside its config) that a failure
// half-way must not leave half-replaced. owns names the entries of an existing dir that the
// output replaces (fill writes only such names); the old ones that fill does not write again
// are removed, and everything else in dir is left alone.
//
// A new dir is staged in a sibling folder renamed into place, and the parent folder fsynced. An
// existing one is kept (its inode, owner, permissions, a mount on it, a shell inside it): the
// staging folder is made inside it and the entries are moved one at a time, the old ones aside
// first; if a move fails, every moved entry goes back.
// On any error dir keeps its old files and no staging folder is left behind. A symbolic link
// at dir keeps pointing at the folder that now holds the new files.
func WriteDir(dir string, owns func(name string) bool, fill func(staging string) error) (err error) {
	if st, err := os.Lstat(dir); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		if dir, err = filepath.EvalSymlinks(dir); err != nil {
			return err
		}
	}
	if dir, err = filepath.Abs(dir); err != nil { // --out . has a parent to stage beside
		return err
	}
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create the folder of %s: %w", dir, err)
	}
	old, err := os.Stat(dir)
	exists := err == nil
	if exists && !old.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var staging string
	var release func()
	if exists {
		RemoveAbandoned(dir, ".new-")
		staging, release, err = MkdirTemp(dir, ".new-")
	} else {
		RemoveAbandoned(parent, "."+base+".tmp-")
		staging, release, err = MkdirTemp(parent, "."+base+".tmp-")
	}
	if err != nil {
		return fmt.Errorf("create a staging folder for %s: %w%s", dir, unwrapPath(err), Hint(err))
	}
	defer release()
	defer func() {
		if err != nil {
			os.RemoveAll(staging)
		}
	}()
	if err = fill(staging); err != nil {
		return err
	}
	if err = SyncDir(staging); err != nil {
		return err
	}
	if exists {
		if err = swapEntries(dir, staging, owns); err == nil {
			// The old files of a swap that a crash cut short: the new ones replace them all.
			RemoveAbandoned(dir, ".old-")
		}
		return err
	}
	if err = rename(staging, dir); err != nil {
		return fmt.Errorf("rename %s into %s: %w", staging, dir, err)
	}
	return SyncDir(parent)
}

// swapEntries moves dir's owned entries into a folder aside in dir, then staging's entries
// into dir, and removes the old ones and staging; a failed move puts every moved entry back.
func swapEntries(dir, staging string, owns func(string) bool) error {
	aside, release, err := MkdirTemp(dir, ".old-")
	if err != nil {
		return fmt.Errorf("replace the files of %s: %w", dir, err)
	}
	defer release()
	entries, err := os.ReadDir(dir)
	if err != nil {
		os.Remove(aside)
		return err
	}
	var old []string
	for _, e := range entries {
		if n := e.Name(); owns(n) && n != filepath.Base(staging) && n != filepath.Base(aside) {
			old = append(old, n)
		}
	}
	fresh, err := os.ReadDir(staging)
	if err != nil {
		os.Remove(aside)
		return err
	}
	var names []string
	for _, e := range fresh {
		names = append(names, e.Name())
	}
	moved, err := moveEntries(dir, aside, old)
	if err == nil {
		var in []string
		if in, err = moveEntries(staging, dir, names); err != nil {
			if _, rerr := moveEntries(dir, staging, in); rerr != nil {
				return fmt.Errorf("replace the files of %s: %w; some new files could not be moved out again (%v); the old ones are in %s", dir, err, rerr, aside)
			}
		}
	}
	if err != nil {
		if _, rerr := moveEntries(aside, dir, moved); rerr != nil {
			return fmt.Errorf("replace the files of %s: %w; the old files are split between %s and %s (%v)", dir, err, dir, aside, rerr)
		}
		os.Remove(aside)
		return fmt.Errorf("replace the files of %s: %w; it holds the old files still", dir, err)
	}
	serr := SyncDir(dir)
	os.RemoveAll(aside)
	os.Remove(staging)
	return serr
}

// moveEntries renames names from folder from into folder to, stopping at the first failure,
// and returns the names it moved.
func moveEntries(from, to string, names []string) ([]string, error) {
	for i, n := range names {
		if err := rename(filepath.Join(from, n), filepath.Join(to, n)); err != nil {
			return names[:i], fmt.Errorf("move %s into %s: %w", n, to, err)
		}
	}
	return names, nil
}
