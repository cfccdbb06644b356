// Package data stores token streams on disk and feeds them to training: llm.c-format shard files
// (and nanoGPT's headerless train.bin/val.bin), the dataset directory with its meta.json, and a
// Loader that cuts (B, T) batches of inputs and next-token targets from the shards.
package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpt2go/gpt2go/internal/atomicfile"
)

// Shard layout (llm.c's): a header of 256 little-endian int32 — magic, version, token count,
// the rest zero — then the tokens as little-endian uint16.
const (
	ShardMagic   = 20240520
	ShardVersion = 1
	HeaderInts   = 256
	HeaderBytes  = HeaderInts * 4
	// MaxShardTokens is the most tokens one shard can hold: the header's count is an int32.
	MaxShardTokens = 1<<31 - 1
)

// ShardInfo describes a shard file: where its tokens start and how many there are.
type ShardInfo struct {
	Path       string
	Tokens     int64 // number of uint16 tokens
	DataOffset int64 // byte offset of the first token: HeaderBytes, or 0 for a headerless file
	Headerless bool  // nanoGPT's train.bin/val.bin: raw uint16, no header
}

// isHeaderlessName reports whether a file may be a nanoGPT headerless token file.
func isHeaderlessName(path string) bool {
	base := filepath.Base(path)
	return base == "train.bin" || base == "val.bin"
}

// ReadShardHeader opens path, checks its header against its size and returns where its tokens
// are. Every error is one line naming the file and what to do.
func ReadShardHeader(path string) (ShardInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return ShardInfo{}, openError(path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ShardInfo{}, fmt.Errorf("shard %s: %w", path, err)
	}
	if st.IsDir() {
		return ShardInfo{}, fmt.Errorf("shard %s is a directory, not a token file; pass the directory as the dataset instead", path)
	}
	head := make([]byte, min(st.Size(), HeaderBytes))
	if _, err := io.ReadFull(f, head); err != nil {
		return ShardInfo{}, fmt.Errorf("shard %s: read header: %w", path, err)
	}
	return inspectShard(path, head, st.Size())
}

func openError(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shard %s does not exist; check the --data path or run gpt2go prepare: %w", path, fs.ErrNotExist)
	}
	return fmt.Errorf("shard %s: %w", path, err)
}

// inspectShard validates a shard from its first bytes (up to HeaderBytes) and its total size.
func inspectShard(path string, head []byte, size int64) (ShardInfo, error) {
	if size == 0 {
		return ShardInfo{}, fmt.Errorf("shard %s is empty (0 bytes); delete it and re-run gpt2go prepare", path)
	}
	var magic int32 = -1
	if len(head) >= 4 {
		magic = int32(binary.LittleEndian.Uint32(head))
	}
	if magic != ShardMagic {
		if isHeaderlessName(path) {
			if size%2 != 0 {
				return ShardInfo{}, fmt.Errorf("shard %s: headerless uint16 file (nanoGPT) has an odd length of %d bytes; the file is truncated, re-create it", path, size)
			}
			return ShardInfo{Path: path, Tokens: size / 2, Headerless: true}, nil
		}
		if len(head) < 4 {
			return ShardInfo{}, fmt.Errorf("shard %s is %d bytes, too short for the %d-byte llm.c header; re-run gpt2go prepare", path, size, HeaderBytes)
		}
		return ShardInfo{}, fmt.Errorf("shard %s: wrong magic %d, want %d (llm.c token shard); only files named train.bin or val.bin may be headerless nanoGPT uint16 files", path, magic, ShardMagic)
	}
	if size < HeaderBytes {
		return ShardInfo{}, fmt.Errorf("shard %s is truncated: %d bytes, shorter than the %d-byte header; re-run gpt2go prepare", path, size, HeaderBytes)
	}
	if version := int32(binary.LittleEndian.Uint32(head[4:])); version != ShardVersion {
		return ShardInfo{}, fmt.Errorf("shard %s: unsupported version %d, want %d (uint16 GPT-2 tokens; llm.c's version 2 holds uint32 Llama tokens); re-create it with gpt2go prepare", path, version, ShardVersion)
	}
	count := int64(int32(binary.LittleEndian.Uint32(head[8:])))
	if count < 0 {
		return ShardInfo{}, fmt.Errorf("shard %s: header says %d tokens, a corrupt header; re-run gpt2go prepare", path, count)
	}
	body := size - HeaderBytes
	if body != 2*count {
		return ShardInfo{}, fmt.Errorf("shard %s: header says %d tokens, file holds %s; the file is truncated or corrupt, re-run gpt2go prepare", path, count, tokensHeld(body))
	}
	return ShardInfo{Path: path, Tokens: count, DataOffset: HeaderBytes}, nil
}

func tokensHeld(bytes int64) string {
	if bytes%2 != 0 {
		return fmt.Sprintf("%d.5", bytes/2)
	}
	return fmt.Sprint(bytes / 2)
}

