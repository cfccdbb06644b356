package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoCheckpoint is wrapped by LoadLatest's error when the run directory has no checkpoints at
// all, which for a trainer means "start from scratch" rather than "something is broken".
var ErrNoCheckpoint = errors.New("no checkpoints")

// ErrNoneUsable is wrapped by LoadLatest's error when the run has checkpoints but every one is
// damaged.
var ErrNoneUsable = errors.New("no usable checkpoint")

// Dir is the directory holding a run's checkpoints: RUNDIR/checkpoints.
func Dir(runDir string) string { return filepath.Join(runDir, "checkpoints") }

// Path is where the checkpoint of the given step lives: RUNDIR/checkpoints/step_%08d.safetensors.
func Path(runDir string, step int) string {
	return filepath.Join(Dir(runDir), fileName(step))
}

func fileName(step int) string { return fmt.Sprintf("step_%08d.safetensors", step) }

// parseFileName returns the step of a checkpoint file name, and false for anything Path would not
// have produced (temp files, other files, non-canonical numbers).
func parseFileName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "step_")
	if !ok {
		return 0, false
	}
	if digits, ok = strings.CutSuffix(digits, ".safetensors"); !ok {
		return 0, false
	}
	step, err := strconv.Atoi(digits)
	if err != nil || step < 0 || fileName(step) != name {
		return 0, false
	}
	return step, true
}

// Entry is one checkpoint file of a run directory.
type Entry struct {
	Step int
	Path string
}

