package prepare

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/data"
)

// fakeGOROOT builds a GOROOT whose src has library files, tests, testdata and vendor.
func fakeGOROOT(t *testing.T) string {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"src/fmt/print.go":             "package fmt\n",
		"src/fmt/print_test.go":        "package fmt\n// test\n",
		"src/fmt/testdata/x.go":        "package x\n",
		"src/bytes/bytes.go":           "package bytes\n",
		"src/vendor/golang.org/x/y.go": "package y\n",
		"src/cmd/go/main.go":           "package main\n",
		"src/cmd/go/README":            "not go\n",
	})
	return root
}

func TestResolveGo(t *testing.T) {
	root := fakeGOROOT(t)
	defer func(f func() []string) { findGOROOT = f }(findGOROOT)
	findGOROOT = func() []string { return []string{"/nonexistent", root} }
	cache := t.TempDir()
	dir, err := Resolve("", cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(cache, "gosrc-byte") {
		t.Fatalf("dir = %s", dir)
	}
	meta, err := data.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "src")
	// cmd/ (the toolchain) is left out; the library files come in their hashed order.
	want := []string{filepath.Join(src, "bytes/bytes.go"), filepath.Join(src, "fmt/print.go")}
	got := append([]string(nil), meta.Sources...)
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") || meta.Tokenizer != "byte" {
		t.Fatalf("sources %v tokenizer %s", meta.Sources, meta.Tokenizer)
	}
	// Second call reuses the cache: meta.json is not rewritten.
	before, _ := os.Stat(filepath.Join(dir, data.MetaFile))
	time.Sleep(10 * time.Millisecond)
	if again, err := Resolve("go", cache, nil); err != nil || again != dir {
		t.Fatalf("again: %s %v", again, err)
	}
	after, _ := os.Stat(filepath.Join(dir, data.MetaFile))
	if !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("cache was prepared again")
	}
	// A changed corpus changes the fingerprint and re-prepares.
	os.WriteFile(filepath.Join(src, "bytes/extra.go"), []byte("package bytes\n"), 0o644)
	if _, err := Resolve("go", cache, nil); err != nil {
		t.Fatal(err)
	}
	if meta2, _ := data.ReadMeta(dir); len(meta2.Sources) != 3 {
		t.Fatalf("not re-prepared: %v", meta2.Sources)
	}
}

func TestResolveGoMissing(t *testing.T) {
	defer func(f func() []string) { findGOROOT = f }(findGOROOT)
	findGOROOT = func() []string { return []string{t.TempDir()} }
	_, err := Resolve("go", t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "default corpus: Go sources not found under $GOROOT/src") || !strings.Contains(err.Error(), "pass --data DIR|FILE") {
		t.Fatalf("err = %v", err)
	}
}

func TestGOROOTCandidates(t *testing.T) {
	if roots := goroots(); len(roots) == 0 {
		t.Fatal("no GOROOT candidates")
	}
	if _, err := goSourceDir(); err != nil {
		t.Fatal(err)
	}
}

func TestResolveRealGoCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("prepares ~20 MB")
	}
	src, err := goSourceDir()
	if err != nil {
		t.Skip(err)
	}
	files, fp, err := goCorpus(src)
	if err != nil || len(files) < 100 || !strings.HasPrefix(fp, "byte gosrc-v2 sha256:") {
		t.Fatalf("%d files, %s, %v", len(files), fp, err)
	}
	var total int64
	packages := map[string]bool{}
	for _, f := range files {
		st, _ := os.Stat(f)
		total += st.Size()
		rel, _ := filepath.Rel(src, f)
		if strings.HasSuffix(f, "_test.go") || strings.Contains(f, "/testdata/") || strings.Contains(f, "/vendor/") ||
			strings.HasPrefix(rel, "cmd"+string(filepath.Separator)) || generated(f) {
			t.Fatalf("excluded file taken: %s", f)
		}
		packages[filepath.Dir(rel)] = true
	}
	// The hashed order spreads the stream over the library: the first 50 files alone come from
	// many packages, so a short sequential run does not see just one corner of it.
	first := map[string]bool{}
	for _, f := range files[:50] {
		first[filepath.Dir(f)] = true
	}
	if len(packages) < 100 || len(first) < 30 {
		t.Fatalf("corpus spans %d packages, its first 50 files %d", len(packages), len(first))
	}
	if total > goCorpusBytes || total < 10<<20 {
		t.Fatalf("corpus is %d bytes, want 10 MB to %d", total, goCorpusBytes)
	}
}

