package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func write(t testing.TB, tensors []Tensor, metadata map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, tensors, metadata); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawFile assembles a file from a literal JSON header and a data buffer, without padding.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func f32le(xs ...float32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// TestLayoutMatchesReference checks our bytes against the byte vectors in the reference
// implementation's own serialization tests (huggingface/safetensors, safetensors/src/tensor.rs).
func TestLayoutMatchesReference(t *testing.T) {
	tests := []struct {
		name     string
		tensors  []Tensor
		metadata map[string]string
		want     []byte
	}{
		{
			name: "empty",
			want: []byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '},
		},
		{
			name:     "empty with metadata",
			metadata: map[string]string{"framework": "pt"},
			want:     append([]byte{40, 0, 0, 0, 0, 0, 0, 0}, `{"__metadata__":{"framework":"pt"}}     `...),
		},
		{
			name:    "one tensor, header already a multiple of 8",
			tensors: []Tensor{FromFloat32("attn.0", []int{1, 2, 3}, []float32{0, 1, 2, 3, 4, 5})},
			want: append(append([]byte{64, 0, 0, 0, 0, 0, 0, 0},
				`{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}`...),
				f32le(0, 1, 2, 3, 4, 5)...),
		},
		{
			name:    "one tensor, header padded with 7 spaces",
			tensors: []Tensor{FromFloat32("attn0", []int{1, 1, 2, 3}, []float32{0, 1, 2, 3, 4, 5})},
			want: append(append([]byte{72, 0, 0, 0, 0, 0, 0, 0},
				`{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       `...),
				f32le(0, 1, 2, 3, 4, 5)...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := write(t, tt.tensors, tt.metadata)
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("got\n%q\nwant\n%q", got, tt.want)
			}
			if _, err := Read(bytes.NewReader(got), int64(len(got))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLayoutMetadataFirstAndOrder(t *testing.T) {
	got := write(t, []Tensor{
		{Name: "z<&>", DType: "U8", Shape: []int{2}, Data: []byte{1, 2}},
		FromInt32("a", []int{}, []int32{-7}),
	}, map[string]string{"b": "2", "a": `{"x":"<y>"}`})
	n := binary.LittleEndian.Uint64(got)
	header := string(got[8 : 8+n])
	want := `{"__metadata__":{"a":"{\"x\":\"<y>\"}","b":"2"},"z<&>":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"I32","shape":[],"data_offsets":[2,6]}}`
	if strings.TrimRight(header, " ") != want || n%8 != 0 || len(header)-len(want) >= 8 {
		t.Fatalf("header %q, want %q padded to a multiple of 8", header, want)
	}
	if !bytes.Equal(got[8+n:], []byte{1, 2, 0xf9, 0xff, 0xff, 0xff}) {
		t.Fatalf("data %v", got[8+n:])
	}
}

func TestRoundTrip(t *testing.T) {
	tensors := []Tensor{
		FromFloat32("wte", []int{2, 3}, []float32{1, -2, 3.5, float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1))}),
		FromInt32("tokens", []int{4}, []int32{0, -1, math.MaxInt32, math.MinInt32}),
		{Name: "scalar", DType: "F64", Shape: []int{}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{Name: "empty", DType: "BF16", Shape: []int{0, 5}, Data: nil},
		{Name: "flags", DType: "BOOL", Shape: []int{3}, Data: []byte{1, 0, 1}},
		{Name: "h", DType: "F16", Shape: []int{1, 1}, Data: []byte{0x00, 0x3c}},
	}
	metadata := map[string]string{"format": "pt", "note": "ünïcode \"quoted\"\n"}
	file := write(t, tensors, metadata)

	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Metadata, metadata) {
		t.Fatalf("metadata %v, want %v", got.Metadata, metadata)
	}
	if len(got.Tensors) != len(tensors) {
		t.Fatalf("%d tensors, want %d", len(got.Tensors), len(tensors))
	}
	for i, want := range tensors {
		g := got.Tensors[i] // written in order, so offset order is the same
		if g.Name != want.Name || g.DType != want.DType || !reflect.DeepEqual(g.Shape, want.Shape) || !bytes.Equal(g.Data, want.Data) {
			t.Errorf("tensor %d: got %+v, want %+v", i, g, want)
		}
		if p, ok := got.Get(want.Name); !ok || p != &got.Tensors[i] {
			t.Errorf("Get(%q) = %v, %v", want.Name, p, ok)
		}
	}
	if _, ok := got.Get("nope"); ok {
		t.Error("Get found a missing tensor")
	}
	x, err := got.Tensors[0].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tensors[0].Float32s()
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
			t.Errorf("wte[%d] = %v, want %v (bit-exact)", i, x[i], want[i])
		}
	}
	ints, err := got.Tensors[1].Int32s()
	if err != nil || !reflect.DeepEqual(ints, []int32{0, -1, math.MaxInt32, math.MinInt32}) {
		t.Errorf("Int32s = %v, %v", ints, err)
	}
}

func TestTensorConversionErrors(t *testing.T) {
	f := FromFloat32("f", []int{2}, []float32{1, 2})
	if _, err := f.Int32s(); err == nil || !strings.Contains(err.Error(), "dtype F32, not I32") {
		t.Errorf("Int32s on F32: %v", err)
	}
	i := FromInt32("i", []int{3}, []int32{1, 2}) // shape says 3
	if _, err := i.Int32s(); err == nil || !strings.Contains(err.Error(), "needs 12") {
		t.Errorf("Int32s with short data: %v", err)
	}
	bad := Tensor{Name: "b", DType: "F32", Shape: []int{-1}}
	if _, err := bad.Float32s(); err == nil {
		t.Error("Float32s with negative shape: no error")
	}
}

func TestWriteRejects(t *testing.T) {
	ok := FromFloat32("ok", []int{1}, []float32{1})
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"empty name", []Tensor{{Name: "", DType: "U8", Shape: []int{0}}}, nil, "empty name"},
		{"reserved name", []Tensor{{Name: "__metadata__", DType: "U8", Shape: []int{0}}}, nil, "reserved"},
		{"duplicate", []Tensor{ok, ok}, nil, "duplicate tensor name"},
		{"unknown dtype", []Tensor{{Name: "x", DType: "F31", Shape: []int{1}, Data: []byte{0}}}, nil, "unknown dtype"},
		{"negative dim", []Tensor{{Name: "x", DType: "U8", Shape: []int{-1}}}, nil, "negative dimension"},
		{"overflow", []Tensor{{Name: "x", DType: "F64", Shape: []int{1 << 31, 1 << 31, 1 << 2}}}, nil, "too large"},
		{"short data", []Tensor{ok, FromFloat32("x", []int{2, 2}, []float32{1, 2, 3})}, nil, "needs 16"},
		{"bad utf8 name", []Tensor{{Name: "\xff", DType: "U8", Shape: []int{0}}}, nil, "UTF-8"},
		{"bad utf8 metadata", nil, map[string]string{"k": "\xff"}, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tt.tensors, tt.meta)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one containing %q", err, tt.want)
			}
			if buf.Len() != 0 {
				t.Fatalf("wrote %d bytes before failing", buf.Len())
			}
		})
	}
}

