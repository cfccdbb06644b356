package prepare

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"unicode/utf8"

	"github.com/gpt2go/gpt2go/data"
	"github.com/gpt2go/gpt2go/internal/progress"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// readChunks reads the file at path in pieces of about chunkBytes, each ending at a safe cut of
// tok (see tokenizer.SafeCut), so encoding the pieces separately equals encoding the file. It
// calls emit with each piece (valid until emit returns) and the piece's offset in the file. If
// 0 < split < file size, a piece also ends at the first safe cut at or after split (if the rest
// of the file has one). A piece grows past chunkBytes only while no safe cut turns up.
func readChunks(path string, tok tokenizer.Tokenizer, split int64, emit func(text []byte, off int64) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 0, 2*chunkBytes)
	var off int64 // file offset of buf[0]
	eof := false
	fill := func(n int) error { // read until len(buf) >= n or EOF
		for !eof && len(buf) < n {
			if cap(buf)-len(buf) < chunkBytes {
				buf = append(buf, make([]byte, chunkBytes)...)[:len(buf)]
			}
			m, err := f.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if err == io.EOF {
				eof = true
			} else if err != nil {
				return fmt.Errorf("prepare: read %s: %w", path, err)
			}
		}
		return nil
	}
	want := chunkBytes + 1 // bytes to have in buf before choosing a cut
	for {
		if err := fill(want); err != nil {
			return err
		}
		if len(buf) == 0 {
			return nil
		}
		cut := -1
		switch {
		case split > off && split <= off+int64(chunkBytes) && split < off+int64(len(buf)):
			cut = tokenizer.NextSafeCut(tok, buf, int(split-off))
		case eof && len(buf) <= chunkBytes:
			cut = len(buf)
		default:
			if cut = tokenizer.SafeCut(tok, buf[:min(chunkBytes, len(buf))]); cut == 0 {
				cut = tokenizer.NextSafeCut(tok, buf, chunkBytes)
			}
		}
		if cut < 0 {
			if !eof {
				want = len(buf) + chunkBytes // no safe cut yet: read on
				continue
			}
			cut = len(buf)
		}
		if err := emit(buf[:cut], off); err != nil {
			return err
		}
		buf = buf[:copy(buf, buf[cut:])]
		off += int64(cut)
		want = chunkBytes + 1
	}
}

// job is one piece of one document to encode; seq orders the pieces.
type job struct {
	seq  int
	text []byte
	eot  bool // precede with EOT: the piece starts a document
	val  bool
	file int   // index of the document
	off  int64 // of text in it
	utf8 bool  // count the bytes that are not UTF-8
}

type encoded struct {
	seq    int
	tokens []uint16
	val    bool
	bytes  int
	err    error
	file   int
	bad    int   // bytes that are not UTF-8
	badAt  int64 // the file offset of the first, if bad > 0
}

// notUTF8 tells of the input bytes that are not UTF-8, which a text tokenizer encodes as U+FFFD
// (text in Latin-1, say, or a binary file).
type notUTF8 struct {
	files int   // files holding any
	bytes int64 // in all
	first string
	at    int64  // the offset of the first in first
	tok   string // the tokenizer (--tokenizer): wordpiece drops them
}

func (n notUTF8) String() string {
	files := "a file holds"
	if n.files > 1 {
		files = fmt.Sprintf("%d files hold", n.files)
	}
	if n.tok == "wordpiece" {
		return fmt.Sprintf("warning: %s %d bytes that are not UTF-8 (the first at byte %d of %s), which the WordPiece tokenizer drops, so their text is lost; convert the files to UTF-8 (iconv -f latin1 -t utf-8, say)", files, n.bytes, n.at, n.first)
	}
	return fmt.Sprintf("warning: %s %d bytes that are not UTF-8 (the first at byte %d of %s), encoded as U+FFFD (\ufffd), so their text is lost; convert the files to UTF-8 (iconv -f latin1 -t utf-8, say) or prepare with --tokenizer byte, which keeps every byte", files, n.bytes, n.at, n.first)
}

// countNotUTF8 returns how many bytes of text are not UTF-8 (each byte of an invalid sequence
// counts) and the offset of the first.
func countNotUTF8(text []byte) (n, first int) {
	if utf8.Valid(text) {
		return 0, -1
	}
	first = -1
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRune(text[i:])
		if r == utf8.RuneError && size == 1 {
			if first < 0 {
				first = i
			}
			n++
		}
		i += size
	}
	return n, first
}