// ReadShard reads a whole shard into memory. The Loader reads shards piecewise instead; this is
// for tools and tests.
func ReadShard(path string) ([]uint16, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, openError(path, err)
	}
	return ParseShard(path, b)
}

// ParseShard decodes the bytes of a shard file; path names it in errors and decides whether it
// may be headerless.
func ParseShard(path string, b []byte) ([]uint16, error) {
	info, err := inspectShard(path, b[:min(len(b), HeaderBytes)], int64(len(b)))
	if err != nil {
		return nil, err
	}
	tokens := make([]uint16, info.Tokens)
	decodeTokens(tokens, b[info.DataOffset:])
	return tokens, nil
}

// decodeTokens fills dst from little-endian uint16 bytes (len(src) >= 2*len(dst)).
func decodeTokens(dst []uint16, src []byte) {
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint16(src[2*i:])
	}
}

// appendHeader appends a shard header for n tokens.
func appendHeader(dst []byte, n int64) []byte {
	var header [HeaderBytes]byte
	binary.LittleEndian.PutUint32(header[0:], ShardMagic)
	binary.LittleEndian.PutUint32(header[4:], ShardVersion)
	binary.LittleEndian.PutUint32(header[8:], uint32(n))
	return append(dst, header[:]...)
}

func appendTokens(dst []byte, tokens []uint16) []byte {
	for _, t := range tokens {
		dst = binary.LittleEndian.AppendUint16(dst, t)
	}
	return dst
}

// WriteShard writes tokens as an llm.c shard, atomically.
func WriteShard(path string, tokens []uint16) error {
	if len(tokens) > MaxShardTokens {
		return fmt.Errorf("shard %s: %d tokens exceed the format's limit of %d per shard", path, len(tokens), MaxShardTokens)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		if _, err := w.Write(appendHeader(nil, int64(len(tokens)))); err != nil {
			return err
		}
		_, err := w.Write(appendTokens(nil, tokens))
		return err
	})
}

// ShardWriter streams tokens into one shard whose size is not known in advance. Tokens are held
// in memory up to spillTokens, then spilled to a temp file beside path; Close writes the
// header and the tokens to path atomically, so a reader never sees a half-written shard.
type ShardWriter struct {
	path   string
	buf    []byte // encoded tokens not yet spilled
	spill  *os.File
	tokens int64
	err    error
}

const spillBytes = 16 << 20

// NewShardWriter starts a shard at path; nothing appears at path until Close.
func NewShardWriter(path string) *ShardWriter {
	return &ShardWriter{path: path}
}

// Write appends tokens to the shard.
func (w *ShardWriter) Write(tokens []uint16) error {
	if w.err != nil {
		return w.err
	}
	if w.tokens+int64(len(tokens)) > MaxShardTokens {
		w.err = fmt.Errorf("shard %s: more than %d tokens, the format's limit per shard", w.path, MaxShardTokens)
		return w.err
	}
	w.tokens += int64(len(tokens))
	w.buf = appendTokens(w.buf, tokens)
	if len(w.buf) >= spillBytes {
		if w.spill == nil {
			w.spill, w.err = os.CreateTemp(filepath.Dir(w.path), "."+filepath.Base(w.path)+".spill-*")
			if w.err != nil {
				w.err = fmt.Errorf("shard %s: %w", w.path, w.err)
				return w.err
			}
		}
		if _, err := w.spill.Write(w.buf); err != nil {
			w.err = fmt.Errorf("shard %s: spill: %w", w.path, err)
			return w.err
		}
		w.buf = w.buf[:0]
	}
	return nil
}

// Tokens returns the number of tokens written so far.
func (w *ShardWriter) Tokens() int64 { return w.tokens }

// Close writes the shard file. After an earlier error it removes the spill and returns that error.
func (w *ShardWriter) Close() error {
	defer w.discard()
	if w.err != nil {
		return w.err
	}
	w.err = atomicfile.Write(w.path, func(out io.Writer) error {
		if _, err := out.Write(appendHeader(nil, w.tokens)); err != nil {
			return err
		}
		if w.spill != nil {
			if _, err := w.spill.Seek(0, io.SeekStart); err != nil {
				return err
			}
			if _, err := io.Copy(out, w.spill); err != nil {
				return err
			}
		}
		_, err := out.Write(w.buf)
		return err
	})
	if w.err == nil {
		w.err = fmt.Errorf("shard %s: writer already closed", w.path)
		return nil
	}
	return w.err
}

// Abort drops the shard without writing it.
func (w *ShardWriter) Abort() {
	w.discard()
	w.err = fmt.Errorf("shard %s: writer aborted", w.path)
}

func (w *ShardWriter) discard() {
	if w.spill != nil {
		w.spill.Close()
		os.Remove(w.spill.Name())
		w.spill = nil
	}
	w.buf = nil
}
