package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"unicode/utf8"
)

// TensorInfo locates one tensor in a file's data buffer.
type TensorInfo struct {
	Name  string
	DType string
	Shape []int
	// Begin and End delimit the tensor's bytes in the data buffer (not the file: add
	// Header.DataOffset for file offsets).
	Begin, End int64
}

// Spec returns the tensor's name, dtype and shape.
func (t TensorInfo) Spec() Spec { return Spec{Name: t.Name, DType: t.DType, Shape: t.Shape} }

// Header is a parsed and validated safetensors header: every tensor's byte range is known to lie
// inside the file, and together the ranges cover the data buffer exactly.
type Header struct {
	Tensors    []TensorInfo      // in offset order
	Metadata   map[string]string // nil if the file has none
	DataOffset int64             // file offset of the data buffer: 8 + header length
	DataSize   int64             // size of the data buffer: the rest of the file
}

// File is a whole safetensors file in memory.
type File struct {
	Tensors  []Tensor          // in offset order; their Data share one buffer
	Metadata map[string]string // nil if the file has none
}

// Get returns the tensor called name.
func (f *File) Get(name string) (*Tensor, bool) {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i], true
		}
	}
	return nil, false
}

// ReadFile reads and validates the safetensors file at path.
func ReadFile(path string) (*File, error) {
	file, err := readOpen(path, Read)
	if err != nil {
		return nil, fmt.Errorf("read safetensors file %s: %w", path, err)
	}
	return file, nil
}

// ReadFileHeader reads and validates the header of the safetensors file at path, without its data.
func ReadFileHeader(path string) (*Header, error) { return readOpen(path, ReadHeader) }

// readOpen opens the file at path and hands it and its size to read.
func readOpen[T any](path string, read func(io.ReaderAt, int64) (T, error)) (T, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return zero, err
	}
	return read(f, st.Size())
}

// ReadTensorNames returns the tensor names in the header of the safetensors file at path, in
// the header's order. Unlike ReadFileHeader it does not check the tensors' byte ranges against
// the data, so a file cut short after its header still says what it holds.
func ReadTensorNames(path string) ([]string, error) {
	h, err := readOpen(path, readHeader)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(h.Tensors))
	for i, t := range h.Tensors {
		names[i] = t.Name
	}
	return names, nil
}

// Read reads and validates a safetensors file of size bytes from r.
func Read(r io.ReaderAt, size int64) (*File, error) {
	h, err := ReadHeader(r, size)
	if err != nil {
		return nil, err
	}
	if h.DataSize > math.MaxInt {
		return nil, fmt.Errorf("tensor data is %d bytes, too large to read into memory on this machine", h.DataSize)
	}
	data := make([]byte, h.DataSize)
	if err := readAt(r, data, h.DataOffset); err != nil {
		return nil, fmt.Errorf("read tensor data: %w", err)
	}
	f := &File{Tensors: make([]Tensor, len(h.Tensors)), Metadata: h.Metadata}
	for i, t := range h.Tensors {
		f.Tensors[i] = Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: data[t.Begin:t.End:t.End]}
	}
	return f, nil
}

// ReadHeader reads and validates the header of a safetensors file of size bytes, without reading
// the tensor data. Errors wrap ErrTruncated when the file is shorter than the header says.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	h, err := readHeader(r, size)
	if err != nil {
		return nil, err
	}
	if err := checkLayout(h.Tensors, h.DataSize); err != nil {
		return nil, err
	}
	return h, nil
}

// readHeader is ReadHeader without checking the tensors' byte ranges against the data (nor
// sorting them by offset).
func readHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length: %w", size, ErrTruncated)
	}
	var lenBuf [8]byte
	if err := readAt(r, lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("read header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	switch {
	case n == 0:
		return nil, errors.New("header length is 0")
	case n > MaxHeaderSize:
		return nil, fmt.Errorf("header length %d is over the %d-byte limit", n, MaxHeaderSize)
	case n > uint64(size-8):
		return nil, fmt.Errorf("header length is %d but only %d bytes follow: %w", n, size-8, ErrTruncated)
	}
	buf := make([]byte, n)
	if err := readAt(r, buf, 8); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	h, err := parseHeader(buf)
	if err != nil {
		return nil, err
	}
	h.DataOffset = 8 + int64(n)
	h.DataSize = size - h.DataOffset
	return h, nil
}

// readAt fills p from r at off. io.ReaderAt may report io.EOF along with a full read at the end of
// the input; only a short read is an error, and a short read means the file is truncated.
func readAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	switch {
	case n == len(p):
		return nil
	case err == io.EOF || err == io.ErrUnexpectedEOF || err == nil:
		return ErrTruncated
	}
	return err
}

