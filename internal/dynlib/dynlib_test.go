package dynlib

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The search order is $Env, $LD_LIBRARY_PATH, then Dirs; a file that is not a loadable library
// is tried and reported, and the error is one line naming the library, the file, the folders, the
// variable and what to install.
func TestSearchOrderAndError(t *testing.T) {
	envDir, ldDir, extra := t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv("GPT2GO_TEST_LIBS", envDir)
	t.Setenv("LD_LIBRARY_PATH", ldDir)
	fake := filepath.Join(extra, "libfrobnicate.so.7")
	if err := os.WriteFile(fake, []byte("not an ELF file"), 0o755); err != nil {
		t.Fatal(err)
	}
	lib := Library{What: "the frobnicator", Names: []string{"libfrobnicate.so.7"}, Install: "install frob-dev",
		Env: "GPT2GO_TEST_LIBS", Dirs: func() []string { return []string{extra, envDir} }}
	if got, want := lib.SearchDirs(), []string{envDir, ldDir, extra}; strings.Join(got, ":") != strings.Join(want, ":") {
		t.Fatalf("SearchDirs = %v, want %v (deduplicated, env first)", got, want)
	}
	if got := lib.Candidates(); len(got) != 2 || got[0] != fake || got[1] != "libfrobnicate.so.7" {
		t.Fatalf("Candidates = %v, want the file in %s, then the bare soname", got, extra)
	}
	_, _, err := lib.Open()
	var le *Error
	if !errors.As(err, &le) {
		t.Fatalf("want an *Error, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"the frobnicator", "libfrobnicate.so.7", "install frob-dev", "$GPT2GO_TEST_LIBS", extra, "last error"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}
