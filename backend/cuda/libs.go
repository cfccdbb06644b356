// Package cuda is the NVIDIA GPU backend. It uses no cgo: the driver API (libcuda.so.1), NVRTC and
// cuBLASLt are opened at run time with purego, so a CGO_ENABLED=0 binary runs on any Linux x86-64
// machine with an NVIDIA driver, and a machine without one gets a one-line error, not a crash.
//
// This file finds the shared libraries. Kernels are CUDA C sources embedded in the binary and
// compiled by NVRTC for the GPU at first use (nvrtc.go, kernels.go).
package cuda

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

// LibsEnv names a colon-separated list of directories searched before all others.
const LibsEnv = "GPT2GO_CUDA_LIBS"

// library describes one shared library: the file names to try, newest first, and what to install
// when none is found.
type library struct {
	what    string   // human name: "NVRTC"
	names   []string // sonames, newest first
	install string
	// companions are file patterns loaded from a candidate's folder before it: libraries it opens
	// itself later by bare name, which the loader would not look for in that folder (NVRTC's
	// builtins, when NVRTC comes from a pip wheel or a CUDA folder outside the loader's paths).
	companions []string
}

var (
	libCUDA = library{"the CUDA driver", []string{"libcuda.so.1", "libcuda.so"},
		"install the NVIDIA driver (it provides libcuda.so.1)", nil}
	libNVRTC = library{"NVRTC", []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"},
		"install NVRTC: pip install nvidia-cuda-nvrtc, the CUDA toolkit, or Debian's libnvrtc11.2 (non-free)",
		[]string{"libnvrtc-builtins.so.*"}}
	libCublasLt = library{"cuBLASLt", []string{"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so"},
		"install cuBLASLt: pip install nvidia-cublas, the CUDA toolkit, or Debian's libcublaslt11 (non-free)", nil}
)

// searchDirs lists the directories to look in, in order: $GPT2GO_CUDA_LIBS, $LD_LIBRARY_PATH, the
// CUDA toolkit's usual homes, the system library directories, and the lib folders of pip's
// nvidia-* wheels (site-packages/nvidia/*/lib), where PyTorch installs keep CUDA.
func searchDirs() []string {
	var dirs []string
	for _, env := range []string{LibsEnv, "LD_LIBRARY_PATH"} {
		for _, d := range filepath.SplitList(os.Getenv(env)) {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	dirs = append(dirs, glob("/usr/local/cuda-*/lib64")...)
	dirs = append(dirs, "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib", "/usr/lib")
	dirs = append(dirs, wheelDirs()...)
	return dedupe(dirs)
}

// wheelDirs finds site-packages/nvidia/*/lib folders: first in the usual places, then by asking
// python3 where its site-packages are (the Python that has PyTorch usually has the wheels).
func wheelDirs() []string {
	home, _ := os.UserHomeDir()
	var roots []string
	if v := os.Getenv("VIRTUAL_ENV"); v != "" {
		roots = append(roots, glob(filepath.Join(v, "lib/python3*/site-packages"))...)
	}
	if v := os.Getenv("CONDA_PREFIX"); v != "" {
		roots = append(roots, glob(filepath.Join(v, "lib/python3*/site-packages"))...)
	}
	for _, pattern := range []string{
		"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages",
		filepath.Join(home, ".local/lib/python3*/site-packages"),
	} {
		roots = append(roots, glob(pattern)...)
	}
	roots = append(roots, pythonSitePackages()...)
	var dirs []string
	for _, r := range dedupe(roots) {
		dirs = append(dirs, glob(filepath.Join(r, "nvidia/*/lib"))...)
		dirs = append(dirs, glob(filepath.Join(r, "nvidia/cu*/lib"))...) // CUDA 13 wheels: nvidia/cu13/lib
	}
	return dirs
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

func glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	slices.Sort(m)
	slices.Reverse(m) // newest version first: cuda-13.0 before cuda-12.4
	return m
}

func dedupe(dirs []string) []string {
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

// candidates lists the files to try for lib: each soname in each search directory, then each bare
// soname (the dynamic loader's own search: ld.so.cache, RPATH).
func (lib library) candidates() []string {
	var out []string
	dirs := searchDirs()
	for _, name := range lib.names {
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
			}
		}
	}
	return append(out, lib.names...)
}

// LibError says that a library could not be loaded: what was searched and what to install.
type LibError struct {
	What     string
	Tried    []string // the files and names tried
	LastErr  error
	Install  string
	Searched []string // the directories searched
}

func (e *LibError) Error() string {
	last := ""
	if e.LastErr != nil {
		last = fmt.Sprintf(" (last error: %v)", e.LastErr)
	}
	return fmt.Sprintf("cannot load %s: tried %s in %s, $%s and the loader's default paths%s; %s, or point %s at the folder that has it",
		e.What, strings.Join(dedupe(baseNames(e.Tried)), ", "), shortList(e.Searched, 6), LibsEnv, last, e.Install, LibsEnv)
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

// open loads lib, returning its handle and the path that worked.
func (lib library) open() (uintptr, string, error) {
	tried := lib.candidates()
	var last error
	for _, path := range tried {
		if filepath.IsAbs(path) {
			for _, pattern := range lib.companions {
				for _, c := range glob(filepath.Join(filepath.Dir(path), pattern)) {
					_, _ = purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL) // best effort: NVRTC reports what it misses
				}
			}
		}
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, path, nil
		}
		last = err
	}
	return 0, "", &LibError{What: lib.what, Tried: tried, LastErr: last, Install: lib.install, Searched: searchDirs()}
}

// symbols resolves the named functions of an opened library into the given pointers.
func symbols(lib library, h uintptr, syms map[string]*uintptr) error {
	for name, dst := range syms {
		p, err := purego.Dlsym(h, name)
		if err != nil {
			return fmt.Errorf("%s lacks %s (too old? %s): %v", lib.what, name, lib.install, err)
		}
		*dst = p
	}
	return nil
}
