// Package prepare turns text files into a dataset directory: tokenized llm.c shards
// (train_000000.bin..., val_000000.bin...) and meta.json. Run does the work for any inputs;
// Resolve maps gpt2go train's --data argument (the default Go corpus, "shakespeare", a text
// file, or an existing dataset) to a prepared directory, preparing it into a cache once.
//
// Conventions:
//   - Documents. Each input file is one document. When the tokenizer has an EOT token, every
//     document is preceded by EOT (as llm.c's data scripts do), so the first token of the
//     first shard is EOT and a model learns that EOT starts a fresh text. A char tokenizer over
//     a single file has no EOT at all (Tiny Shakespeare: vocab 65, like nanoGPT). WordPiece
//     separates documents with [SEP] instead.
//   - BERT's special tokens. A wordpiece vocab has [PAD] [UNK] [CLS] [SEP] [MASK] itself; with
//     BERTSpecials the other tokenizers get [PAD] [CLS] [SEP] [MASK] as four more ids after
//     their vocabulary (GPT-2: 50257..50260). Either way meta.json records their ids. Without
//     it nothing changes: GPT-2 data keeps its 50257 ids, as llm.c and pretrained weights need.
//   - Order. All files are read in sorted path order, whatever order the inputs were given in.
//   - Validation split. The inputs form one stream of S bytes (the files' contents in that
//     order). Train gets the first floor((1-ValFraction)*S) bytes, rounded up to the next point
//     where the tokenizer can cut without changing any token (exactly there for byte, before
//     the next ASCII byte for char, before the next ' ' or '\n' followed by printable ASCII for
//     gpt2, or the end of that document if there is none); val gets the rest. The EOT before a
//     document goes with the document. For Tiny Shakespeare at char level this gives nanoGPT's
//     1,003,854 train and 111,540 val tokens.
//   - File selection in directories: directories are walked recursively; entries whose name
//     starts with "." are skipped (hidden files and directories, .git); only regular files are
//     taken (symlinks are not followed), and of those not the empty ones nor binary ones (a NUL
//     byte in the first 8 KiB, git's test). With Options.Ext only files with one of those
//     extensions are taken. Folders gpt2go wrote are skipped, and the summary names them: runs
//     (run.json beside checkpoints/ or log.jsonl) and prepared datasets (meta.json beside
//     train_000000.bin), whose logs, samples, reports and meta.json are no corpus. Files named
//     explicitly as inputs are always taken.
package prepare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/internal/progress"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// Defaults for Options' zero values.
const (
	DefaultTokenizer   = "gpt2"
	DefaultValFraction = 0.1
	// DefaultShardTokens is llm.c's shard size: 100M tokens, 200 MB.
	DefaultShardTokens = 100_000_000
	// MinShardTokens is the smallest shard size Run takes: 64Ki tokens, 128 KiB, a batch of 63
	// rows of GPT-2's 1024-token context read in order. Smaller shards leave their tails unread
	// by in-order batches, and --shard-tokens 1 wrote a file per token.
	MinShardTokens = 1 << 16
)

// CheckValFraction returns the one-line error for a --val-fraction outside [0, 1), NaN
// included. (Options.ValFraction also takes a negative value for no split: the flag's 0.)
func CheckValFraction(f float64) error {
	if f >= 0 && f < 1 {
		return nil
	}
	return fmt.Errorf("--val-fraction %g must be in [0, 1): the share of the text, at its end, held out for validation (0.1 = 10%%, 0 = none)", f)
}

// CheckShardTokens returns the one-line error for a --shard-tokens outside
// [MinShardTokens, data.MaxShardTokens]. (Options.ShardTokens also takes 0 for the default.)
func CheckShardTokens(n int) error {
	if n >= MinShardTokens && n <= data.MaxShardTokens {
		return nil
	}
	return fmt.Errorf("--shard-tokens %d must be between %d and %d tokens per shard file (default %d)", n, MinShardTokens, data.MaxShardTokens, DefaultShardTokens)
}

// maxVocab is the largest vocabulary shards hold: their ids are uint16.
const maxVocab = 1 << 16

// chunkBytes is how much text one encoding job holds: big enough to amortise the hand-off,
// small enough that every core gets work on a few-MB corpus. A variable so tests can make
// every document many chunks.
var chunkBytes = 256 << 10

