package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpt2go/gpt2go/tokenizer"
)

// Dataset is a set of train and val shards and, when there is one, their meta.json.
type Dataset struct {
	Path        string   // what Open was given
	TrainShards []string // sorted
	ValShards   []string // sorted; may be empty
	Meta        *Meta    // nil when there is no meta.json (bare llm.c or nanoGPT shards)
}

// Open finds the shards at path, which is either
//   - a directory: its *.bin files whose names contain "train" (gpt2go's train_000000.bin...,
//     llm.c's tiny_shakespeare_train.bin, nanoGPT's train.bin) are the train shards and those
//     containing "val" the val shards; meta.json is read if present;
//   - a single shard file: the train shard; its val shard is the file of the same name with the
//     last "train" replaced by "val", if that exists; meta.json beside it is read if present.
//
// Every shard's header is checked now, so a bad file fails before training starts.
func Open(path string) (*Dataset, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("data %s does not exist; pass a directory made by gpt2go prepare or a .bin shard", path)
		}
		return nil, fmt.Errorf("data %s: %w", path, err)
	}
	ds := &Dataset{Path: path}
	dir := path
	if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("data %s: %w", path, err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".bin") || strings.HasPrefix(name, ".") {
				continue
			}
			switch {
			case strings.Contains(name, "train"):
				ds.TrainShards = append(ds.TrainShards, filepath.Join(path, name))
			case strings.Contains(name, "val"):
				ds.ValShards = append(ds.ValShards, filepath.Join(path, name))
			}
		}
		slices.Sort(ds.TrainShards)
		slices.Sort(ds.ValShards)
	} else {
		dir = filepath.Dir(path)
		ds.TrainShards = []string{path}
		base := filepath.Base(path)
		if i := strings.LastIndex(base, "train"); i >= 0 {
			val := filepath.Join(dir, base[:i]+"val"+base[i+len("train"):])
			if _, err := os.Stat(val); err == nil {
				ds.ValShards = []string{val}
			}
		}
	}
	if len(ds.TrainShards) == 0 {
		return nil, fmt.Errorf("data %s holds no train shards (*train*.bin); run gpt2go prepare on your text first", path)
	}
	for _, shard := range slices.Concat(ds.TrainShards, ds.ValShards) {
		if _, err := ReadShardHeader(shard); err != nil {
			return nil, err
		}
	}
	meta, err := ReadMeta(dir)
	switch {
	case err == nil:
		ds.Meta = meta
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	return ds, nil
}

// VocabSize is the vocabulary size from meta.json, or 0 (unknown) without one.
func (ds *Dataset) VocabSize() int {
	if ds.Meta == nil {
		return 0
	}
	return ds.Meta.VocabSize
}

// Tokenizer rebuilds the tokenizer recorded in meta.json.
func (ds *Dataset) Tokenizer() (tokenizer.Tokenizer, error) {
	if ds.Meta == nil {
		return nil, fmt.Errorf("data %s has no %s, so its tokenizer is unknown (llm.c and nanoGPT shards usually hold GPT-2 tokens)", ds.Path, MetaFile)
	}
	return ds.Meta.NewTokenizer()
}
