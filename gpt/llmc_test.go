package gpt

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLLMCRoundTripAndErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{BlockSize: 8, VocabSize: 10, PaddedVocabSize: 16, NumLayers: 2, NumHeads: 2, Channels: 6}
	params := make([]float32, cfg.NumParams())
	for i := range params {
		params[i] = float32(i) * 0.25
	}
	path := filepath.Join(dir, "m.bin")
	if err := WriteLLMC(path, cfg, params); err != nil {
		t.Fatal(err)
	}
	got, gotParams, err := ReadLLMC(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != cfg {
		t.Fatalf("config %+v, want %+v", got, cfg)
	}
	for i := range params {
		if gotParams[i] != params[i] {
			t.Fatalf("param %d = %v, want %v", i, gotParams[i], params[i])
		}
	}
	// OpenLLMC's reader reads the file it checked, twice if asked, even after another file of the
	// same shape has been moved to its path.
	_, read, closeFile, err := OpenLLMC(path)
	if err != nil {
		t.Fatal(err)
	}
	other := make([]float32, len(params))
	for i := range other {
		other[i] = -params[i] - 1
	}
	if err := WriteLLMC(filepath.Join(dir, "other.bin"), cfg, other); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "other.bin"), path); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := ReadAll(read, cfg.NumParams()); err != nil || !slices.Equal(got, params) {
			t.Fatalf("OpenLLMC's reader after the file was replaced: %v (the replacement's values: %v)", err, slices.Equal(got, other))
		}
	}
	closeFile()
	if err := WriteLLMC(path, cfg, params); err != nil {
		t.Fatal(err)
	}
	// WriteLLMCFrom in 5-value chunks writes the same bytes; a reader that stops short does not
	// write the file.
	five := func(n int) ParamsReader {
		return func(sink func(off int, chunk []float32) error) error {
			for off := 0; off < n; off += 5 {
				if err := sink(off, params[off:min(off+5, n)]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	if err := WriteLLMCFrom(filepath.Join(dir, "five.bin"), cfg, five(len(params))); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(filepath.Join(dir, "five.bin"))
	if !slices.Equal(a, b) {
		t.Error("WriteLLMCFrom in chunks wrote other bytes than WriteLLMC")
	}
	if err := WriteLLMCFrom(filepath.Join(dir, "short.bin"), cfg, five(len(params)-1)); err == nil {
		t.Error("WriteLLMCFrom with a short reader: no error")
	} else if _, err := os.Stat(filepath.Join(dir, "short.bin")); err == nil {
		t.Error("WriteLLMCFrom with a short reader left a file")
	}
	raw, _ := os.ReadFile(path)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	withInt := func(idx int, v int32) []byte {
		b := append([]byte(nil), raw...)
		binary.LittleEndian.PutUint32(b[4*idx:], uint32(v))
		return b
	}
	cases := []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "nope.bin"), "no such file"},
		{"empty", write("empty.bin", nil), "empty"},
		{"short header", write("short.bin", raw[:100]), "truncated"},
		{"truncated params", write("trunc.bin", raw[:len(raw)-4]), "truncated"},
		{"wrong magic", write("magic.bin", withInt(0, 20240520)), "wrong magic"},
		{"bf16 version", write("v5.bin", withInt(1, 5)), "version 5"},
		{"bad heads", write("heads.bin", withInt(5, 4)), "not divisible"},
		{"absurd size", write("absurd.bin", withInt(6, 1<<30)), "implausible"},
	}
	for _, c := range cases {
		_, _, err := ReadLLMC(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