// Options says what to prepare.
type Options struct {
	Inputs       []string  // files and directories (walked recursively, see the package comment)
	Ext          []string  // if set, only files with one of these extensions (".txt") are taken from directories
	Out          string    // output directory: created, or replaced if it holds only a previous prepare's output
	Tokenizer    string    // "gpt2" (default), "byte", "char" or "wordpiece"
	Vocab        string    // wordpiece: the BERT vocab.txt (recorded whole in meta.json)
	Cased        bool      // wordpiece: keep case and accents (default: lower-case, strip accents)
	BERTSpecials bool      // gpt2, byte, char: append [PAD] [CLS] [SEP] [MASK] to the vocabulary
	ValFraction  float64   // share of the input bytes for val, below 1; 0 means 0.1, negative means no val split
	ShardTokens  int       // tokens per shard, from MinShardTokens; 0 means 100M
	Workers      int       // encoding goroutines; 0 means GOMAXPROCS
	Progress     io.Writer // progress bar and summary; nil for silence
	Fingerprint  string    // recorded in meta.json (Resolve uses it to recognise its caches)
	// Context stops the preparation when it is done (Ctrl-C), leaving Out as it was; nil
	// means never.
	Context context.Context
}

// Result says what Run wrote.
type Result struct {
	Dir         string
	Files       int
	Bytes       int64
	Skipped     []string // folders of gpt2go's own output the walks left out, with what each is
	TrainShards []string
	ValShards   []string
	Meta        *data.Meta
	Duration    time.Duration
}

// Run prepares opts.Inputs into opts.Out. The output is built in a temporary directory next to
// Out and moved into place at the end, so an interrupted run leaves Out as it was (or, when an
// old Out is being replaced, without meta.json, which makes caches re-prepare it).
func Run(opts Options) (*Result, error) {
	start := time.Now()
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	if err := checkOut(opts.Out); err != nil {
		return nil, err
	}
	files, skipped, total, err := collect(opts.Inputs, opts.Ext, opts.Out, opts.Tokenizer != "byte")
	if err != nil {
		return nil, err
	}
	valStart := total // byte offset where val begins (before rounding to a safe cut)
	if opts.ValFraction > 0 {
		valStart = int64(float64(total) * (1 - opts.ValFraction))
	}
	if valStart == 0 {
		return nil, fmt.Errorf("prepare: --val-fraction %g leaves no text to train on: (1 - %g) x %d bytes is under 1 byte; take a fraction below %.6g", opts.ValFraction, opts.ValFraction, total, 1-1/float64(total))
	}
	tok, err := newTokenizer(opts, files, total)
	if err != nil {
		return nil, err
	}
	outAbs, err := filepath.Abs(opts.Out) // "." and ".." name their folder: its parent holds the staging
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(outAbs), 0o755); err != nil {
		return nil, fmt.Errorf("prepare: create parent of %s: %w", opts.Out, err)
	}
	// A killed prepare's staging folder holds part of a dataset: gigabytes, perhaps.
	atomicfile.RemoveAbandoned(filepath.Dir(outAbs), "."+filepath.Base(outAbs)+".tmp-")
	staging, release, err := atomicfile.MkdirTemp(filepath.Dir(outAbs), "."+filepath.Base(outAbs)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	defer release()
	defer os.RemoveAll(staging) // after a successful install it is gone already

	bar := progress.New(opts.Progress, total, "prepare", "bytes")
	defer bar.Finish()
	w := newShardSet(staging, opts.ShardTokens)
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	bad, err := encodeAll(ctx, tok, files, valStart, opts.Workers, w, bar, opts.Tokenizer != "byte")
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("prepare: interrupted; %s is as it was", opts.Out)
		}
		w.abort()
		return nil, err
	}
	if err := w.close(); err != nil {
		return nil, err
	}
	meta := &data.Meta{
		Tokenizer:   tok.Name(),
		VocabSize:   tok.VocabSize(),
		EOT:         tok.EOT(),
		TrainTokens: w.tokens[0],
		ValTokens:   w.tokens[1],
		InputBytes:  total,
		ValFraction: max(opts.ValFraction, 0),
		Fingerprint: opts.Fingerprint,
	}
	if c, ok := tok.(*tokenizer.Char); ok {
		meta.Alphabet = c.Alphabet()
	}
	meta.Record = tokenizer.RecordOf(tok)
	if abs, err := filepath.Abs(meta.VocabFile); err == nil && meta.VocabFile != "" {
		meta.VocabFile = abs
	}
	for _, f := range files {
		meta.Sources = append(meta.Sources, f.path)
	}
	if err := data.WriteMeta(staging, meta); err != nil {
		return nil, err
	}
	if err := install(staging, outAbs); err != nil {
		return nil, err
	}
	res := &Result{Dir: opts.Out, Files: len(files), Bytes: total, Skipped: skipped, Meta: meta, Duration: time.Since(start)}
	for _, name := range w.names[0] {
		res.TrainShards = append(res.TrainShards, filepath.Join(opts.Out, name))
	}
	for _, name := range w.names[1] {
		res.ValShards = append(res.ValShards, filepath.Join(opts.Out, name))
	}
	bar.Finish()
	secs := res.Duration.Seconds()
	fmt.Fprintf(progressOrDiscard(opts.Progress), "prepared %d files, %.1f MB -> %d train + %d val tokens in %.2f s (%.1f MB/s)\n",
		res.Files, float64(total)/1e6, meta.TrainTokens, meta.ValTokens, secs, float64(total)/1e6/secs)
	if len(skipped) > 0 {
		fmt.Fprintf(progressOrDiscard(opts.Progress), "skipped %s\n", skippedList(skipped))
	}
	if bad.bytes > 0 {
		bad.tok = opts.Tokenizer
		fmt.Fprintln(progressOrDiscard(opts.Progress), bad)
	}
	if opts.ValFraction > 0 && meta.ValTokens == 0 {
		fmt.Fprintf(progressOrDiscard(opts.Progress), "warning: the validation split came out empty: the text has no place to cut after %.0f%% of it (the split falls on a whitespace or line boundary); training will report no val loss\n", 100*(1-opts.ValFraction))
	}
	return res, nil
}

func progressOrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func withDefaults(opts Options) (Options, error) {
	if opts.Tokenizer == "" {
		opts.Tokenizer = DefaultTokenizer
	}
	if !slices.Contains(tokenizer.Names, opts.Tokenizer) {
		return opts, fmt.Errorf("prepare: unknown tokenizer %q: want one of %s", opts.Tokenizer, strings.Join(tokenizer.Names, ", "))
	}
	switch {
	case opts.Tokenizer == "wordpiece" && opts.Vocab == "":
		return opts, fmt.Errorf("prepare: the wordpiece tokenizer needs its vocab: pass --vocab vocab.txt (a BERT vocab, one token per line)")
	case opts.Tokenizer != "wordpiece" && opts.Vocab != "":
		return opts, fmt.Errorf("prepare: --vocab is for --tokenizer wordpiece, not %s", opts.Tokenizer)
	case opts.Tokenizer != "wordpiece" && opts.Cased:
		return opts, fmt.Errorf("prepare: --cased is for --tokenizer wordpiece, not %s", opts.Tokenizer)
	}
	switch {
	case opts.ValFraction == 0:
		opts.ValFraction = DefaultValFraction
	case opts.ValFraction > 0 || opts.ValFraction != opts.ValFraction: // negative: no split
		if err := CheckValFraction(opts.ValFraction); err != nil {
			return opts, fmt.Errorf("prepare: %w", err)
		}
	}
	if opts.ShardTokens == 0 {
		opts.ShardTokens = DefaultShardTokens
	}
	if err := CheckShardTokens(opts.ShardTokens); err != nil {
		return opts, fmt.Errorf("prepare: %w", err)
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	if opts.Out == "" {
		return opts, fmt.Errorf("prepare: no output directory given")
	}
	return opts, nil
}

// outputName matches the files Run writes, the only ones it replaces in an existing Out.
var outputName = regexp.MustCompile(`^((train|val)_[0-9]{6}\.bin|meta\.json)$`)

// checkOut fails early when Out can't be (re)placed: it is a file, or a directory holding
// anything other than a previous prepare's output.
func checkOut(out string) error {
	st, err := os.Stat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prepare: output %s: %w", out, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("prepare: output %s is a file, not a directory; choose another --out", out)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("prepare: output %s: %w", out, err)
	}
	for _, e := range entries {
		if !outputName.MatchString(e.Name()) {
			return fmt.Errorf("prepare: output directory %s already holds %s, which prepare did not write; choose an empty or new directory", out, e.Name())
		}
	}
	return nil
}

