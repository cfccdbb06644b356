package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/safetensors"
)

// testCheckpoint returns a small checkpoint with GPT-2-like tensor names and values that differ
// per element, including NaN payloads and -0 to check bit-exactness.
func testCheckpoint(withMoments bool) *Checkpoint {
	shapes := []struct {
		name  string
		shape []int
	}{{"wte", []int{11, 4}}, {"wpe", []int{8, 4}}, {"ln1w", []int{2, 4}}, {"ln1b", []int{2, 4}}, {"lnfw", []int{4}}, {"scalar", []int{}}}
	c := &Checkpoint{
		Step:     1234,
		Config:   json.RawMessage(`{"model":{"n_layer":2,"n_embd":4},"lr":0.0006}`),
		State:    json.RawMessage(`{"shard":3,"pos":123456,"rng":"<&>\"quoted\""}`),
		Software: "gpt2go test",
		Created:  time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
	}
	n := 0
	for _, s := range shapes {
		c.Tensors = append(c.Tensors, ParamTensor{Name: s.name, Shape: s.shape, Offset: n})
		size := 1
		for _, d := range s.shape {
			size *= d
		}
		n += size
	}
	fill := func(seed uint32) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = math.Float32frombits(seed*2654435761 + uint32(i)*40503)
		}
		x[0] = float32(math.Copysign(0, -1))
		x[1] = math.Float32frombits(0x7fc00001) // NaN with a payload
		return x
	}
	c.Params = fill(1)
	if withMoments {
		c.M, c.V = fill(2), fill(3)
	}
	return c
}

func saveTest(t testing.TB, path string, c *Checkpoint) []byte {
	t.Helper()
	if err := Save(path, c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func checkEqual(t *testing.T, got, want *Checkpoint) {
	t.Helper()
	if got.Step != want.Step || string(got.Config) != string(want.Config) || string(got.State) != string(want.State) ||
		got.Software != want.Software || !got.Created.Equal(want.Created) || !reflect.DeepEqual(got.Tensors, want.Tensors) {
		t.Fatalf("got  %+v\nwant %+v", *got, *want)
	}
	if !sameBits(got.Params, want.Params) || !sameBits(got.M, want.M) || !sameBits(got.V, want.V) {
		t.Fatal("flat arrays are not bit-identical")
	}
}

func TestRoundTrip(t *testing.T) {
	for _, withMoments := range []bool{true, false} {
		t.Run(fmt.Sprintf("moments=%v", withMoments), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "ckpt.safetensors") // Save creates sub/
			want := testCheckpoint(withMoments)
			saveTest(t, path, want)
			got, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			checkEqual(t, got, want)
			// LoadWeights: the same checkpoint without its moments.
			got, err = LoadWeights(path)
			if err != nil {
				t.Fatal(err)
			}
			weights := *want
			weights.M, weights.V = nil, nil
			checkEqual(t, got, &weights)
		})
	}
}

