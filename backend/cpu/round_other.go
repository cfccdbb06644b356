//go:build !amd64

package cpu

import "github.com/gpt2go/gpt2go/backend"

// roundBF16Span sets dst[i] = backend.RoundBF16(src[i]).
func roundBF16Span(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = backend.RoundBF16(v)
	}
}

// roundF16Span sets dst[i] = backend.RoundF16(src[i]).
func roundF16Span(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = backend.RoundF16(v)
	}
}
