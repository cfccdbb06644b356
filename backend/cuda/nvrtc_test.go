package cuda

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// RequireEnv makes tests fail instead of skipping when NVRTC is missing (CI installs it).
const requireNVRTCEnv = "GPT2GO_REQUIRE_NVRTC"

func nvrtcOrSkip(t *testing.T) *NVRTC {
	t.Helper()
	n, err := LoadNVRTC()
	if err != nil {
		if os.Getenv(requireNVRTCEnv) != "" {
			t.Fatalf("%s is set but NVRTC did not load: %v", requireNVRTCEnv, err)
		}
		t.Skipf("NVRTC not found, kernel compile checks skipped: %v", err)
	}
	return n
}

// compileArchs are the targets every kernel file must compile for: Volta (sm_70, the oldest the
// backend runs on, with fp16 but no bf16 matmuls), Turing (no cp.async), Ampere, Hopper, and
// Hopper's PTX. NVRTC 13 no longer compiles for Volta (CUDA 13 dropped sm_50 to sm_72), so
// there sm_70 is skipped, and said so.
func compileArchs(t *testing.T, n *NVRTC) []string {
	archs := []string{"sm_70", "sm_75", "sm_80", "sm_90", "compute_90"}
	if n.Major >= 13 {
		t.Logf("NVRTC %d.%d cannot target sm_70 (CUDA 13 dropped Volta): skipping it", n.Major, n.Minor)
		archs = archs[1:]
	}
	return archs
}

// Every kernel file compiles for every target arch, as a cubin and as PTX, with no warnings, and
// its PTX defines exactly the kernels the backend looks up (kernelNames: every storage variant).
func TestEveryKernelCompiles(t *testing.T) {
	n := nvrtcOrSkip(t)
	t.Logf("NVRTC %d.%d from %s", n.Major, n.Minor, n.Path)
	entry := regexp.MustCompile(`\.entry (\w+)\(`)
	files := KernelFiles()
	if len(files) < 3 {
		t.Fatalf("only %d kernel files embedded: %v", len(files), files)
	}
	for _, f := range files { // a subtest per file: -run TestEveryKernelCompiles/crossentropy
		t.Run(f, func(t *testing.T) {
			src, err := KernelSource(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, arch := range compileArchs(t, n) {
				c, err := n.Compile(src, f, arch)
				if err != nil {
					t.Errorf("%s", err)
					continue
				}
				if strings.Contains(c.Log, "warning") {
					t.Errorf("%s for %s compiles with warnings:\n%s", f, arch, c.Log)
				}
				if strings.HasPrefix(arch, "sm_") && !bytes.HasPrefix(c.Image, []byte("\x7fELF")) {
					t.Errorf("%s for %s: cubin is not an ELF image", f, arch)
				}
				if strings.HasPrefix(arch, "compute_") {
					var defined []string
					for _, m := range entry.FindAllStringSubmatch(string(c.Image), -1) {
						defined = append(defined, m[1])
					}
					want := slices.Clone(kernelNames[f])
					slices.Sort(defined)
					slices.Sort(want)
					if !slices.Equal(defined, want) {
						t.Errorf("%s defines %v, backend looks up %v", f, defined, want)
					}
				}
				t.Logf("%s for %s: ok", f, arch)
			}
		})
	}
}

// A broken kernel fails with the compiler's message, naming the file and the line.
func TestCompileErrorCarriesLog(t *testing.T) {
	n := nvrtcOrSkip(t)
	_, err := n.Compile("extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }\n", "broken.cu", "sm_80")
	if err == nil || !strings.Contains(err.Error(), "undefined_name") || !strings.Contains(err.Error(), "broken.cu") {
		t.Fatalf("want a compile error naming the identifier and file, got %v", err)
	}
}

func TestCompileCachedReusesImage(t *testing.T) {
	n := nvrtcOrSkip(t)
	t.Setenv(CacheEnv, t.TempDir())
	a, err := n.CompileCached("elementwise.cu", "sm_80")
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(cacheDir())
	if len(entries) != 1 {
		t.Fatalf("cache holds %d files after one compile, want 1", len(entries))
	}
	// Corrupting nothing, a second call must return the cached bytes exactly.
	b, err := n.CompileCached("elementwise.cu", "sm_80")
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("second compile: %v, equal %v", err, bytes.Equal(a, b))
	}
	if _, err := n.CompileCached("elementwise.cu", "sm_90"); err != nil {
		t.Fatal(err)
	}
	if entries, _ = os.ReadDir(cacheDir()); len(entries) != 2 {
		t.Fatalf("a second arch must get its own cache entry; cache holds %d files", len(entries))
	}
}

// A library that is nowhere to be found gives one line naming what was tried and what to install.
func TestMissingLibraryError(t *testing.T) {
	t.Setenv(LibsEnv, t.TempDir())
	lib := library{what: "the frobnicator", names: []string{"libfrobnicate.so.7"}, install: "install frob-dev"}
	_, _, err := lib.open()
	var le *LibError
	if !errors.As(err, &le) {
		t.Fatalf("want a LibError, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"the frobnicator", "libfrobnicate.so.7", "install frob-dev", LibsEnv} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

// GPT2GO_CUDA_LIBS comes first in the search order.
func TestSearchDirsOrder(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(LibsEnv, dir)
	if d := searchDirs(); len(d) == 0 || d[0] != dir {
		t.Fatalf("searchDirs()[0] = %v, want %s", d, dir)
	}
}

// NVRTC opens its builtins library by bare name when it compiles, and the loader does not look in
// the folder NVRTC came from: from a pip wheel or a CUDA folder off the loader's paths, every
// compile failed ("failed to open libnvrtc-builtins.so.13.0", seen on the GPU machine). Opening
// NVRTC from a folder loads the builtins from that folder first.
func TestNVRTCBuiltinsComeFromItsFolder(t *testing.T) {
	n := nvrtcOrSkip(t)
	builtins, _ := filepath.Glob(filepath.Join(filepath.Dir(n.Path), "libnvrtc-builtins.so.*"))
	if len(builtins) == 0 {
		t.Skipf("no libnvrtc-builtins.so.* beside %s", n.Path)
	}
	// Copies are new files to the loader, so they load again, from the new folder.
	dir := t.TempDir()
	for _, src := range append(builtins, n.Path) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(LibsEnv, dir)
	_, path, err := libNVRTC.open()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != dir {
		t.Fatalf("opened %s, want the copy in %s", path, dir)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	for _, b := range builtins {
		if want := filepath.Join(dir, filepath.Base(b)); !strings.Contains(string(maps), want) {
			t.Errorf("%s was not loaded before NVRTC", want)
		}
	}
}
