package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Write writes tensors, in the given order, and metadata (may be nil) as a safetensors file.
// Nothing is written if a tensor is invalid or its data does not match its shape.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	specs := make([]Spec, len(tensors))
	for i, t := range tensors {
		specs[i] = t.Spec()
	}
	sw, err := prepare(w, specs, metadata)
	if err != nil {
		return err
	}
	for i, t := range tensors {
		if want := sw.ends[i] - sw.start(i); int64(len(t.Data)) != want {
			return fmt.Errorf("tensor %q has %d bytes of data, shape %v %s needs %d", t.Name, len(t.Data), t.Shape, t.DType, want)
		}
	}
	if err := sw.writeHeader(); err != nil {
		return err
	}
	for _, t := range tensors {
		if _, err := sw.Write(t.Data); err != nil {
			return err
		}
	}
	return sw.Close()
}

// Writer streams a safetensors file whose tensors are declared up front: NewWriter writes the
// header, then the tensors' data is written in declaration order with Write, WriteFloat32s or
// WriteInt32s, in as many calls as convenient, and Close checks that all of it arrived. This lets
// a caller save tensors far larger than it could copy into one []byte.
type Writer struct {
	w      io.Writer
	specs  []Spec
	ends   []int64 // ends[i] is the end offset of tensor i in the data buffer
	header []byte  // length prefix + padded JSON
	pos    int64   // data bytes written so far
	cur    int     // index of the first tensor with data not yet fully written
	err    error   // first write error; every later call returns it
}

// NewWriter validates specs (known dtypes, non-negative shapes, unique non-empty names) and
// metadata, and writes the header to w.
func NewWriter(w io.Writer, specs []Spec, metadata map[string]string) (*Writer, error) {
	sw, err := prepare(w, specs, metadata)
	if err != nil {
		return nil, err
	}
	if err := sw.writeHeader(); err != nil {
		return nil, err
	}
	return sw, nil
}

func prepare(w io.Writer, specs []Spec, metadata map[string]string) (*Writer, error) {
	sw := &Writer{w: w, specs: specs, ends: make([]int64, len(specs))}
	seen := make(map[string]bool, len(specs))
	var offset int64
	for i, s := range specs {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("tensor %d has an empty name", i)
		case s.Name == metadataKey:
			return nil, fmt.Errorf("tensor name %q is reserved for metadata", s.Name)
		case !utf8.ValidString(s.Name):
			return nil, fmt.Errorf("tensor name %q is not valid UTF-8", s.Name)
		case seen[s.Name]:
			return nil, fmt.Errorf("duplicate tensor name %q", s.Name)
		}
		seen[s.Name] = true
		n, err := s.NumBytes()
		if err != nil {
			return nil, err
		}
		if offset+n < offset {
			return nil, fmt.Errorf("tensors are too large in total")
		}
		offset += n
		sw.ends[i] = offset
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("metadata %q is not valid UTF-8", k)
		}
	}
	header, err := encodeHeader(specs, sw.ends, metadata)
	if err != nil {
		return nil, err
	}
	sw.header = header
	sw.skipFinished()
	return sw, nil
}

// encodeHeader returns the 8-byte length and the JSON header, laid out as the reference
// implementation does: compact, "__metadata__" first (keys sorted), tensors in file order with
// fields dtype, shape, data_offsets, then spaces up to a multiple of 8 bytes.
func encodeHeader(specs []Spec, ends []int64, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.Write(make([]byte, 8)) // length, filled in below
	b.WriteByte('{')
	if len(metadata) > 0 {
		writeJSONString(&b, metadataKey)
		b.WriteString(":{")
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, metadata[k])
		}
		b.WriteByte('}')
		if len(specs) > 0 {
			b.WriteByte(',')
		}
	}
	var begin int64
	for i, s := range specs {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, s.Name)
		b.WriteString(`:{"dtype":`)
		writeJSONString(&b, s.DType)
		b.WriteString(`,"shape":[`)
		for j, d := range s.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, begin, ends[i])
		begin = ends[i]
	}
	b.WriteByte('}')
	for (b.Len()-8)%8 != 0 {
		b.WriteByte(' ')
	}
	header := b.Bytes()
	n := len(header) - 8
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header is %d bytes, more than the format's limit of %d", n, MaxHeaderSize)
	}
	binary.LittleEndian.PutUint64(header, uint64(n))
	return header, nil
}

// writeJSONString writes s as a JSON string without Go's HTML escaping of <, > and &, which the
// reference writer does not do either.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // cannot fail for a string
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

func (sw *Writer) writeHeader() error {
	_, err := sw.w.Write(sw.header)
	sw.err = err
	return err
}

// start is tensor i's begin offset in the data buffer.
func (sw *Writer) start(i int) int64 {
	if i == 0 {
		return 0
	}
	return sw.ends[i-1]
}

// total is the size of the data buffer.
func (sw *Writer) total() int64 {
	if len(sw.ends) == 0 {
		return 0
	}
	return sw.ends[len(sw.ends)-1]
}

// skipFinished moves cur past tensors whose data is complete, including empty ones.
func (sw *Writer) skipFinished() {
	for sw.cur < len(sw.ends) && sw.ends[sw.cur] <= sw.pos {
		sw.cur++
	}
}

// advance checks that n more bytes fit in the data buffer and, if dtype is not empty, that every
// tensor they land in has that dtype.
func (sw *Writer) advance(n int64, dtype string) error {
	if sw.err != nil {
		return sw.err
	}
	if n > sw.total()-sw.pos {
		return fmt.Errorf("write of %d bytes at offset %d goes past the end of the data (%d bytes)", n, sw.pos, sw.total())
	}
	if dtype != "" {
		for i := sw.cur; i < len(sw.specs) && sw.start(i) < sw.pos+n; i++ {
			if s := sw.specs[i]; s.DType != dtype && sw.ends[i] > sw.start(i) {
				return fmt.Errorf("writing %s data into tensor %q of dtype %s", dtype, s.Name, s.DType)
			}
		}
	}
	return nil
}

func (sw *Writer) written(n int, err error) error {
	sw.pos += int64(n)
	sw.skipFinished()
	if err != nil {
		sw.err = err
	}
	return err
}

// Write writes raw little-endian tensor data, continuing where the previous write stopped.
func (sw *Writer) Write(p []byte) (int, error) {
	if err := sw.advance(int64(len(p)), ""); err != nil {
		return 0, err
	}
	n, err := sw.w.Write(p)
	return n, sw.written(n, err)
}

// WriteFloat32s writes x as the next 4*len(x) bytes of data, which must belong to F32 tensors.
func (sw *Writer) WriteFloat32s(x []float32) error {
	if err := sw.advance(4*int64(len(x)), "F32"); err != nil {
		return err
	}
	return sw.written(4*len(x), WriteFloat32s(sw.w, x))
}

// WriteInt32s writes x as the next 4*len(x) bytes of data, which must belong to I32 tensors.
func (sw *Writer) WriteInt32s(x []int32) error {
	if err := sw.advance(4*int64(len(x)), "I32"); err != nil {
		return err
	}
	return sw.written(4*len(x), WriteInt32s(sw.w, x))
}

// Close checks that every tensor's data was written. It does not close the underlying writer.
func (sw *Writer) Close() error {
	if sw.err != nil {
		return sw.err
	}
	if sw.pos != sw.total() {
		return fmt.Errorf("only %d of %d data bytes written (tensor %q is incomplete)", sw.pos, sw.total(), sw.specs[sw.cur].Name)
	}
	return nil
}
