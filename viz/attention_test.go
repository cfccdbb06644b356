package viz

import (
	"strings"
	"testing"
)

func TestTokenLabel(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a", "a"},
		{" the", "·the"},
		{"\n", `\n`},
		{"\t\x01", `\t\x01`},
		{"\xff", "?"},
		{"", "∅"},
		{"abcdefghijkl", "abcdefgh…"},
	}
	for _, tt := range tests {
		if got := TokenLabel(tt.in, 9); got != tt.want {
			t.Errorf("TokenLabel(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// diagonal attends each query to itself only.
func diagonal(T int) []float64 {
	p := make([]float64, T*T)
	for i := range T {
		p[i*T+i] = 1
	}
	return p
}

func TestAttentionPNG(t *testing.T) {
	T := 12
	tokens := make([]string, T)
	for i := range tokens {
		tokens[i] = TokenLabel(string(rune('a'+i)), 8)
	}
	uniform := make([]float64, T*T)
	for q := range T {
		for k := 0; k <= q; k++ {
			uniform[q*T+k] = 1 / float64(q+1)
		}
	}
	fig, err := Attention(AttentionOptions{Title: "test", Tokens: tokens, Cols: 2,
		Panels: []AttentionPanel{{Title: "self", Probs: diagonal(T)}, {Title: "uniform", Probs: uniform}, {Title: "self again", Probs: diagonal(T)}}})
	img := renderPNG(t)(fig, err)
	area := inner(img, 0.1)
	cmap := attentionColors()
	one, err := cmap.At(1)
	if err != nil {
		t.Fatal(err)
	}
	// Two diagonal panels of T cells at probability 1, a few pixels each at least, and the
	// masked upper triangles in grey.
	if n := countColor(img, area, one, 8); n < 2*T*16 {
		t.Errorf("probability-1 colour covers %d pixels, want >= %d", n, 2*T*16)
	}
	if n := countColor(img, area, maskedColor, 2); n < 3*T*(T-1)/2*16 {
		t.Errorf("masked colour covers %d pixels, want >= %d", n, 3*T*(T-1)/2*16)
	}
	svg, err := fig.SVG()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"uniform", "attention probability", "key (attended to)"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

// An encoder's map is drawn whole: its upper triangle is data, not the causal mask's grey.
func TestAttentionBidirectionalPNG(t *testing.T) {
	T := 12
	tokens := make([]string, T)
	full := make([]float64, T*T)
	for q := range T {
		tokens[q] = TokenLabel(string(rune('a'+q)), 8)
		full[q*T+T-1-q] = 1 // the anti-diagonal: each query attends to its mirror position
	}
	fig, err := Attention(AttentionOptions{Tokens: tokens, Bidirectional: true, Panels: []AttentionPanel{{Title: "mirror", Probs: full}}})
	img := renderPNG(t)(fig, err)
	area := inner(img, 0.1)
	one, err := attentionColors().At(1)
	if err != nil {
		t.Fatal(err)
	}
	// (A causal map's grey triangle covers >= T(T-1)/2*16 pixels; a few grey pixels are the
	// antialiased edges of labels and lines.)
	if n := countColor(img, area, maskedColor, 2); n > T*(T-1)/2*16/10 {
		t.Errorf("masked colour covers %d pixels of a bidirectional map", n)
	}
	if n := countColor(img, area, one, 8); n < T*16 {
		t.Errorf("probability-1 colour covers %d pixels, want >= %d (half of them above the diagonal)", n, T*16)
	}
}

func TestAttentionErrors(t *testing.T) {
	if _, err := Attention(AttentionOptions{Tokens: []string{"a", "b"}, Panels: []AttentionPanel{{Probs: make([]float64, 3)}}}); err == nil {
		t.Error("panel of the wrong size: no error")
	}
	if _, err := Attention(AttentionOptions{Tokens: []string{"a"}}); err == nil {
		t.Error("no panels: no error")
	}
}