// Verify reads no data but checks it all; ReadParams and ReadMoments then give the arrays in
// consecutive chunks (this checkpoint spans three), and fail with ErrCorrupt when the file
// changes after the verification; LoadLatestVerified picks the newest good one.
func TestVerify(t *testing.T) {
	const n = 2*ioChunk + 12345
	want := &Checkpoint{
		Step:    3,
		Tensors: []ParamTensor{{Name: "wte", Shape: []int{ioChunk + 5}}, {Name: "h", Shape: []int{n - ioChunk - 5}, Offset: ioChunk + 5}},
		Params:  make([]float32, n), M: make([]float32, n), V: make([]float32, n),
	}
	for i := range want.Params {
		want.Params[i], want.M[i], want.V[i] = float32(i)*0.5, 1, 2
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoints", "step_00000003.safetensors")
	raw := saveTest(t, path, want)
	read := func(c *Checkpoint) ([]float32, error) {
		var got []float32
		err := c.ReadParams(func(off int, chunk []float32) error {
			if off != len(got) || len(chunk) == 0 || len(chunk) > ioChunk {
				t.Fatalf("chunk of %d at %d after %d values", len(chunk), off, len(got))
			}
			got = append(got, chunk...)
			return nil
		})
		return got, err
	}
	c, _, warnings, err := LoadLatestVerified(dir)
	if err != nil || len(warnings) > 0 {
		t.Fatal(err, warnings)
	}
	if c.Params != nil || c.M != nil || c.NumParams() != n || c.Step != 3 || !reflect.DeepEqual(c.Tensors, want.Tensors) {
		t.Fatalf("Verify: %d params held, %d counted, step %d, tensors %v", len(c.Params), c.NumParams(), c.Step, c.Tensors)
	}
	got, err := read(c)
	if err != nil || !sameBits(got, want.Params) {
		t.Fatalf("ReadParams: %d values, err %v", len(got), err)
	}
	moments := func(c *Checkpoint) (m, v []float32, err error) {
		err = c.ReadMoments(func(off int, chunk []float32) error { m = append(m, chunk...); return nil },
			func(off int, chunk []float32) error { v = append(v, chunk...); return nil })
		return m, v, err
	}
	if m, v, err := moments(c); err != nil || !c.HasMoments() || !sameBits(m, want.M) || !sameBits(v, want.V) {
		t.Fatalf("ReadMoments: %d and %d values, err %v", len(m), len(v), err)
	}
	eager, err := LoadWeights(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := read(eager); err != nil || !sameBits(got, want.Params) {
		t.Fatalf("ReadParams of LoadWeights' checkpoint: %d values, err %v", len(got), err)
	}
	if _, _, err := moments(eager); err == nil || eager.HasMoments() {
		t.Fatal("ReadMoments of LoadWeights' checkpoint (no moments) did not fail")
	}
	full, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if m, v, err := moments(full); err != nil || !sameBits(m, want.M) || !sameBits(v, want.V) {
		t.Fatalf("ReadMoments of Load's checkpoint: %d and %d values, err %v", len(m), len(v), err)
	}
	stop := errors.New("sink full")
	if err := c.ReadParams(func(int, []float32) error { return stop }); err != stop {
		t.Fatalf("a failing sink: %v", err)
	}
	// The file stays open: a trainer pruning the checkpoint meanwhile does not take it away.
	if err := os.Rename(path, path+".pruned"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path + ".pruned"); err != nil {
		t.Fatal(err)
	}
	if got, err := read(c); err != nil || !sameBits(got, want.Params) {
		t.Fatalf("ReadParams after the file was removed: %d values, err %v", len(got), err)
	}
	c.Close()
	if _, err := read(c); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("ReadParams after Close: %v", err)
	}
	// Changed in place (a flipped parameter, or truncated) after the verification.
	saveTest(t, path, want)
	headerEnd := 8 + int(raw[0]) + int(raw[1])<<8 + int(raw[2])<<16
	b := bytes.Clone(raw)
	b[headerEnd+4*ioChunk+2] ^= 0x10 // a parameter of the second chunk
	inV := bytes.Clone(raw)
	inV[headerEnd+2*4*n+4*ioChunk+2] ^= 0x10 // a second moment of the second chunk
	for i, change := range [][]byte{b, raw[:headerEnd+4*ioChunk+100], inV} {
		if c, err = Verify(path); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, change, 0o644); err != nil { // the same file, rewritten
			t.Fatal(err)
		}
		if i == 2 {
			_, _, err = moments(c)
		} else {
			_, err = read(c)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "changed since it was verified") {
			t.Fatalf("change %d: reading a file changed since: %v", i, err)
		}
		c.Close()
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify of the changed file: %v", err)
	}
}

func TestEmptyConfigAndZeroCreated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	c := testCheckpoint(false)
	c.Config, c.State, c.Created = nil, nil, time.Time{}
	before := time.Now()
	saveTest(t, path, c)
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config != nil || got.State != nil {
		t.Fatalf("config %q, state %q; want nil", got.Config, got.State)
	}
	if got.Created.Before(before.Add(-time.Second)) || got.Created.After(time.Now()) {
		t.Fatalf("created %v, want about now", got.Created)
	}
}

