// Package cuda is the NVIDIA GPU backend. It uses no cgo: the driver API (libcuda.so.1), NVRTC and
// cuBLASLt are opened at run time with purego, so a CGO_ENABLED=0 binary runs on any Linux x86-64
// machine with an NVIDIA driver, and a machine without one gets a one-line error, not a crash.
//
// This file says where the shared libraries are; internal/dynlib finds and opens them. Kernels are
// CUDA C sources embedded in the binary and compiled by NVRTC for the GPU at first use (nvrtc.go,
// kernels.go).
package cuda

import (
	"path/filepath"

	"github.com/gpt2go/gpt2go/internal/dynlib"
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

// Library returns a library found by the CUDA libraries' search rules, for packages beside the
// backend that load more of NVIDIA's libraries (NCCL).
func Library(what string, names []string, install string) dynlib.Library {
	return library{what: what, names: names, install: install}.dynlib()
}

func (lib library) dynlib() dynlib.Library {
	return dynlib.Library{What: lib.what, Names: lib.names, Install: lib.install, Env: LibsEnv,
		Dirs: cudaDirs, Companions: lib.companions}
}

// searchDirs lists the directories to look in, in order: $GPT2GO_CUDA_LIBS, $LD_LIBRARY_PATH, the
// CUDA toolkit's usual homes, the system library directories, and the lib folders of pip's
// nvidia-* wheels (site-packages/nvidia/*/lib), where PyTorch installs keep CUDA.
func searchDirs() []string { return libCUDA.dynlib().SearchDirs() }

// cudaDirs are the folders after the environment's: the toolkit, the system, the wheels.
func cudaDirs() []string {
	dirs := []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"}
	dirs = append(dirs, dynlib.Glob("/usr/local/cuda-*/lib64")...)
	dirs = append(dirs, dynlib.SystemDirs()...)
	return append(dirs, wheelDirs(dynlib.SitePackages())...)
}

// wheelDirs finds the site-packages/nvidia/*/lib folders under each Python root.
func wheelDirs(roots []string) []string {
	var dirs []string
	for _, r := range roots {
		dirs = append(dirs, dynlib.Glob(filepath.Join(r, "nvidia/*/lib"))...)
		dirs = append(dirs, dynlib.Glob(filepath.Join(r, "nvidia/cu*/lib"))...) // CUDA 13 wheels: nvidia/cu13/lib
	}
	return dirs
}

// LibError says that a library could not be loaded: what was searched and what to install.
type LibError = dynlib.Error

// open loads lib, returning its handle and the path that worked.
func (lib library) open() (uintptr, string, error) { return lib.dynlib().Open() }

// symbols resolves the named functions of an opened library into the given pointers.
func symbols(lib library, h uintptr, syms map[string]*uintptr) error {
	return lib.dynlib().Symbols(h, syms)
}