func TestWriterStreams(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tensors := []Tensor{
		FromFloat32("a", []int{2, 2}, x[:4]),
		{Name: "gap", DType: "F32", Shape: []int{0}},
		FromFloat32("b", []int{6}, x[4:]),
		FromInt32("tok", []int{2}, []int32{7, 8}),
	}
	specs := make([]Spec, len(tensors))
	for i, tt := range tensors {
		specs[i] = tt.Spec()
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, specs, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	// One write spanning two F32 tensors (and the empty one between), then the ints.
	if err := w.WriteFloat32s(x[:5]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), `tensor "b" is incomplete`) {
		t.Fatalf("Close before the end: %v", err)
	}
	if err := w.WriteFloat32s(x[5:]); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFloat32s([]float32{1}); err == nil || !strings.Contains(err.Error(), "into tensor \"tok\" of dtype I32") {
		t.Fatalf("F32 into I32 tensor: %v", err)
	}
	if err := w.WriteInt32s([]int32{7, 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte{0}); err == nil || !strings.Contains(err.Error(), "past the end") {
		t.Fatalf("write past the end: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if want := write(t, tensors, map[string]string{"k": "v"}); !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("streamed file differs from Write's:\n%q\n%q", buf.Bytes(), want)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n < len(p) {
		return 0, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriterErrorIsSticky(t *testing.T) {
	w, err := NewWriter(&failWriter{n: 1000}, []Spec{{Name: "a", DType: "F32", Shape: []int{1000}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFloat32s(make([]float32, 1000)); err == nil {
		t.Fatal("no error from a full disk")
	}
	if err := w.Close(); err == nil || err.Error() != "disk full" {
		t.Fatalf("Close after a failed write: %v", err)
	}
}

func TestReadAccepts(t *testing.T) {
	tests := []struct {
		name   string
		file   []byte
		tensor []string // names in offset order
	}{
		{"padding spaces", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}   `, []byte{9}), []string{"a"}},
		{"null metadata", rawFile(`{"__metadata__":null}`, nil), nil},
		{"offsets out of name order", rawFile(`{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1, 2}), []string{"a", "b"}},
		{"zero-size tensors share an offset", rawFile(`{"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1}), []string{"e", "a"}},
		{"scalar", rawFile(`{"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}}`, make([]byte, 8)), []string{"s"}},
		{"huge dims times zero", rawFile(`{"z":{"dtype":"F64","shape":[9223372036854775807,9223372036854775807,0],"data_offsets":[0,0]}}`, nil), []string{"z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Read(bytes.NewReader(tt.file), int64(len(tt.file)))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, x := range f.Tensors {
				names = append(names, x.Name)
			}
			if !reflect.DeepEqual(names, tt.tensor) {
				t.Fatalf("tensors %v, want %v", names, tt.tensor)
			}
		})
	}
}

func TestReadRejects(t *testing.T) {
	const u8 = `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`
	tooBig := binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)
	tests := []struct {
		name      string
		file      []byte
		want      string
		truncated bool
	}{
		{"empty", nil, "too short", true},
		{"shorter than length", []byte{1, 2, 3}, "too short", true},
		{"zero header length", make([]byte, 16), "header length is 0", false},
		{"header too large", append(tooBig, "{}"...), "over the 100000000-byte limit", false},
		{"header past the end", rawFile(u8, []byte{1, 2})[:20], "only 12 bytes follow", true},
		{"data truncated", rawFile(u8, []byte{1}), "only 1 follow the header", true},
		{"trailing data", rawFile(u8, []byte{1, 2, 3}), "1 bytes after the last tensor", false},
		{"invalid utf8", rawFile("{\"\xff\":1}", nil), "UTF-8", false},
		{"not an object", rawFile(`[1,2]`, nil), "start with '{'", false},
		{"leading space", rawFile(` {}`, nil), "start with '{'", false},
		{"bad json", rawFile(`{"a":`, nil), "header", false},
		{"garbage after object", rawFile(`{}x`, nil), "header", false},
		{"second object", rawFile(`{}{}`, nil), "after the JSON object", false},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2}), `duplicate key "a"`, false},
		{"duplicate metadata key", rawFile(`{"__metadata__":{"k":"1","k":"2"}}`, nil), `duplicate key "k"`, false},
		{"metadata not a string", rawFile(`{"__metadata__":{"k":1}}`, nil), "not a string", false},
		{"metadata null value", rawFile(`{"__metadata__":{"k":null}}`, nil), "not a string", false},
		{"metadata not an object", rawFile(`{"__metadata__":"x"}`, nil), "not a JSON object", false},
		{"tensor not an object", rawFile(`{"a":[1]}`, nil), "not a JSON object", false},
		{"empty name", rawFile(`{"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), "empty name", false},
		{"unknown dtype", rawFile(`{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `unknown dtype "F33"`, false},
		{"lowercase dtype", rawFile(`{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `unknown dtype "f32"`, false},
		{"dtype not a string", rawFile(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), "dtype 4 is not a string", false},
		{"field name case", rawFile(`{"a":{"DTYPE":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `unknown field "DTYPE"`, false},
		{"unknown field", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, []byte{1}), `unknown field "x"`, false},
		{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, []byte{1}), "missing dtype", false},
		{"missing shape", rawFile(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, []byte{1}), "missing shape", false},
		{"missing offsets", rawFile(`{"a":{"dtype":"U8","shape":[1]}}`, []byte{1}), "missing data_offsets", false},
		{"null shape", rawFile(`{"a":{"dtype":"U8","shape":null,"data_offsets":[0,1]}}`, []byte{1}), "shape is null", false},
		{"negative dim", rawFile(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, []byte{1}), "negative dimension", false},
		{"fractional dim", rawFile(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, []byte{1}), "not a list of integers", false},
		{"dim overflows int", rawFile(`{"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,1]}}`, []byte{1}), "not a list of integers", false},
		{"byte size overflows", rawFile(`{"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,1]}}`, []byte{1}), "too large", false},
		{"three offsets", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, []byte{1}), "not a pair", false},
		{"negative offset", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, []byte{1}), "invalid data_offsets", false},
		{"end before begin", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}}`, []byte{1}), "invalid data_offsets", false},
		{"size mismatch", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), "needs 8 bytes", false},
		{"overlap", rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, make([]byte, 3)), "overlaps", false},
		{"gap", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`, make([]byte, 3)), "gap in the data buffer", false},
		{"leading gap", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), "gap in the data buffer", false},
		{"offset far past the end", rawFile(`{"a":{"dtype":"U8","shape":[1000000000000],"data_offsets":[0,1000000000000]}}`, nil), "only 0 follow", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tt.file), int64(len(tt.file)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %v, want one containing %q", err, tt.want)
			}
			if errors.Is(err, ErrTruncated) != tt.truncated {
				t.Fatalf("errors.Is(%v, ErrTruncated) = %v, want %v", err, !tt.truncated, tt.truncated)
			}
		})
	}
}

func TestReadFileErrorsNamePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	os.WriteFile(path, rawFile(`{}x`, nil), 0o644)
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v does not name %s", err, path)
	}
	if _, err := ReadFile(path + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestReadTensorNames: the names come from the header alone, so a file cut in its data still
// gives them (ReadFileHeader refuses it), and one cut in its header does not.
func TestReadTensorNames(t *testing.T) {
	file := write(t, []Tensor{FromFloat32("b", []int{2}, []float32{1, 2}), FromFloat32("a", []int{3}, []float32{3, 4, 5})}, nil)
	path := filepath.Join(t.TempDir(), "cut.safetensors")
	os.WriteFile(path, file[:len(file)-4], 0o644)
	if _, err := ReadFileHeader(path); !errors.Is(err, ErrTruncated) {
		t.Fatalf("ReadFileHeader of a file cut in its data: %v", err)
	}
	if names, err := ReadTensorNames(path); err != nil || !reflect.DeepEqual(names, []string{"b", "a"}) {
		t.Errorf("ReadTensorNames = %v, %v; want [b a]", names, err)
	}
	os.WriteFile(path, file[:12], 0o644)
	if names, err := ReadTensorNames(path); !errors.Is(err, ErrTruncated) {
		t.Errorf("ReadTensorNames of a file cut in its header = %v, %v", names, err)
	}
}

// TestFloat32Paths checks the direct (little-endian host) and chunked (portable) conversions
// against each other on lengths around the chunk size.
func TestFloat32Paths(t *testing.T) {
	for _, n := range []int{0, 1, 3, chunkElems - 1, chunkElems, chunkElems + 1, 2*chunkElems + 5} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i)*0.5 - 7
		}
		var direct, chunked bytes.Buffer
		if err := WriteFloat32s(&direct, x); err != nil {
			t.Fatal(err)
		}
		if err := writeFloat32sChunked(&chunked, x); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(direct.Bytes(), chunked.Bytes()) || direct.Len() != 4*n {
			t.Fatalf("n=%d: direct and chunked encodings differ", n)
		}
		if n > 0 && !bytes.Equal(direct.Bytes()[:4], f32le(x[0])) {
			t.Fatalf("n=%d: not little-endian", n)
		}
		for _, read := range []func(io.Reader, []float32) error{ReadFloat32s, readFloat32sChunked} {
			got := make([]float32, n)
			if err := read(bytes.NewReader(direct.Bytes()), got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, x) {
				t.Fatalf("n=%d: read back differs", n)
			}
			if n > 0 {
				err := read(bytes.NewReader(direct.Bytes()[:4*n-1]), got)
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("n=%d: short read gave %v", n, err)
				}
			}
		}
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	Write(&buf, []Tensor{
		FromFloat32("w", []int{2, 2}, []float32{1, 2, 3, 4}),
		{Name: "e", DType: "U8", Shape: []int{0}},
		FromInt32("t", []int{1}, []int32{5}),
	}, map[string]string{"k": "v"})
	f.Add(buf.Bytes())
	f.Add(rawFile(`{}`, nil))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, []byte{1, 2}))
	f.Add(rawFile(`{"__metadata__":{"a":"b"},"x":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, []byte{0, 0x3c}))
	f.Add([]byte{})
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255, '{'})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		// Whatever reads must write back and read again to the same tensors in the same order.
		var out bytes.Buffer
		if err := Write(&out, file.Tensors, file.Metadata); err != nil {
			t.Fatalf("rewrite a file that read fine: %v", err)
		}
		again, err := Read(bytes.NewReader(out.Bytes()), int64(out.Len()))
		if err != nil {
			t.Fatalf("reread: %v", err)
		}
		if len(again.Tensors) != len(file.Tensors) || len(again.Metadata) != len(file.Metadata) {
			t.Fatalf("reread: %d tensors, %d metadata; want %d, %d", len(again.Tensors), len(again.Metadata), len(file.Tensors), len(file.Metadata))
		}
		for i, x := range file.Tensors {
			y := again.Tensors[i]
			if x.Name != y.Name || x.DType != y.DType || !reflect.DeepEqual(x.Shape, y.Shape) || !bytes.Equal(x.Data, y.Data) {
				t.Fatalf("tensor %d: %+v became %+v", i, x, y)
			}
		}
		for k, v := range file.Metadata {
			if again.Metadata[k] != v {
				t.Fatalf("metadata %q: %q became %q", k, v, again.Metadata[k])
			}
		}
	})
}

// BenchmarkReadFloat32sChunked measures the portable conversion used on big-endian hosts.
func BenchmarkReadFloat32sChunked(b *testing.B) {
	x := make([]float32, 1<<22)
	data := make([]byte, 4*len(x))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		readFloat32sChunked(bytes.NewReader(data), x)
	}
}