// TestFileIsPlainSafetensors checks what other tools see: the tensor names and order, the
// metadata, and a crc32c they can verify over the data buffer.
func TestFileIsPlainSafetensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	c := testCheckpoint(true)
	raw := saveTest(t, path, c)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range f.Tensors {
		names = append(names, x.Name)
	}
	want := []string{"wte", "wpe", "ln1w", "ln1b", "lnfw", "scalar"}
	want = append(append(want, prefixAll("adam_m.", want)...), prefixAll("adam_v.", want)...)
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("tensors %v\nwant %v", names, want)
	}
	wpe, _ := f.Get("adam_v.wpe")
	x, err := wpe.Float32s()
	if err != nil || !sameBits(x, c.V[c.Tensors[1].Offset:c.Tensors[2].Offset]) {
		t.Fatalf("adam_v.wpe does not hold V's wpe slice (%v)", err)
	}
	m := f.Metadata
	for k, v := range map[string]string{"format": "gpt2go-checkpoint", "version": "1", "step": "1234",
		"config": string(c.Config), "state": string(c.State), "software": "gpt2go test",
		"created": "2025-01-02T03:04:05.000000006Z", "num_params": fmt.Sprint(len(c.Params))} {
		if m[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, m[k], v)
		}
	}
	dataStart := len(raw) - 3*4*len(c.Params)
	crc := crc32.Checksum(raw[dataStart:], crc32.MakeTable(crc32.Castagnoli))
	if m["crc32c"] != fmt.Sprintf("%08x", crc) {
		t.Errorf("crc32c %s, data buffer's CRC-32C is %08x", m["crc32c"], crc)
	}
}

func prefixAll(prefix string, names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, prefix+n)
	}
	return out
}

func TestSaveRejects(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Checkpoint)
		want   string
	}{
		{"negative step", func(c *Checkpoint) { c.Step = -1 }, "negative step"},
		{"bad config", func(c *Checkpoint) { c.Config = json.RawMessage(`{`) }, "config is not valid JSON"},
		{"bad state", func(c *Checkpoint) { c.State = json.RawMessage(`x`) }, "state is not valid JSON"},
		{"only M", func(c *Checkpoint) { c.V = nil }, "AdamW moments"},
		{"short V", func(c *Checkpoint) { c.V = c.V[1:] }, "AdamW moments"},
		{"gap between tensors", func(c *Checkpoint) { c.Tensors[1].Offset++ }, `"wpe" starts at`},
		{"tensor past the end", func(c *Checkpoint) { c.Params = c.Params[:50]; c.M = c.M[:50]; c.V = c.V[:50] }, "runs past the end"},
		{"params not covered", func(c *Checkpoint) { c.Tensors = c.Tensors[:2] }, "cover 76 of"},
		{"duplicate name", func(c *Checkpoint) { c.Tensors[1].Name = "wte" }, "duplicate"},
		{"reserved prefix", func(c *Checkpoint) { c.Tensors[0].Name = "adam_m.x" }, "reserved"},
		{"empty name", func(c *Checkpoint) { c.Tensors[0].Name = "" }, "no name"},
		{"negative dim", func(c *Checkpoint) { c.Tensors[0].Shape = []int{-1} }, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.safetensors")
			old := saveTest(t, path, testCheckpoint(true))
			c := testCheckpoint(true)
			tt.modify(c)
			err := Save(path, c)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got error %v, want one naming the file and containing %q", err, tt.want)
			}
			if now, _ := os.ReadFile(path); !bytes.Equal(now, old) {
				t.Fatal("a failed Save changed the existing checkpoint")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Fatalf("failed Save left files behind: %v", entries)
			}
		})
	}
}

