package prepare

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/internal/download"
)

// The default corpus: the Go standard library's own sources, which every Go installation has,
// so `gpt2go train` works offline with no arguments.
const (
	goCorpusBytes = 20 << 20 // about 20 MB of .go files
	goCorpusDir   = "gosrc-byte"
)

// ShakespeareURL is where Resolve downloads Tiny Shakespeare (char-rnn's input.txt).
var ShakespeareURL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"

// findGOROOT lists candidate GOROOTs; a variable so tests can point it elsewhere.
var findGOROOT = goroots

// DefaultCacheDir is where Resolve keeps downloads and prepared datasets: the user cache
// directory's gpt2go folder (~/.cache/gpt2go on Linux).
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (%v); set $XDG_CACHE_HOME or $HOME", err)
	}
	return filepath.Join(dir, "gpt2go"), nil
}

// Resolve turns gpt2go train's --data SPEC into a dataset directory or shard for data.Open:
//   - "" or "go": the Go standard library's .go files under $GOROOT/src (see goCorpus), ~20 MB,
//     byte tokenizer, prepared once into cacheDir/gosrc-byte;
//   - "shakespeare": Tiny Shakespeare at char level (vocab 65), from $GPT2GO_SHAKESPEARE, else
//     cacheDir/tinyshakespeare.txt, else downloaded there, prepared into cacheDir/shakespeare-char;
//   - a directory or a .bin file: returned as it is;
//   - any other file: taken as text and prepared at char level into cacheDir/text-NAME-HASH,
//     keyed by the file's content.
//
// A cached dataset is reused when its meta.json records the same fingerprint (tokenizer and
// inputs). cacheDir "" means DefaultCacheDir(). progress (may be nil) gets bars and messages.
func Resolve(spec, cacheDir string, progress io.Writer) (string, error) {
	return ResolveFor(context.Background(), spec, cacheDir, progress, false)
}

// ResolveFor is Resolve for a model family: with bertSpecials (train --arch bert) the datasets it
// prepares itself (the default corpus, "shakespeare", a text file) get [PAD] [CLS] [SEP] [MASK]
// after their vocabulary (Options.BERTSpecials), in their own cache folders (NAME-bert); a
// directory or shard is returned as it is.
func ResolveFor(ctx context.Context, spec, cacheDir string, progress io.Writer, bertSpecials bool) (string, error) {
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	if spec == "go" || spec == "shakespeare" { // unless the user's own ./go or ./shakespeare is data
		st, err := os.Stat(spec)
		_, metaErr := os.Stat(filepath.Join(spec, data.MetaFile))
		text := false // a text file, not a program named go
		if err == nil && st.Mode().IsRegular() {
			binary, berr := looksBinary(spec)
			text = berr == nil && !binary
		}
		if metaErr == nil || text {
			return "", fmt.Errorf("--data %s names the built-in corpus, but ./%s is data too; pass ./%s for it, or run from another folder for the corpus", spec, spec, spec)
		}
	}
	switch spec {
	case "", "go":
		return resolveGo(ctx, cacheDir, progress, bertSpecials)
	case "shakespeare":
		path, err := shakespeareText(cacheDir, progress)
		if err != nil {
			return "", err
		}
		return prepareText(ctx, path, filepath.Join(cacheDir, "shakespeare-char"), progress, bertSpecials)
	}
	st, err := os.Stat(spec)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("data %s does not exist; pass a dataset directory, a .bin shard, a text file, \"go\" or \"shakespeare\"", spec)
		}
		return "", fmt.Errorf("data %s: %w", spec, err)
	}
	if st.IsDir() || strings.HasSuffix(spec, ".bin") {
		return spec, nil
	}
	// A file is prepared as characters: a binary one gets advice that train's flags can follow
	// (prepare's own names its --tokenizer, which train has not).
	if binary, err := looksBinary(spec); err == nil && binary {
		return "", fmt.Errorf("data %s looks binary (a NUL byte in its first 8 KiB: compressed?); decompress it, or tokenize its bytes first: gpt2go prepare --input %s --out DIR --tokenizer byte, then --data DIR", spec, spec)
	}
	sum, err := hashFile(spec)
	if err != nil {
		return "", err
	}
	name := strings.TrimSuffix(filepath.Base(spec), filepath.Ext(spec))
	return prepareText(ctx, spec, filepath.Join(cacheDir, "text-"+safeName(name)+"-"+sum[:12]), progress, bertSpecials)
}

// bertVariant names the dataset folder and fingerprint of a BERT-specials preparation.
func bertVariant(dir, fingerprint string, bertSpecials bool) (string, string) {
	if !bertSpecials {
		return dir, fingerprint
	}
	return dir + "-bert", fingerprint + " +bert-specials"
}

// prepareText prepares one text file at char level into dir (with BERT's special tokens when
// bertSpecials, into dir-bert), unless that folder already holds it.
func prepareText(ctx context.Context, path, dir string, progress io.Writer, bertSpecials bool) (string, error) {
	sum, err := hashFile(path)
	if err != nil {
		return "", err
	}
	dir, fingerprint := bertVariant(dir, "char text sha256:"+sum, bertSpecials)
	if cached(dir, fingerprint) {
		return dir, nil
	}
	_, err = Run(Options{Context: ctx, Inputs: []string{path}, Out: dir, Tokenizer: "char", BERTSpecials: bertSpecials, Progress: progress, Fingerprint: fingerprint})
	if err != nil {
		return "", err
	}
	return dir, nil
}

// cached reports whether dir is a complete dataset prepared with this fingerprint. meta.json is
// written last, so its presence means the rest is there.
func cached(dir, fingerprint string) bool {
	meta, err := data.ReadMeta(dir)
	if err != nil || meta.Fingerprint != fingerprint {
		return false
	}
	_, err = data.Open(dir)
	return err == nil
}

