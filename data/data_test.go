package data

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rawShard builds shard bytes by hand: magic, version, count header, then body bytes.
func rawShard(magic, version, count int32, body []byte) []byte {
	head := make([]byte, HeaderBytes)
	binary.LittleEndian.PutUint32(head[0:], uint32(magic))
	binary.LittleEndian.PutUint32(head[4:], uint32(version))
	binary.LittleEndian.PutUint32(head[8:], uint32(count))
	return append(head, body...)
}

func u16s(vals ...uint16) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestShardRoundTrip(t *testing.T) {
	dir := t.TempDir()
	tokens := []uint16{0, 1, 65535, 50256, 7}
	path := filepath.Join(dir, "train_000000.bin")
	if err := WriteShard(path, tokens); err != nil {
		t.Fatal(err)
	}
	got, err := ReadShard(path)
	if err != nil || !slices.Equal(got, tokens) {
		t.Fatalf("ReadShard = %v, %v; want %v", got, err, tokens)
	}
	info, err := ReadShardHeader(path)
	if err != nil || info.Tokens != 5 || info.DataOffset != HeaderBytes || info.Headerless {
		t.Fatalf("ReadShardHeader = %+v, %v", info, err)
	}
	// Byte-exact llm.c layout.
	raw, _ := os.ReadFile(path)
	if want := rawShard(ShardMagic, 1, 5, u16s(tokens...)); !bytes.Equal(raw, want) {
		t.Fatal("shard bytes differ from the llm.c layout")
	}
}

func TestShardWriterSpills(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "val_000000.bin")
	w := NewShardWriter(path)
	var want []uint16
	chunk := make([]uint16, 1<<20)
	for i := range 20 { // 20 Mi tokens = 40 MB > spill threshold
		for j := range chunk {
			chunk[j] = uint16(i*7 + j)
		}
		if err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
		want = append(want, chunk...)
		if i == 0 {
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Fatal("shard visible before Close")
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadShard(path)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("spilled shard differs: err %v, %d tokens", err, len(got))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("leftover files: %v", entries)
	}
	w2 := NewShardWriter(filepath.Join(dir, "aborted.bin"))
	w2.Write([]uint16{1})
	w2.Abort()
	if _, err := os.Stat(filepath.Join(dir, "aborted.bin")); err == nil {
		t.Fatal("aborted shard written")
	}
}

func TestShardErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		file string
		data []byte // nil: don't create
		want string
	}{
		{"missing", "x.bin", nil, "does not exist"},
		{"empty", "x.bin", []byte{}, "is empty"},
		{"empty headerless", "train.bin", []byte{}, "is empty"},
		{"tiny", "x.bin", []byte{1, 2}, "too short for the 1024-byte"},
		{"short header", "x.bin", rawShard(ShardMagic, 1, 0, nil)[:100], "shorter than the 1024-byte header"},
		{"truncated", "x.bin", rawShard(ShardMagic, 1, 10, u16s(1, 2, 3)), "header says 10 tokens, file holds 3"},
		{"odd body", "x.bin", rawShard(ShardMagic, 1, 2, []byte{1, 0, 2}), "file holds 1.5"},
		{"too long", "x.bin", rawShard(ShardMagic, 1, 1, u16s(1, 2)), "header says 1 tokens, file holds 2"},
		{"negative count", "x.bin", rawShard(ShardMagic, 1, -5, nil), "header says -5 tokens"},
		{"wrong magic", "x.bin", rawShard(12345, 1, 0, nil), "wrong magic 12345, want 20240520"},
		{"version", "x.bin", rawShard(ShardMagic, 2, 0, nil), "unsupported version 2"},
		{"odd headerless", "train.bin", []byte{1, 2, 3}, "odd length of 3 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name, tc.file)
			os.MkdirAll(filepath.Dir(path), 0o755)
			if tc.data != nil {
				writeFile(t, path, tc.data)
			}
			_, err := ReadShardHeader(path)
			_, err2 := ReadShard(path)
			for _, e := range []error{err, err2} {
				if e == nil || !strings.Contains(e.Error(), tc.want) || !strings.Contains(e.Error(), path) {
					t.Errorf("error %q should contain %q and the path", e, tc.want)
				}
				if e != nil && strings.Contains(e.Error(), "\n") {
					t.Errorf("error is not one line: %q", e)
				}
			}
		})
	}
	if _, err := ReadShardHeader(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory as shard: %v", err)
	}
}

func TestHeaderless(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, filepath.Join(dir, "train.bin"), u16s(5, 6, 7))
	got, err := ReadShard(path)
	if err != nil || !slices.Equal(got, []uint16{5, 6, 7}) {
		t.Fatalf("headerless: %v %v", got, err)
	}
	info, _ := ReadShardHeader(path)
	if !info.Headerless || info.DataOffset != 0 || info.Tokens != 3 {
		t.Fatalf("info %+v", info)
	}
	// A val.bin that does carry the magic is read as an llm.c shard.
	val := filepath.Join(dir, "val.bin")
	if err := WriteShard(val, []uint16{9}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadShard(val); err != nil || !slices.Equal(got, []uint16{9}) {
		t.Fatalf("val.bin with header: %v %v", got, err)
	}
}