// rewrite edits the saved checkpoint at path through the safetensors package and, if fix is
// set, fixes up both checksums, so tests can build well-checksummed but otherwise wrong
// checkpoints.
func rewrite(t *testing.T, path string, fix bool, edit func(f *safetensors.File)) {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edit(f)
	var data []byte
	specs := make([]safetensors.Spec, len(f.Tensors))
	for i, x := range f.Tensors {
		data = append(data, x.Data...)
		specs[i] = x.Spec()
	}
	if fix {
		f.Metadata[keyCRC] = fmt.Sprintf("%08x", crc32.Checksum(data, castagnoli))
		f.Metadata[keyHeaderCRC] = fmt.Sprintf("%08x", headerCRC(f.Metadata, specs))
	}
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, f.Tensors, f.Metadata); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	raw := saveTest(t, good, testCheckpoint(true))
	headerEnd := 8 + int(raw[0]) + int(raw[1])<<8 + int(raw[2])<<16

	withBytes := func(b []byte) func(string) {
		return func(p string) { os.WriteFile(p, b, 0o644) }
	}
	flip := func(i int) func(string) {
		b := bytes.Clone(raw)
		b[i] ^= 0x10
		return withBytes(b)
	}
	edit := func(e func(f *safetensors.File)) func(string) {
		return func(p string) {
			os.WriteFile(p, raw, 0o644)
			rewrite(t, p, true, e)
		}
	}
	editRaw := func(e func(f *safetensors.File)) func(string) {
		return func(p string) {
			os.WriteFile(p, raw, 0o644)
			rewrite(t, p, false, e)
		}
	}
	tests := []struct {
		name   string
		create func(path string)
		want   string
		kind   error
	}{
		{"missing", func(string) {}, "does not exist", fs.ErrNotExist},
		{"empty", withBytes(nil), "is empty", ErrCorrupt},
		{"truncated in length", withBytes(raw[:5]), "is truncated", ErrCorrupt},
		{"truncated in header", withBytes(raw[:headerEnd/2]), "is truncated (header length is", ErrCorrupt},
		{"truncated after header", withBytes(raw[:headerEnd]), "is truncated (header says the data is", ErrCorrupt},
		{"truncated in data", withBytes(raw[:headerEnd+100]), "is truncated", ErrCorrupt},
		{"one byte short", withBytes(raw[:len(raw)-1]), "is truncated", ErrCorrupt},
		{"extra byte", withBytes(append(bytes.Clone(raw), 0)), "not a valid safetensors file", ErrNotCheckpoint},
		{"not safetensors", withBytes([]byte("step,loss\n1,10.9\n2,10.1\n")), "not a valid safetensors file", ErrNotCheckpoint},
		{"data byte flipped", flip(len(raw) - 7), "is corrupt (checksum mismatch); use an older checkpoint", ErrCorrupt},
		{"first data byte flipped", flip(headerEnd), "checksum mismatch", ErrCorrupt},
		{"header value flipped", flip(bytes.Index(raw, []byte(`123456`))), "header checksum mismatch", ErrCorrupt},
		{"plain safetensors", editRaw(func(f *safetensors.File) { f.Metadata = map[string]string{"format": "pt"} }), `is not a gpt2go checkpoint (format "pt"`, ErrNotCheckpoint},
		{"no metadata", editRaw(func(f *safetensors.File) { f.Metadata = nil }), "is not a gpt2go checkpoint", ErrNotCheckpoint},
		{"other format", edit(func(f *safetensors.File) { f.Metadata["format"] = "llm.c" }), `not a gpt2go checkpoint (format "llm.c"`, ErrNotCheckpoint},
		{"version too new", edit(func(f *safetensors.File) { f.Metadata["version"] = "2" }), "has version 2, this gpt2go reads up to 1; upgrade gpt2go", ErrTooNew},
		{"bad version", edit(func(f *safetensors.File) { f.Metadata["version"] = "one" }), `invalid version "one"`, ErrCorrupt},
		{"no header checksum", editRaw(func(f *safetensors.File) { delete(f.Metadata, keyHeaderCRC) }), "no header_crc32c", ErrCorrupt},
		{"bad step", edit(func(f *safetensors.File) { f.Metadata["step"] = "-3" }), `invalid step "-3"`, ErrCorrupt},
		{"bad state", edit(func(f *safetensors.File) { f.Metadata["state"] = "{" }), "state is not valid JSON", ErrCorrupt},
		{"bad created", edit(func(f *safetensors.File) { f.Metadata["created"] = "yesterday" }), "invalid created time", ErrCorrupt},
		{"bad num_params", edit(func(f *safetensors.File) { f.Metadata["num_params"] = "7" }), `num_params is "7"`, ErrCorrupt},
		{"moment missing", edit(func(f *safetensors.File) { f.Tensors = f.Tensors[:len(f.Tensors)-1] }), "want 0 or 12 AdamW moments", ErrCorrupt},
		{"moment misnamed", edit(func(f *safetensors.File) { f.Tensors[7].Name = "adam_m.x" }), `tensor 7 is "adam_m.x", want "adam_m.wpe"`, ErrCorrupt},
		{"moment reshaped", edit(func(f *safetensors.File) { f.Tensors[6].Shape = []int{4, 11} }), `"adam_m.wte" has shape [4 11], want [11 4]`, ErrCorrupt},
		{"params reordered", edit(func(f *safetensors.File) { f.Tensors[0], f.Tensors[1] = f.Tensors[1], f.Tensors[0] }), `tensor 6 is "adam_m.wte", want "adam_m.wpe"`, ErrCorrupt},
		{"wrong dtype", edit(func(f *safetensors.File) { f.Tensors[4].DType = "I32" }), `"lnfw" has dtype I32`, ErrCorrupt},
	}

	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("case%02d.safetensors", i))
			tt.create(path)
			// LoadWeights keeps no moments and Verify no data at all, but both verify
			// everything all the same (the flipped data byte is in the second moment).
			for _, load := range []func(string) (*Checkpoint, error){Load, LoadWeights, Verify} {
				c, err := load(path)
				if err == nil {
					t.Fatalf("loaded %+v", c)
				}
				msg := err.Error()
				t.Log(msg)
				if !strings.HasPrefix(msg, "checkpoint "+path+" ") || !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
					t.Fatalf("got error %q, want one line naming the file and containing %q", msg, tt.want)
				}
				if !errors.Is(err, tt.kind) {
					t.Fatalf("error %q does not wrap %v", msg, tt.kind)
				}
			}
		})
	}
	if _, err := Load(good); err != nil {
		t.Fatalf("the good checkpoint no longer loads: %v", err)
	}
}