func resolveGo(ctx context.Context, cacheDir string, progress io.Writer, bertSpecials bool) (string, error) {
	src, err := goSourceDir()
	if err != nil {
		return "", err
	}
	files, fingerprint, err := goCorpus(src)
	if err != nil {
		return "", err
	}
	dir, fingerprint := bertVariant(filepath.Join(cacheDir, goCorpusDir), fingerprint, bertSpecials)
	if cached(dir, fingerprint) {
		return dir, nil
	}
	if progress != nil {
		fmt.Fprintf(progress, "default corpus: preparing %d Go files from %s into %s (once)\n", len(files), src, dir)
	}
	_, err = Run(Options{Context: ctx, Inputs: files, Out: dir, Tokenizer: "byte", BERTSpecials: bertSpecials, Progress: progress, Fingerprint: fingerprint})
	if err != nil {
		return "", err
	}
	return dir, nil
}

// goSourceDir finds $GOROOT/src: from `go env GOROOT`, else $GOROOT, else the GOROOT this
// binary was built with.
func goSourceDir() (string, error) {
	candidates := findGOROOT()
	for _, root := range candidates {
		src := filepath.Join(root, "src")
		if st, err := os.Stat(filepath.Join(src, "fmt")); err == nil && st.IsDir() {
			return src, nil
		}
	}
	return "", fmt.Errorf("default corpus: Go sources not found under $GOROOT/src (tried %s); pass --data DIR|FILE", strings.Join(candidates, ", "))
}

func goroots() []string {
	var roots []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output(); err == nil {
		if root := strings.TrimSpace(string(out)); root != "" {
			roots = append(roots, root)
		}
	}
	if root := os.Getenv("GOROOT"); root != "" {
		roots = append(roots, root)
	}
	//lint:ignore SA1019 deprecated, but the only answer when no go command is installed.
	if root := runtime.GOROOT(); root != "" {
		roots = append(roots, root)
	}
	return roots
}

// goCorpus lists the default corpus files under src and fingerprints them (paths and sizes).
// It takes the standard library itself: no cmd/ (the toolchain), no testdata or vendor
// directories, no _test.go files, no generated files and no data tables. Files are ordered
// by a hash of their path — a fixed shuffle — before the size cap, so both the sequential
// training stream and the validation split (the end of the stream) span many packages.
func goCorpus(src string) ([]string, string, error) {
	type candidate struct {
		path, rel string
		size      int64
		key       uint64
	}
	var all []candidate
	if resolved, err := filepath.EvalSymlinks(src); err == nil {
		src = resolved // Debian's Go has GOROOT/src as a symbolic link, which WalkDir does not enter
	}
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			skip := name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
			if path != src && (skip || path == filepath.Join(src, "cmd")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if generated(path) || dataTable(path) {
			return nil
		}
		rel, _ := filepath.Rel(src, path)
		h := fnv.New64a()
		h.Write([]byte(filepath.ToSlash(rel)))
		all = append(all, candidate{path, rel, info.Size(), h.Sum64()})
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("default corpus: %w", err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].key < all[j].key })
	var files []string
	var total int64
	h := sha256.New()
	for _, c := range all {
		if total+c.size > goCorpusBytes {
			continue
		}
		total += c.size
		files = append(files, c.path)
		fmt.Fprintf(h, "%s %d\n", c.rel, c.size)
	}
	if len(files) == 0 {
		return nil, "", fmt.Errorf("default corpus: no .go files under %s; pass --data DIR|FILE", src)
	}
	return files, "byte gosrc-v3 sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// dataTable reports whether a Go file is mostly numeric data (hex tables, constants): more than
// a fifth of its bytes are digits or commas. Such files (crypto tables, the random number
// generator's seeds) teach a small model nothing about Go and would eat a short run's budget.
func dataTable(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return false
	}
	numeric := 0
	for _, c := range b {
		if c >= '0' && c <= '9' || c == ',' {
			numeric++
		}
	}
	return numeric*5 > len(b)
}

// generated reports whether a Go file says it is generated (https://go.dev/s/generatedcode).
func generated(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	for _, line := range strings.Split(string(head[:n]), "\n") {
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(strings.TrimSpace(line), "DO NOT EDIT.") {
			return true
		}
	}
	return false
}

// shakespeareText finds or downloads Tiny Shakespeare.
func shakespeareText(cacheDir string, progress io.Writer) (string, error) {
	if path := os.Getenv("GPT2GO_SHAKESPEARE"); path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("shakespeare: GPT2GO_SHAKESPEARE=%s: %w", path, err)
		}
		return path, nil
	}
	path := filepath.Join(cacheDir, "tinyshakespeare.txt")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("shakespeare: %w", err)
	}
	if progress != nil {
		fmt.Fprintf(progress, "downloading Tiny Shakespeare from %s\n", ShakespeareURL)
	}
	if err := fetch(ShakespeareURL, path, progress); err != nil {
		return "", fmt.Errorf("shakespeare: download %s: %v; if offline, fetch the file elsewhere and set GPT2GO_SHAKESPEARE=/path/to/input.txt", ShakespeareURL, err)
	}
	return path, nil
}

// fetch downloads url into path atomically, with a progress bar on progress (may be nil).
func fetch(url, path string, progress io.Writer) error {
	_, err := download.File(context.Background(), url, path, download.Options{
		Progress: progress, Desc: "download " + filepath.Base(path),
	})
	return err
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("data %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("data %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// safeName keeps a cache directory name to letters, digits, '-', '_' and '.'.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return r
		}
		return '_'
	}, s)
	return strings.TrimLeft(s[:min(len(s), 40)], ".")
}