// parseHeader parses the JSON header strictly: exact field names, no duplicate keys, no unknown
// fields, no null where a value is required, nothing but padding after the object.
func parseHeader(buf []byte) (*Header, error) {
	if !utf8.Valid(buf) {
		return nil, errors.New("header is not valid UTF-8")
	}
	if buf[0] != '{' {
		return nil, errors.New("header does not start with '{'")
	}
	h := &Header{}
	err := walkObject(buf, func(key string, value json.RawMessage) error {
		if key == metadataKey {
			m, err := parseMetadata(value)
			h.Metadata = m
			return err
		}
		t, err := parseTensorInfo(key, value)
		h.Tensors = append(h.Tensors, t)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	return h, nil
}

func parseMetadata(value json.RawMessage) (map[string]string, error) {
	if string(value) == "null" {
		return nil, nil
	}
	m := map[string]string{}
	err := walkObject(value, func(key string, v json.RawMessage) error {
		var s string
		if string(v) == "null" || json.Unmarshal(v, &s) != nil {
			return fmt.Errorf("%s value %q is not a string", key, v)
		}
		m[key] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", metadataKey, err)
	}
	return m, nil
}

func parseTensorInfo(name string, value json.RawMessage) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if name == "" {
		return t, errors.New("tensor with an empty name")
	}
	var haveDType, haveShape, haveOffsets bool
	err := walkObject(value, func(key string, v json.RawMessage) error {
		if string(v) == "null" {
			return fmt.Errorf("%s is null", key)
		}
		switch key {
		case "dtype":
			haveDType = true
			if err := json.Unmarshal(v, &t.DType); err != nil {
				return fmt.Errorf("dtype %s is not a string", v)
			}
			if _, ok := dtypeSizes[t.DType]; !ok {
				return fmt.Errorf("unknown dtype %q", t.DType)
			}
		case "shape":
			haveShape = true
			if err := json.Unmarshal(v, &t.Shape); err != nil {
				return fmt.Errorf("shape %s is not a list of integers", v)
			}
			if t.Shape == nil {
				t.Shape = []int{} // a scalar
			}
		case "data_offsets":
			haveOffsets = true
			var offsets []int64
			if err := json.Unmarshal(v, &offsets); err != nil || len(offsets) != 2 {
				return fmt.Errorf("data_offsets %s is not a pair of integers", v)
			}
			t.Begin, t.End = offsets[0], offsets[1]
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		return nil
	})
	switch {
	case err != nil:
	case !haveDType:
		err = errors.New("missing dtype")
	case !haveShape:
		err = errors.New("missing shape")
	case !haveOffsets:
		err = errors.New("missing data_offsets")
	}
	if err != nil {
		return t, fmt.Errorf("tensor %q: %w", name, err)
	}
	return t, nil
}

// walkObject calls fn for each member of the JSON object data, in order, and fails on duplicate
// keys or on anything but whitespace after the object.
func walkObject(data []byte, fn func(key string, value json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("%.40s is not a JSON object", data)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("object key %v is not a string", tok)
		}
		if seen[key] {
			return fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		if err := fn(key, value); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// checkLayout sorts tensors by offset and checks that each has as many bytes as its shape and
// dtype need, and that together they tile the data buffer [0, dataSize) without overlap or gap.
func checkLayout(tensors []TensorInfo, dataSize int64) error {
	slices.SortStableFunc(tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End))
	})
	var end int64
	for _, t := range tensors {
		if t.Begin < 0 || t.End < t.Begin {
			return fmt.Errorf("tensor %q has invalid data_offsets [%d, %d]", t.Name, t.Begin, t.End)
		}
		n, err := t.Spec().NumBytes()
		if err != nil {
			return err
		}
		if t.End-t.Begin != n {
			return fmt.Errorf("tensor %q: shape %v %s needs %d bytes but data_offsets [%d, %d] hold %d", t.Name, t.Shape, t.DType, n, t.Begin, t.End, t.End-t.Begin)
		}
		if t.Begin < end {
			return fmt.Errorf("tensor %q data [%d, %d] overlaps the previous tensor's, which ends at %d", t.Name, t.Begin, t.End, end)
		}
		if t.Begin > end {
			return fmt.Errorf("gap in the data buffer: no tensor covers bytes [%d, %d)", end, t.Begin)
		}
		end = t.End
	}
	if end > dataSize {
		return fmt.Errorf("header says the data is %d bytes but only %d follow the header: %w", end, dataSize, ErrTruncated)
	}
	if end < dataSize {
		return fmt.Errorf("%d bytes after the last tensor's data", dataSize-end)
	}
	return nil
}