// TestEveryHeaderByteIsProtected flips each byte of the length prefix and JSON header in turn:
// every single flip must fail to load.
func TestEveryHeaderByteIsProtected(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	raw := saveTest(t, path, testCheckpoint(false))
	headerEnd := 8 + int(raw[0]) + int(raw[1])<<8
	for i := 0; i < headerEnd; i++ {
		for _, mask := range []byte{0x01, 0x80} {
			b := bytes.Clone(raw)
			b[i] ^= mask
			os.WriteFile(path, b, 0o644)
			if _, err := Load(path); err == nil {
				t.Fatalf("flipping bit %#x of byte %d (%q) went unnoticed", mask, i, raw[i])
			}
		}
	}
}

func FuzzLoad(f *testing.F) {
	path := filepath.Join(f.TempDir(), "seed.safetensors")
	c := &Checkpoint{
		Step:    7,
		Config:  json.RawMessage(`{"n_layer":1}`),
		Tensors: []ParamTensor{{Name: "lnfw", Shape: []int{4}}, {Name: "s", Shape: []int{}, Offset: 4}},
		Params:  []float32{1, 2, 3, 4, 5}, M: []float32{6, 7, 8, 9, 10}, V: []float32{11, 12, 13, 14, 15},
	}
	raw := saveTest(f, path, c)
	f.Add(raw)
	f.Add(raw[:len(raw)-3])
	var plain bytes.Buffer
	safetensors.Write(&plain, []safetensors.Tensor{safetensors.FromFloat32("wte", []int{1}, []float32{1})}, map[string]string{"format": Format, "version": "1"})
	f.Add(plain.Bytes())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// load is Load after opening the file; fuzzing it in memory keeps the fuzzer fast.
		const path = "fuzz.safetensors"
		c, err := load(path, bytes.NewReader(data), int64(len(data)), everything)
		w, werr := load(path, bytes.NewReader(data), int64(len(data)), weightsOnly)
		if (err == nil) != (werr == nil) || (err == nil && (w.M != nil || !sameBits(w.Params, c.Params))) {
			t.Fatalf("Load and LoadWeights disagree: %v, %v", err, werr)
		}
		v, verr := load(path, bytes.NewReader(data), int64(len(data)), lazy)
		if (err == nil) != (verr == nil) || (err == nil && (v.Params != nil || v.M != nil || v.NumParams() != len(c.Params))) {
			t.Fatalf("Load and Verify disagree: %v, %v", err, verr)
		}
		if err != nil {
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "checkpoint "+path+" ") {
				t.Fatalf("error is not one line naming the file: %q", msg)
			}
			return
		}
		// Whatever loads must be something Save accepts. (Not Save itself: its fsyncs would
		// slow fuzzing a hundredfold; TestRoundTrip covers the round trip.)
		if _, err := c.specs(); err != nil {
			t.Fatalf("loaded a checkpoint Save would reject: %v", err)
		}
		if c.M != nil && (len(c.M) != len(c.Params) || len(c.V) != len(c.Params)) {
			t.Fatalf("moments have %d and %d elements, params %d", len(c.M), len(c.V), len(c.Params))
		}
	})
}

