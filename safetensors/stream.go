package safetensors

import (
	"io"
)

// chunkElems is how many elements the portable (big-endian host) path converts per write or read:
// 1 MiB of data, so conversion never needs a copy of a whole tensor.
const chunkElems = 1 << 18

// WriteFloat32s writes x to w as little-endian float32s. On little-endian hosts it writes x's
// memory directly; elsewhere it converts 1 MiB at a time.
func WriteFloat32s(w io.Writer, x []float32) error {
	if hostLittleEndian {
		_, err := w.Write(float32Bytes(x))
		return err
	}
	return writeFloat32sChunked(w, x)
}

func writeFloat32sChunked(w io.Writer, x []float32) error {
	return writeChunked(w, x, encodeFloat32s)
}

// writeChunked writes x through a 1 MiB buffer that encode fills with each chunk's little-endian
// bytes (4 per element).
func writeChunked[T float32 | int32](w io.Writer, x []T, encode func(dst []byte, x []T)) error {
	buf := make([]byte, 4*min(len(x), chunkElems))
	for len(x) > 0 {
		n := min(len(x), chunkElems)
		encode(buf, x[:n])
		if _, err := w.Write(buf[:4*n]); err != nil {
			return err
		}
		x = x[n:]
	}
	return nil
}

// ReadFloat32s fills dst with little-endian float32s read from r. A short read is
// io.ErrUnexpectedEOF (io.EOF if r had no bytes at all).
func ReadFloat32s(r io.Reader, dst []float32) error {
	if hostLittleEndian {
		_, err := io.ReadFull(r, float32Bytes(dst))
		return err
	}
	return readFloat32sChunked(r, dst)
}

func readFloat32sChunked(r io.Reader, dst []float32) error {
	buf := make([]byte, 4*min(len(dst), chunkElems))
	for first := true; len(dst) > 0; first = false {
		n := min(len(dst), chunkElems)
		if _, err := io.ReadFull(r, buf[:4*n]); err != nil {
			if err == io.EOF && !first {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		decodeFloat32sPortable(dst[:n], buf)
		dst = dst[n:]
	}
	return nil
}

// WriteInt32s writes x to w as little-endian int32s, like WriteFloat32s.
func WriteInt32s(w io.Writer, x []int32) error {
	if hostLittleEndian {
		_, err := w.Write(int32Bytes(x))
		return err
	}
	return writeChunked(w, x, encodeInt32s)
}