// FuzzReadShard: ParseShard never panics, errors on anything that isn't a well-formed shard,
// and what it accepts round-trips.
func FuzzReadShard(f *testing.F) {
	f.Add("x.bin", rawShard(ShardMagic, 1, 2, u16s(1, 2)))
	f.Add("x.bin", rawShard(ShardMagic, 1, 3, u16s(1, 2)))
	f.Add("x.bin", rawShard(ShardMagic, 2, 0, nil))
	f.Add("x.bin", []byte{})
	f.Add("train.bin", []byte{1, 2, 3, 4})
	f.Add("val.bin", []byte{1})
	f.Add("x.bin", []byte("not a shard at all"))
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		tokens, err := ParseShard(name, b)
		if err != nil {
			if tokens != nil {
				t.Fatal("tokens returned with an error")
			}
			return
		}
		headerless := isHeaderlessName(name) && (len(b) < 4 || binary.LittleEndian.Uint32(b) != ShardMagic)
		if headerless {
			if len(b) != 2*len(tokens) || len(b) == 0 {
				t.Fatalf("headerless: %d bytes gave %d tokens", len(b), len(tokens))
			}
			return
		}
		want := rawShard(ShardMagic, 1, int32(len(tokens)), u16s(tokens...))
		if !bytes.Equal(want[:12], b[:12]) || !bytes.Equal(want[HeaderBytes:], b[HeaderBytes:]) || len(want) != len(b) {
			t.Fatalf("accepted a malformed shard of %d bytes", len(b))
		}
	})
}

func TestMetaRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m := &Meta{Tokenizer: "char", VocabSize: 3, EOT: -1, Alphabet: "abc", TrainTokens: 10, ValTokens: 2, Sources: []string{"a.txt"}}
	if err := WriteMeta(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(m)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("meta round trip: %s != %s", b, a)
	}
	tok, err := got.NewTokenizer()
	if err != nil || tok.VocabSize() != 3 {
		t.Fatalf("NewTokenizer: %v %v", tok, err)
	}
	m.VocabSize = 4
	if _, err := m.NewTokenizer(); err == nil || !strings.Contains(err.Error(), "vocab 4") {
		t.Fatalf("vocab mismatch not caught: %v", err)
	}
	m.Tokenizer = "wordpiece"
	if _, err := m.NewTokenizer(); err == nil {
		t.Fatal("unknown tokenizer accepted")
	}
}

func TestMetaErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadMeta(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing meta: %v", err)
	}
	writeFile(t, filepath.Join(dir, MetaFile), []byte("{"))
	if _, err := ReadMeta(dir); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("bad JSON: %v", err)
	}
	writeFile(t, filepath.Join(dir, MetaFile), []byte("{}"))
	if _, err := ReadMeta(dir); err == nil || !strings.Contains(err.Error(), "lacks tokenizer") {
		t.Fatalf("empty meta: %v", err)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"train_000001.bin", "train_000000.bin", "val_000000.bin"} {
		if err := WriteShard(filepath.Join(dir, name), []uint16{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "notes.txt"), []byte("x"))
	ds, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "train_000000.bin"), filepath.Join(dir, "train_000001.bin")}
	if !slices.Equal(ds.TrainShards, want) || len(ds.ValShards) != 1 || ds.Meta != nil || ds.VocabSize() != 0 {
		t.Fatalf("Open(dir) = %+v", ds)
	}
	if _, err := ds.Tokenizer(); err == nil {
		t.Fatal("tokenizer without meta")
	}
	if err := WriteMeta(dir, &Meta{Tokenizer: "byte", VocabSize: 257, EOT: 256}); err != nil {
		t.Fatal(err)
	}
	if ds, err = Open(dir); err != nil || ds.VocabSize() != 257 {
		t.Fatalf("with meta: %+v %v", ds, err)
	}
	if tok, err := ds.Tokenizer(); err != nil || tok.Name() != "byte" {
		t.Fatalf("Tokenizer: %v %v", tok, err)
	}

	// A single shard and its val sibling.
	ds, err = Open(filepath.Join(dir, "train_000000.bin"))
	if err != nil || !slices.Equal(ds.ValShards, []string{filepath.Join(dir, "val_000000.bin")}) || ds.Meta == nil {
		t.Fatalf("Open(shard) = %+v, %v", ds, err)
	}
	ds, err = Open(filepath.Join(dir, "train_000001.bin"))
	if err != nil || len(ds.ValShards) != 0 {
		t.Fatalf("Open(shard without val) = %+v, %v", ds, err)
	}

	// nanoGPT layout.
	nano := t.TempDir()
	writeFile(t, filepath.Join(nano, "train.bin"), u16s(1, 2, 3, 4))
	writeFile(t, filepath.Join(nano, "val.bin"), u16s(1, 2))
	if ds, err = Open(nano); err != nil || len(ds.TrainShards) != 1 || len(ds.ValShards) != 1 {
		t.Fatalf("nanoGPT dir: %+v %v", ds, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing: %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "no train shards") {
		t.Errorf("empty dir: %v", err)
	}
	writeFile(t, filepath.Join(dir, "val_000000.bin"), rawShard(ShardMagic, 1, 0, nil))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "no train shards") {
		t.Errorf("val only: %v", err)
	}
	writeFile(t, filepath.Join(dir, "train_000000.bin"), rawShard(ShardMagic, 1, 9, nil))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "header says 9 tokens") {
		t.Errorf("bad shard: %v", err)
	}
	bad := t.TempDir()
	WriteShard(filepath.Join(bad, "train_000000.bin"), []uint16{1})
	writeFile(t, filepath.Join(bad, MetaFile), []byte("nope"))
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("bad meta: %v", err)
	}
}