// encodeAll encodes the files on workers goroutines and writes the tokens, in input order, to
// out: pieces starting at or after byte valStart of the stream go to val. For a text tokenizer
// (checkUTF8) it counts the input bytes that are not UTF-8.
func encodeAll(ctx context.Context, tok tokenizer.Tokenizer, files []inputFile, valStart int64, workers int, out *shardSet, bar *progress.Bar, checkUTF8 bool) (notUTF8, error) {
	jobs := make(chan job, 2*workers)
	results := make(chan encoded, 2*workers)
	done := make(chan struct{}) // closed to stop the reader and workers early
	readErr := make(chan error, 1)

	go func() {
		defer close(jobs)
		seq := 0
		var fileStart int64
		for i, f := range files {
			err := readChunks(f.path, tok, valStart-fileStart, func(text []byte, off int64) error {
				j := job{seq: seq, text: append([]byte(nil), text...), eot: off == 0 && tok.EOT() >= 0, val: fileStart+off >= valStart,
					file: i, off: off, utf8: checkUTF8}
				seq++
				select {
				case jobs <- j:
					return nil
				case <-done:
					return errStopped
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			if err != nil {
				readErr <- err
				return
			}
			fileStart += f.size
		}
		readErr <- nil
	}()

	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				r := encodeJob(tok, j)
				select {
				case results <- r:
				case <-done:
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()

	// Write in order: hold results that arrive early (at most the ones in flight).
	pending := map[int]encoded{}
	next := 0
	var bad notUTF8
	lastBad := -1 // the file counted last in bad
	var firstErr error
	stop := func(err error) {
		if firstErr == nil {
			firstErr = err
			close(done)
		}
	}
	for r := range results {
		if firstErr == nil && ctx.Err() != nil {
			stop(ctx.Err())
		}
		if firstErr != nil {
			continue
		}
		if r.err != nil {
			stop(r.err)
			continue
		}
		pending[r.seq] = r
		for {
			r, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			if err := out.write(r.val, r.tokens); err != nil {
				stop(err)
				break
			}
			bar.Add(int64(r.bytes))
			if r.bad > 0 {
				if bad.bytes == 0 {
					bad.first, bad.at = files[r.file].path, r.badAt
				}
				if r.file != lastBad {
					bad.files++
					lastBad = r.file
				}
				bad.bytes += int64(r.bad)
			}
		}
	}
	if err := <-readErr; err != nil && err != errStopped && firstErr == nil {
		firstErr = err
	}
	return bad, firstErr
}

var errStopped = fmt.Errorf("prepare: stopped")

// encodeJob tokenizes one piece into uint16 tokens, EOT first if it starts a document.
func encodeJob(tok tokenizer.Tokenizer, j job) encoded {
	ids := tok.Encode(j.text)
	tokens := make([]uint16, 0, len(ids)+1)
	if j.eot {
		ids = append([]int{tok.EOT()}, ids...)
	}
	for _, id := range ids {
		if id < 0 || id > 0xFFFF || id >= tok.VocabSize() {
			return encoded{err: fmt.Errorf("prepare: %s tokenizer produced id %d, which does not fit the uint16 shard format or its vocabulary of %d", tok.Name(), id, tok.VocabSize())}
		}
		tokens = append(tokens, uint16(id))
	}
	r := encoded{seq: j.seq, tokens: tokens, val: j.val, bytes: len(j.text), file: j.file}
	if j.utf8 {
		var first int
		if r.bad, first = countNotUTF8(j.text); r.bad > 0 {
			r.badAt = j.off + int64(first)
		}
	}
	return r
}

// shardSet writes the train and val token streams into numbered shards of at most shardTokens.
type shardSet struct {
	dir         string
	shardTokens int64
	open        [2]*data.ShardWriter // [0] train, [1] val
	names       [2][]string
	tokens      [2]int64
}

func newShardSet(dir string, shardTokens int) *shardSet {
	return &shardSet{dir: dir, shardTokens: int64(shardTokens)}
}

func (s *shardSet) write(val bool, tokens []uint16) error {
	k := 0
	if val {
		k = 1
	}
	s.tokens[k] += int64(len(tokens))
	for len(tokens) > 0 {
		if s.open[k] == nil {
			name := fmt.Sprintf("%s_%06d.bin", [2]string{"train", "val"}[k], len(s.names[k]))
			s.names[k] = append(s.names[k], name)
			s.open[k] = data.NewShardWriter(filepath.Join(s.dir, name))
		}
		w := s.open[k]
		n := min(int64(len(tokens)), s.shardTokens-w.Tokens())
		if err := w.Write(tokens[:n]); err != nil {
			return err
		}
		tokens = tokens[n:]
		if w.Tokens() == s.shardTokens {
			s.open[k] = nil
			if err := w.Close(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *shardSet) close() error {
	for k, w := range s.open {
		if w != nil {
			s.open[k] = nil
			if err := w.Close(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *shardSet) abort() {
	for k, w := range s.open {
		if w != nil {
			w.Abort()
			s.open[k] = nil
		}
	}
}