// install moves the prepared files from staging into out: a rename when out is new. Otherwise
// the old output moves aside into a sibling folder (meta.json first, so a half-replaced
// directory is never taken for a finished one) and the new files move in (meta.json last); if
// a move fails, the new files go back to staging and the old ones back into out, so out holds
// one whole dataset, the old or the new, whatever fails. out itself stays the same folder (a
// shell may be in it).
func install(staging, out string) error {
	if err := os.Rename(staging, out); err == nil {
		return atomicfile.SyncDir(filepath.Dir(out)) // the rename itself survives a power loss
	}
	if err := checkOut(out); err != nil {
		return err
	}
	aside, release, err := atomicfile.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".old-")
	if err != nil {
		return fmt.Errorf("prepare: replace %s: %w", out, err)
	}
	defer release()
	if err := moveFiles(out, aside, true); err != nil {
		if rerr := moveFiles(aside, out, false); rerr != nil {
			return fmt.Errorf("prepare: replace %s: %w; the old dataset is split between %s and %s (%v)", out, err, out, aside, rerr)
		}
		os.Remove(aside) // empty again
		return fmt.Errorf("prepare: replace %s: %w; it holds the old dataset still", out, err)
	}
	if err := moveFiles(staging, out, false); err != nil {
		if rerr := moveFiles(out, staging, true); rerr != nil {
			return fmt.Errorf("prepare: replace %s: %w; the old dataset is left in %s, and %s holds part of the new one (%v): re-run prepare", out, err, aside, out, rerr)
		}
		if rerr := moveFiles(aside, out, false); rerr != nil {
			return fmt.Errorf("prepare: replace %s: %w; the old dataset is split between %s and %s (%v)", out, err, out, aside, rerr)
		}
		os.Remove(aside)
		return fmt.Errorf("prepare: replace %s: %w; it holds the old dataset still", out, err)
	}
	os.RemoveAll(aside) // the old dataset; the new one is in place whatever this does
	// and those of a replacement that a crash cut short, which the new one supersedes
	atomicfile.RemoveAbandoned(filepath.Dir(out), "."+filepath.Base(out)+".old-")
	return atomicfile.SyncDir(out)
}

// rename is os.Rename; tests make it fail.
var rename = os.Rename

// moveFiles renames every entry of folder from into folder to, meta.json first when metaFirst
// and last otherwise.
func moveFiles(from, to string, metaFirst bool) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Name() != data.MetaFile {
			names = append(names, e.Name())
		}
	}
	if len(names) < len(entries) { // meta.json is there
		if metaFirst {
			names = append([]string{data.MetaFile}, names...)
		} else {
			names = append(names, data.MetaFile)
		}
	}
	for _, name := range names {
		if err := rename(filepath.Join(from, name), filepath.Join(to, name)); err != nil {
			return fmt.Errorf("move %s into %s: %w", name, to, err)
		}
	}
	return nil
}

// inputFile is one document.
type inputFile struct {
	path string
	size int64
}

// collect lists the input files in sorted path order and their total size, and the folders of
// gpt2go's own output its walks skipped (gpt2goFolder). Walks skip the output directory out, so
// preparing a folder into a subfolder of itself twice doesn't read the first output. A file
// reached twice (under two spellings, through a symbolic link, or given and inside a given
// folder) is read once. A folder given as a symbolic link is walked (links below it are not
// followed). A file given by name must be a regular file, and for a text tokenizer (text) not a
// binary one (the test folder walks apply to skip them).
func collect(inputs, exts []string, out string, text bool) (files []inputFile, skipped []string, total int64, err error) {
	outAbs := ResolvedPath(out) // as the walks, which follow a linked root, spell it
	if len(inputs) == 0 {
		return nil, nil, 0, fmt.Errorf("prepare: no input files given")
	}
	seen := map[string]bool{} // the files' resolved absolute paths
	add := func(path string, size int64) {
		if key := ResolvedPath(path); !seen[key] && size > 0 {
			seen[key] = true
			files = append(files, inputFile{path, size})
		}
	}
	for _, in := range inputs {
		st, err := os.Stat(in)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil, 0, fmt.Errorf("prepare: input %s does not exist", in)
			}
			return nil, nil, 0, fmt.Errorf("prepare: input %s: %w", in, err)
		}
		if !st.IsDir() {
			if !st.Mode().IsRegular() {
				return nil, nil, 0, fmt.Errorf("prepare: input %s is not a regular file (a pipe or device?); save the text to a file and pass that", in)
			}
			if binary, err := looksBinary(in); err != nil {
				return nil, nil, 0, fmt.Errorf("prepare: input %s: %w", in, err)
			} else if binary && text {
				return nil, nil, 0, fmt.Errorf("prepare: input %s looks binary (a NUL byte in its first 8 KiB: compressed?); decompress it, or tokenize its bytes with --tokenizer byte", in)
			}
			add(in, st.Size())
			continue
		}
		root := in
		if resolved, err := filepath.EvalSymlinks(in); err == nil {
			root = resolved // WalkDir does not enter a root that is a symbolic link
		}
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if path != root && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				if ResolvedPath(path) == outAbs {
					return filepath.SkipDir
				}
				if what := gpt2goFolder(path); what != "" {
					rel, _ := filepath.Rel(root, path) // spelled as the input was given
					skipped = append(skipped, filepath.Join(in, rel)+" ("+what+")")
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || (len(exts) > 0 && !slices.Contains(exts, filepath.Ext(path))) {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if binary, err := looksBinary(path); err != nil || binary {
				return err
			}
			add(path, info.Size())
			return nil
		})
		if err != nil {
			return nil, nil, 0, fmt.Errorf("prepare: walk %s: %w", in, err)
		}
	}
	slices.SortFunc(files, func(a, b inputFile) int { return strings.Compare(a.path, b.path) })
	for _, f := range files {
		total += f.size
	}
	if len(files) == 0 {
		why := "every input is empty, hidden or binary"
		if len(skipped) > 0 {
			why = "every input is empty, hidden, binary or gpt2go's own output"
		}
		if len(exts) > 0 {
			why += fmt.Sprintf(" (or lacks the extensions %v)", exts)
		}
		if len(skipped) > 0 {
			why += "; skipped " + skippedList(skipped)
		}
		return nil, nil, 0, fmt.Errorf("prepare: no text in %s: %s", strings.Join(inputs, ", "), why)
	}
	return files, skipped, total, nil
}