func benchCheckpoint() *Checkpoint {
	const n = 50 << 20 / 12 // Params + M + V = 50 MiB
	c := &Checkpoint{
		Tensors: []ParamTensor{{Name: "wte", Shape: []int{n / 2}}, {Name: "h", Shape: []int{n - n/2}, Offset: n / 2}},
		Params:  make([]float32, n), M: make([]float32, n), V: make([]float32, n),
	}
	for i := range c.Params {
		c.Params[i], c.M[i], c.V[i] = float32(i), float32(i)*0.5, float32(i)*0.25
	}
	return c
}

func BenchmarkSave(b *testing.B) {
	c := benchCheckpoint()
	path := filepath.Join(b.TempDir(), "c.safetensors")
	b.SetBytes(int64(12 * len(c.Params)))
	for b.Loop() {
		if err := Save(path, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoad(b *testing.B) {
	c := benchCheckpoint()
	path := filepath.Join(b.TempDir(), "c.safetensors")
	if err := Save(path, c); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(12 * len(c.Params)))
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSaveIOErrorNamesFile(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o644)
	path := filepath.Join(notDir, "c.safetensors")
	err := Save(path, testCheckpoint(false))
	if err == nil || !strings.Contains(err.Error(), notDir) {
		t.Fatalf("Save under a regular file: %v", err)
	}
}

// Save with Stream (the arrays handed over in chunks, as from a GPU) writes the same file as
// Save from Params, M and V; a stream whose values change between Save's two passes, or that
// gives too few values, fails the save and leaves no file.
func TestSaveStream(t *testing.T) {
	for _, withMoments := range []bool{true, false} {
		dir := t.TempDir()
		want := testCheckpoint(withMoments)
		raw := saveTest(t, filepath.Join(dir, "arrays.safetensors"), want)
		arrays := [][]float32{want.Params, want.M, want.V}
		streamed := *want
		streamed.Params, streamed.M, streamed.V = nil, nil, nil
		streamed.StreamMoments = withMoments
		streamed.Stream = func(i int, sink func(int, []float32) error) error {
			for off := 0; off < len(arrays[i]); off += 5 {
				if err := sink(off, arrays[i][off:min(off+5, len(arrays[i]))]); err != nil {
					return err
				}
			}
			return nil
		}
		if got := saveTest(t, filepath.Join(dir, "stream.safetensors"), &streamed); !bytes.Equal(got, raw) {
			t.Errorf("moments %v: the streamed save differs from the arrays' save", withMoments)
		}
		calls := 0
		changing := streamed
		changing.Stream = func(i int, sink func(int, []float32) error) error {
			calls++
			x := slices.Clone(arrays[i])
			x[3] += float32(calls) // a different value on each pass
			return sink(0, x)
		}
		short := streamed
		short.Stream = func(i int, sink func(int, []float32) error) error { return sink(0, arrays[i][1:]) }
		for name, c := range map[string]*Checkpoint{"changing": &changing, "short": &short} {
			path := filepath.Join(dir, name+".safetensors")
			if err := Save(path, c); err == nil {
				t.Errorf("moments %v: the %s stream saved", withMoments, name)
			}
			if _, err := os.Stat(path); err == nil {
				t.Errorf("moments %v: the failed %s save left a file", withMoments, name)
			}
		}
	}
}
