package tokenizer

import "strings"

// byteTokenizer gives every byte its own id 0..255; EOT is 256.
type byteTokenizer struct{ appendedSpecials }

// Byte returns the byte-level tokenizer: ids 0..255 are the bytes, 256 is EOT, vocab 257. It
// encodes any file, UTF-8 or not, and decodes back to the exact bytes.
func Byte() Tokenizer { return byteTokenizer{} }

func (byteTokenizer) Name() string     { return "byte" }
func (t byteTokenizer) VocabSize() int { return 257 + t.extra() }
func (byteTokenizer) EOT() int         { return 256 }

func (byteTokenizer) Encode(text []byte) []int {
	ids := make([]int, len(text))
	for i, b := range text {
		ids[i] = int(b)
	}
	return ids
}

func (t byteTokenizer) Decode(ids []int) string {
	var s strings.Builder
	s.Grow(len(ids))
	for _, id := range ids {
		if special, ok := decodeSpecial(t, id); ok {
			s.WriteString(special)
			continue
		}
		s.WriteByte(byte(id))
	}
	return s.String()
}