// List returns the run's checkpoint files sorted by step, oldest first, without opening them.
// A run directory without a checkpoints directory has none.
func List(runDir string) ([]Entry, error) {
	dirEntries, err := os.ReadDir(Dir(runDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var entries []Entry
	for _, de := range dirEntries {
		if step, ok := parseFileName(de.Name()); ok && !de.IsDir() {
			entries = append(entries, Entry{Step: step, Path: filepath.Join(Dir(runDir), de.Name())})
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return a.Step - b.Step })
	return entries, nil
}

// LoadLatest loads the newest checkpoint of the run that loads and verifies, and returns it with
// its path. Newer checkpoints that are damaged (ErrCorrupt, ErrNotCheckpoint) are skipped, never
// deleted, and each is returned in warnings for the caller to print after "skipping "
// ("checkpoint PATH, which is corrupt (...)"); any other failure (a newer format, a file that
// cannot be read) is the error. It is an error if no checkpoint is usable; the error wraps
// ErrNoCheckpoint when there are none at all.
func LoadLatest(runDir string) (c *Checkpoint, path string, warnings []error, err error) {
	return loadLatest(runDir, Load)
}

// LoadLatestWeights is LoadLatest with LoadWeights: the newest good checkpoint's weights.
func LoadLatestWeights(runDir string) (c *Checkpoint, path string, warnings []error, err error) {
	return loadLatest(runDir, LoadWeights)
}

// LoadLatestVerified is LoadLatest with Verify: the newest good checkpoint, verified, whose
// arrays ReadParams and ReadMoments read.
func LoadLatestVerified(runDir string) (c *Checkpoint, path string, warnings []error, err error) {
	return loadLatest(runDir, Verify)
}

func loadLatest(runDir string, load func(string) (*Checkpoint, error)) (c *Checkpoint, path string, warnings []error, err error) {
	entries, err := List(runDir)
	if err != nil {
		return nil, "", nil, err
	}
	if len(entries) == 0 {
		return nil, "", nil, fmt.Errorf("%w in %s", ErrNoCheckpoint, Dir(runDir))
	}
	for _, e := range slices.Backward(entries) {
		c, err := load(e.Path)
		if err == nil && c.Step != e.Step {
			c.Close()
			err = &loadError{path: e.Path, problem: fmt.Sprintf("holds step %d, not the step its name says", c.Step), kind: ErrCorrupt}
		}
		if err != nil {
			// Only a damaged file (or one gone since the listing: another rank set it aside) is
			// passed over for an older one. A newer format (upgrade gpt2go) or a file that
			// cannot be read now (permissions, I/O) is the run's newest state still: going back
			// past it would train over it.
			gone := errors.Is(err, fs.ErrNotExist) || (errors.Is(err, syscall.ESTALE) && !present(e.Path)) // (over NFS)
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotCheckpoint) && !gone {
				return nil, "", warnings, err
			}
			warnings = append(warnings, passedOver(err))
			continue
		}
		return c, e.Path, warnings, nil
	}
	return nil, "", warnings, fmt.Errorf("%w in %s: all %d are damaged or gone (the warnings say why)", ErrNoneUsable, Dir(runDir), len(entries))
}

// passedOverError is a checkpoint LoadLatest passed over, worded for the warning its callers
// print, "skipping " and the error: "checkpoint PATH, which is corrupt (...)", without the advice
// to use an older checkpoint, which LoadLatest takes itself.
type passedOverError struct{ *loadError }

func (e passedOverError) Error() string { return "checkpoint " + e.path + ", which " + e.problem }

// passedOver is err (a load error) as LoadLatest's warning about the checkpoint it passed over.
func passedOver(err error) error {
	var le *loadError
	if errors.As(err, &le) {
		return passedOverError{le}
	}
	return err
}

// Prune deletes all but the newest keep checkpoints of the run up to step saved, the one just
// saved (keep <= 0 keeps all). Step 0, the initial model, is never deleted and does not count
// towards keep; nor do files of later steps (left by a run that went back past them), which
// are not deleted either, so saved itself always stays.
func Prune(runDir string, keep, saved int) error {
	if keep <= 0 {
		return nil
	}
	entries, err := List(runDir)
	if err != nil {
		return err
	}
	entries = slices.DeleteFunc(entries, func(e Entry) bool { return e.Step == 0 || e.Step > saved })
	var errs []error
	for _, e := range entries[:max(len(entries)-keep, 0)] {
		if err := os.Remove(e.Path); err != nil {
			errs = append(errs, fmt.Errorf("prune checkpoints: %w", err))
		}
	}
	return errors.Join(errs...)
}

// SetAside renames the checkpoints of steps after step (the damaged ones a resume from step
// passed over) to NAME.unusable, out of List's sight: they no longer shadow the checkpoints the
// resumed run writes, nor count when they are pruned, and they stay for a person to look at.
// Call it with the run locked. It returns the new names.
func SetAside(runDir string, step int) ([]string, error) {
	entries, err := List(runDir)
	if err != nil {
		return nil, err
	}
	var moved []string
	for _, e := range entries {
		if e.Step <= step {
			continue
		}
		aside := e.Path + ".unusable"
		for i := 2; present(aside); i++ { // an earlier one set aside stays too
			aside = fmt.Sprintf("%s.unusable-%d", e.Path, i)
		}
		if err := os.Rename(e.Path, aside); err != nil {
			return moved, fmt.Errorf("set aside the unusable %s: %w", e.Path, err)
		}
		moved = append(moved, aside)
	}
	return moved, nil
}

// present reports whether something is at path.
func present(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// RunLog is the training log of the run in dir: the --log file its run.json records (log_file),
// else RUNDIR/log.jsonl. A run from before gpt2go recorded --log as an absolute path may hold a
// relative one, relative to a working directory no longer known: that is an error saying so.
func RunLog(dir string) (string, error) {
	var run struct {
		LogFile string `json:"log_file"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil || json.Unmarshal(b, &run) != nil || run.LogFile == "" {
		return filepath.Join(dir, "log.jsonl"), nil
	}
	if !filepath.IsAbs(run.LogFile) {
		return "", fmt.Errorf("the run in %s logged to --log %s, a path relative to where it was started; pass that log file itself", dir, run.LogFile)
	}
	return run.LogFile, nil
}
