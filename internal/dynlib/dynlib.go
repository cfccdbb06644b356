// Package dynlib finds and opens shared libraries at run time with purego (no cgo): the CUDA
// libraries (backend/cuda), NCCL (dist/nccl) and MPI (dist/mpi) all use it, so they share one
// search order and one "not found" message.
//
// A Library is searched for in its environment variable's folders first, then $LD_LIBRARY_PATH,
// then the folders its Dirs function lists, and last by bare soname (the dynamic loader's own
// search: ld.so.cache, RPATH). A library that cannot be loaded is an *Error, one line naming what
// was tried, where, and what to install.
package dynlib

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// Library describes one shared library: the file names to try, newest first, where to look and
// what to install when none is found.
type Library struct {
	What    string   // human name: "NVRTC"
	Names   []string // sonames, newest first
	Install string   // what to install, as a clause: "install NVRTC: pip install nvidia-cuda-nvrtc"
	// Env names a colon-separated list of folders searched before all others (GPT2GO_CUDA_LIBS).
	Env string
	// Dirs lists the folders searched after $Env and $LD_LIBRARY_PATH, in order; it may be nil.
	Dirs func() []string
	// Companions are file patterns loaded from a candidate's folder before it: libraries it opens
	// itself later by bare name, which the loader would not look for in that folder (NVRTC's
	// builtins, when NVRTC comes from a pip wheel or a CUDA folder outside the loader's paths).
	Companions []string
}

// SearchDirs lists the folders to look in, in order: $Env, $LD_LIBRARY_PATH, then lib.Dirs().
func (lib Library) SearchDirs() []string {
	var dirs []string
	for _, env := range []string{lib.Env, "LD_LIBRARY_PATH"} {
		if env == "" {
			continue
		}
		for _, d := range filepath.SplitList(os.Getenv(env)) {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	if lib.Dirs != nil {
		dirs = append(dirs, lib.Dirs()...)
	}
	return Dedupe(dirs)
}

// Candidates lists the files to try: each soname in each search folder that has it, then each
// bare soname.
func (lib Library) Candidates() []string {
	var out []string
	dirs := lib.SearchDirs()
	for _, name := range lib.Names {
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	return append(out, lib.Names...)
}

// Open loads the first candidate that loads, returning its handle and the path that worked.
func (lib Library) Open() (uintptr, string, error) {
	tried := lib.Candidates()
	var last error
	for _, path := range tried {
		if filepath.IsAbs(path) {
			for _, pattern := range lib.Companions {
				for _, c := range Glob(filepath.Join(filepath.Dir(path), pattern)) {
					_, _ = purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL) // best effort: the library reports what it misses
				}
			}
		}
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, path, nil
		}
		last = err
	}
	return 0, "", &Error{What: lib.What, Tried: tried, LastErr: last, Install: lib.Install, Env: lib.Env, Searched: lib.SearchDirs()}
}

// Symbols resolves the named symbols of an opened library into the given pointers.
func (lib Library) Symbols(h uintptr, syms map[string]*uintptr) error {
	for name, dst := range syms {
		p, err := purego.Dlsym(h, name)
		if err != nil {
			return fmt.Errorf("%s lacks %s (too old? %s): %v", lib.What, name, lib.Install, err)
		}
		*dst = p
	}
	return nil
}

// Error says that a library could not be loaded: what was searched and what to install.
type Error struct {
	What     string
	Tried    []string // the files and names tried
	LastErr  error
	Install  string
	Env      string   // the variable that adds folders
	Searched []string // the folders searched
}

func (e *Error) Error() string {
	last := ""
	if e.LastErr != nil {
		last = fmt.Sprintf(" (last error: %v)", e.LastErr)
	}
	env, point := "", ""
	if e.Env != "" {
		env, point = fmt.Sprintf(", $%s", e.Env), fmt.Sprintf(", or point %s at the folder that has it", e.Env)
	}
	return fmt.Sprintf("cannot load %s: tried %s in %s%s and the loader's default paths%s; %s%s",
		e.What, strings.Join(Dedupe(baseNames(e.Tried)), ", "), shortList(e.Searched, 6), env, last, e.Install, point)
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

func shortList(dirs []string, n int) string {
	if len(dirs) <= n {
		return strings.Join(dirs, ", ")
	}
	return fmt.Sprintf("%s and %d more folders", strings.Join(dirs[:n], ", "), len(dirs)-n)
}

// Glob returns the matches of pattern newest version first (cuda-13.0 before cuda-12.4).
func Glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	slices.Sort(m)
	slices.Reverse(m)
	return m
}

// Dedupe drops repeated folders, keeping the first of each.
func Dedupe(dirs []string) []string {
	seen := map[string]bool{}
	out := dirs[:0:0]
	for _, d := range dirs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// SystemDirs are the usual system library folders on Linux x86-64.
func SystemDirs() []string {
	return []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib", "/usr/lib"}
}

// SitePackages lists Python site-packages folders: first the usual places, then those python3
// itself reports (the Python that has PyTorch usually has the nvidia-* wheels).
func SitePackages() []string {
	home, _ := os.UserHomeDir()
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := os.Getenv(env); v != "" {
			roots = append(roots, Glob(filepath.Join(v, "lib/python3*/site-packages"))...)
		}
	}
	for _, pattern := range []string{
		"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages",
		filepath.Join(home, ".local/lib/python3*/site-packages"),
	} {
		roots = append(roots, Glob(pattern)...)
	}
	roots = append(roots, pythonSitePackages()...)
	return Dedupe(roots)
}

var (
	sitePackagesOnce sync.Once
	sitePackages     []string
)

// pythonSitePackages asks python3 for its site-packages folders, once per process.
func pythonSitePackages() []string {
	sitePackagesOnce.Do(func() {
		python, err := exec.LookPath("python3")
		if err != nil {
			return
		}
		out, err := exec.Command(python, "-c", "import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))").Output()
		if err != nil {
			return
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				sitePackages = append(sitePackages, line)
			}
		}
	})
	return sitePackages
}
