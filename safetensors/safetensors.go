// Package safetensors reads and writes the Hugging Face safetensors format: an 8-byte little-endian
// header length N, N bytes of JSON describing each tensor (dtype, shape, byte range) plus an optional
// "__metadata__" string map, then one byte buffer holding every tensor's little-endian data.
//
// Files written here are byte-for-byte what the reference implementation writes for the same
// tensor order and metadata (compact JSON, "__metadata__" first, header padded with spaces to a
// multiple of 8), so Python's safetensors, PyTorch and numpy can read them. Reading validates the
// whole header before touching the data and never trusts a size it has not checked against the file.
package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// MaxHeaderSize is the largest JSON header accepted, the reference implementation's limit.
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved top-level header key holding the string-to-string metadata map.
const metadataKey = "__metadata__"

// ErrTruncated is wrapped by read errors that mean the file is shorter than its header says.
var ErrTruncated = errors.New("file is truncated")

// dtypeSizes maps every dtype the format defines to its element size in bytes.
var dtypeSizes = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// DTypeSize returns the size in bytes of one element of dtype, and false for an unknown dtype.
func DTypeSize(dtype string) (int64, bool) {
	n, ok := dtypeSizes[dtype]
	return n, ok
}

// Spec names a tensor and gives its element type and shape, but not its data.
type Spec struct {
	Name  string
	DType string
	Shape []int
}

// NumBytes is the size of the tensor's data: product(Shape) * element size. It fails for an unknown
// dtype, a negative dimension, or a size that does not fit in an int64.
func (s Spec) NumBytes() (int64, error) {
	size, ok := dtypeSizes[s.DType]
	if !ok {
		return 0, fmt.Errorf("tensor %q: unknown dtype %q", s.Name, s.DType)
	}
	n, err := numElements(s.Shape)
	if err != nil {
		return 0, fmt.Errorf("tensor %q: %w", s.Name, err)
	}
	if n > math.MaxInt64/size {
		return 0, fmt.Errorf("tensor %q: shape %v is too large", s.Name, s.Shape)
	}
	return n * size, nil
}

func numElements(shape []int) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d == 0 {
			return 0, nil // checked first so that [huge, huge, 0] does not count as an overflow
		}
	}
	n := int64(1)
	for _, d := range shape {
		if n > math.MaxInt64/int64(d) {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// Tensor is one named tensor with its little-endian data.
type Tensor struct {
	Name  string
	DType string
	Shape []int
	Data  []byte
}

// Spec returns the tensor's name, dtype and shape.
func (t Tensor) Spec() Spec { return Spec{Name: t.Name, DType: t.DType, Shape: t.Shape} }

// FromFloat32 makes an F32 tensor holding a copy of x. Write reports a mismatch between shape and len(x).
func FromFloat32(name string, shape []int, x []float32) Tensor {
	return Tensor{Name: name, DType: "F32", Shape: slices.Clone(shape), Data: slices.Clone(float32Bytes(x))}
}

// FromInt32 makes an I32 tensor holding a copy of x. Write reports a mismatch between shape and len(x).
func FromInt32(name string, shape []int, x []int32) Tensor {
	return Tensor{Name: name, DType: "I32", Shape: slices.Clone(shape), Data: slices.Clone(int32Bytes(x))}
}

// Float32s decodes an F32 tensor's data into a new slice.
func (t Tensor) Float32s() ([]float32, error) {
	n, err := t.checkElements("F32")
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	decodeFloat32s(out, t.Data)
	return out, nil
}

// Int32s decodes an I32 tensor's data into a new slice.
func (t Tensor) Int32s() ([]int32, error) {
	n, err := t.checkElements("I32")
	if err != nil {
		return nil, err
	}
	out := make([]int32, n)
	decodeInt32s(out, t.Data)
	return out, nil
}

// checkElements checks that t has the given dtype and that its data matches its shape, and returns
// the element count.
func (t Tensor) checkElements(dtype string) (int, error) {
	if t.DType != dtype {
		return 0, fmt.Errorf("tensor %q has dtype %s, not %s", t.Name, t.DType, dtype)
	}
	nbytes, err := t.Spec().NumBytes()
	if err != nil {
		return 0, err
	}
	if int64(len(t.Data)) != nbytes {
		return 0, fmt.Errorf("tensor %q has %d bytes of data, shape %v %s needs %d", t.Name, len(t.Data), t.Shape, t.DType, nbytes)
	}
	return int(nbytes / 4), nil
}

// hostLittleEndian says whether a []float32's memory already is its safetensors encoding, so it
// can be written and read without conversion.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// float32Bytes returns the little-endian encoding of x: a view of x's memory on little-endian hosts
// (no copy), a new slice elsewhere. Callers must not modify the result.
func float32Bytes(x []float32) []byte {
	if hostLittleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
	}
	b := make([]byte, 4*len(x))
	encodeFloat32s(b, x)
	return b
}

// int32Bytes is float32Bytes for int32.
func int32Bytes(x []int32) []byte {
	if hostLittleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
	}
	b := make([]byte, 4*len(x))
	encodeInt32s(b, x)
	return b
}

// encodeFloat32s writes x into dst (len 4*len(x)) in little-endian order, portably.
func encodeFloat32s(dst []byte, x []float32) {
	for i, v := range x {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

// decodeFloat32s fills dst from the little-endian bytes src (len 4*len(dst)).
func decodeFloat32s(dst []float32, src []byte) {
	if hostLittleEndian {
		copy(float32Bytes(dst), src)
		return
	}
	decodeFloat32sPortable(dst, src)
}

func decodeFloat32sPortable(dst []float32, src []byte) {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

func encodeInt32s(dst []byte, x []int32) {
	for i, v := range x {
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
	}
}

func decodeInt32s(dst []int32, src []byte) {
	if hostLittleEndian {
		copy(int32Bytes(dst), src)
		return
	}
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(src[4*i:]))
	}
}