// gpt2goFolder says what dir is when gpt2go wrote it, "a training run" or "a prepared dataset",
// and "" otherwise. A run is recognised by run.json beside its checkpoints/ or log.jsonl (a
// run.json alone may be anyone's), a dataset by data.IsPrepared.
func gpt2goFolder(dir string) string {
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	switch {
	case has("run.json") && (has("checkpoints") || has("log.jsonl")):
		return "a training run"
	case data.IsPrepared(dir):
		return "a prepared dataset"
	}
	return ""
}

// skippedList says which folders of gpt2go's own output a walk skipped: at most five by name.
func skippedList(skipped []string) string {
	const named = 5
	list := strings.Join(skipped[:min(len(skipped), named)], ", ")
	if len(skipped) > named {
		list += fmt.Sprintf(" and %d more", len(skipped)-named)
	}
	folders := "folders"
	if len(skipped) == 1 {
		folders = "folder"
	}
	return fmt.Sprintf("%d %s gpt2go wrote, not text (name their files as --input to take them): %s", len(skipped), folders, list)
}

// ResolvedPath is path absolute with its symbolic links resolved, as far as it exists (a new
// output folder's parent): the path the file system reaches, to compare with others.
func ResolvedPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	if r, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(r, filepath.Base(abs))
	}
	return abs
}

// looksBinary applies git's test: a NUL byte in the first 8 KiB.
func looksBinary(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, 8<<10)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return false, err
	}
	return bytes.IndexByte(head[:n], 0) >= 0, nil
}

// newTokenizer builds the tokenizer, with BERT's specials if asked, and checks that its ids fit
// the shards' uint16.
func newTokenizer(opts Options, files []inputFile, total int64) (tokenizer.Tokenizer, error) {
	tok, err := baseTokenizer(opts, files, total)
	if err != nil {
		return nil, err
	}
	if opts.BERTSpecials {
		if tok, err = tokenizer.WithBERTSpecials(tok); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}
	if v := tok.VocabSize(); v > maxVocab {
		return nil, fmt.Errorf("prepare: the %s tokenizer has %d ids, but shards store uint16 (at most %d ids); use a smaller vocab", tok.Name(), v, maxVocab)
	}
	return tok, nil
}

// baseTokenizer builds the tokenizer opts names; char needs a first pass over the text for its
// alphabet.
func baseTokenizer(opts Options, files []inputFile, total int64) (tokenizer.Tokenizer, error) {
	switch opts.Tokenizer {
	case "char":
	case "wordpiece":
		tok, err := tokenizer.ReadWordPiece(opts.Vocab, !opts.Cased)
		if err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
		return tok, nil
	default:
		return tokenizer.New(opts.Tokenizer, "", false)
	}
	var set tokenizer.AlphabetSet
	bar := progress.New(opts.Progress, total, "alphabet", "bytes")
	defer bar.Finish()
	probe, _ := tokenizer.NewChar("a", false) // any char tokenizer cuts at the same points
	for _, f := range files {
		err := readChunks(f.path, probe, -1, func(text []byte, _ int64) error {
			if opts.Context != nil && opts.Context.Err() != nil {
				return opts.Context.Err()
			}
			set.Add(text)
			bar.Add(int64(len(text)))
			return nil
		})
		if opts.Context != nil && opts.Context.Err() != nil {
			return nil, fmt.Errorf("prepare: interrupted; %s is as it was", opts.Out)
		}
		if err != nil {
			return nil, err
		}
	}
	return tokenizer.NewChar(set.String(), len(files) > 1)
}