func TestResolveTextAndPassThrough(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	text := filepath.Join(dir, "my notes.txt")
	os.WriteFile(text, []byte("hello world\n"), 0o644)
	got, err := Resolve(text, cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(got), "text-my_notes-") {
		t.Fatalf("cache dir %s", got)
	}
	ds, err := data.Open(got)
	if err != nil || ds.Meta.Tokenizer != "char" || ds.Meta.VocabSize != 9 {
		t.Fatalf("prepared text: %+v %v", ds, err)
	}
	if again, _ := Resolve(text, cache, nil); again != got {
		t.Fatalf("same content, different cache: %s", again)
	}
	os.WriteFile(text, []byte("other words\n"), 0o644)
	if changed, _ := Resolve(text, cache, nil); changed == got {
		t.Fatal("changed content reused the old cache")
	}

	for _, spec := range []string{dir, filepath.Join(dir, "x.bin")} {
		if spec != dir {
			data.WriteShard(spec, []uint16{1})
		}
		if p, err := Resolve(spec, cache, nil); err != nil || p != spec {
			t.Fatalf("Resolve(%s) = %s, %v", spec, p, err)
		}
	}
	if _, err := Resolve(filepath.Join(dir, "missing.txt"), cache, nil); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing: %v", err)
	}
}

func TestCachedRejectsHalfCache(t *testing.T) {
	dir := t.TempDir()
	data.WriteShard(filepath.Join(dir, "train_000000.bin"), []uint16{1, 2})
	if cached(dir, "fp") {
		t.Fatal("a cache without meta.json was trusted")
	}
	data.WriteMeta(dir, &data.Meta{Tokenizer: "byte", VocabSize: 257, EOT: 256, Fingerprint: "other"})
	if cached(dir, "fp") {
		t.Fatal("a cache with another fingerprint was trusted")
	}
	data.WriteMeta(dir, &data.Meta{Tokenizer: "byte", VocabSize: 257, EOT: 256, Fingerprint: "fp"})
	if !cached(dir, "fp") {
		t.Fatal("a complete cache was not trusted")
	}
}

func TestResolveShakespeare(t *testing.T) {
	const text = "First Citizen:\nBefore we proceed any further, hear me speak.\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(text))
	}))
	defer srv.Close()
	defer func(u string) { ShakespeareURL = u }(ShakespeareURL)
	ShakespeareURL = srv.URL
	t.Setenv("GPT2GO_SHAKESPEARE", "")

	cache := t.TempDir()
	dir, err := Resolve("shakespeare", cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(cache, "tinyshakespeare.txt")); string(got) != text {
		t.Fatalf("downloaded %q", got)
	}
	if meta, err := data.ReadMeta(dir); err != nil || meta.Tokenizer != "char" || meta.EOT != -1 {
		t.Fatalf("meta %+v %v", meta, err)
	}

	// Offline: a fresh cache and an unreachable server give a clear error.
	srv.Close()
	_, err = Resolve("shakespeare", t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "set GPT2GO_SHAKESPEARE") {
		t.Fatalf("offline: %v", err)
	}

	// The environment variable wins and must name an existing file.
	local := filepath.Join(t.TempDir(), "input.txt")
	os.WriteFile(local, []byte("To be\n"), 0o644)
	t.Setenv("GPT2GO_SHAKESPEARE", local)
	if _, err := Resolve("shakespeare", t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPT2GO_SHAKESPEARE", local+".gone")
	if _, err := Resolve("shakespeare", t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "GPT2GO_SHAKESPEARE=") {
		t.Fatalf("bad env: %v", err)
	}
}

func TestDefaultCacheDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("XDG_CACHE_HOME is Linux's")
	}
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	dir, err := DefaultCacheDir()
	if err != nil || dir != "/tmp/xdg/gpt2go" {
		t.Fatalf("DefaultCacheDir = %s, %v", dir, err)
	}
}
