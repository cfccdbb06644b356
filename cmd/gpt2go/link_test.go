package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// The README's claim: a CGO_ENABLED=0 build needs the C library (to open the CUDA libraries at
// run time) and nothing else, so it runs on any glibc Linux machine; the CUDA libraries are
// opened with dlopen, never linked.
func TestBinaryLinksOnlyTheCLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "gpt2go")
	build := exec.Command(goCmd, "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	glibc := []string{"libc.so.6", "libdl.so.2", "libpthread.so.0"} // the last two are part of glibc
	if !slices.Contains(libs, "libc.so.6") {
		t.Errorf("the binary links %v, without libc.so.6: the README says it needs the C library", libs)
	}
	for _, lib := range libs {
		if !slices.Contains(glibc, lib) {
			t.Errorf("the binary links %s (all: %v); the README says it needs glibc alone", lib, libs)
		}
	}
}
