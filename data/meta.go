package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// MetaFile is the name of a dataset directory's description.
const MetaFile = "meta.json"

// Meta is meta.json: how a dataset directory was made, enough to rebuild its tokenizer.
type Meta struct {
	Tokenizer   string   `json:"tokenizer"`          // "gpt2", "byte", "char" or "wordpiece"
	VocabSize   int      `json:"vocab_size"`         // ids are < VocabSize
	EOT         int      `json:"eot"`                // end-of-text id, -1 if none
	Alphabet    string   `json:"alphabet,omitempty"` // char tokenizer: the characters in id order
	TrainTokens int64    `json:"train_tokens"`
	ValTokens   int64    `json:"val_tokens"`
	InputBytes  int64    `json:"input_bytes,omitempty"`
	ValFraction float64  `json:"val_fraction"`
	Sources     []string `json:"sources"` // input files in the order they were read
	// Fingerprint identifies the inputs and options a cache was prepared from, so that a
	// cached dataset is reused only for the same request.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Specials (BERT's special token ids) and, for wordpiece, the casing and the vocab itself
	// (last, being long), so the dataset rebuilds its tokenizer without the vocab.txt.
	tokenizer.Record
}

// IsPrepared reports whether dir is a dataset gpt2go prepare wrote: meta.json beside its first
// train shard, train_000000.bin.
func IsPrepared(dir string) bool {
	for _, name := range []string{MetaFile, "train_000000.bin"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// ReadMeta reads DIR/meta.json. A missing file gives an error that wraps fs.ErrNotExist.
func ReadMeta(dir string) (*Meta, error) {
	path := filepath.Join(dir, MetaFile)
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON (%v); delete the directory and re-run gpt2go prepare", path, err)
	}
	if m.Tokenizer == "" || m.VocabSize <= 0 {
		return nil, fmt.Errorf("%s lacks tokenizer or vocab_size; delete the directory and re-run gpt2go prepare", path)
	}
	return &m, nil
}

// WriteMeta writes DIR/meta.json atomically.
func WriteMeta(dir string, m *Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode meta: %w", err)
	}
	return atomicfile.WriteBytes(filepath.Join(dir, MetaFile), append(b, '\n'))
}

// Spec is what meta.json says about the tokenizer.
func (m *Meta) Spec() tokenizer.Spec {
	return tokenizer.Spec{Name: m.Tokenizer, Alphabet: m.Alphabet, EOT: m.EOT >= 0, Record: m.Record}
}

// NewTokenizer rebuilds the dataset's tokenizer and checks it against the recorded vocabulary.
func (m *Meta) NewTokenizer() (tokenizer.Tokenizer, error) {
	tok, err := m.Spec().Build()
	if err != nil {
		return nil, fmt.Errorf("meta.json: %w", err)
	}
	if tok.VocabSize() != m.VocabSize || tok.EOT() != m.EOT {
		return nil, fmt.Errorf("meta.json says %s tokenizer with vocab %d and eot %d, but it has vocab %d and eot %d; re-run gpt2go prepare",
			m.Tokenizer, m.VocabSize, m.EOT, tok.VocabSize(), tok.EOT())
	}
	return tok, nil
}
