package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// expected mirrors eval/testdata/expected.json, written by tools/reference/gen_hellaswag.py.
type expected struct {
	Windows []struct {
		Window  int     `json:"window"`
		N       int     `json:"n"`
		Acc     float64 `json:"acc"`
		AccNorm float64 `json:"acc_norm"`
		Items   []struct {
			Skipped   bool      `json:"skipped"`
			Truncated int       `json:"truncated"`
			SumLoss   []float64 `json:"sum_loss"`
			MeanLoss  []float64 `json:"mean_loss"`
			Tokens    []int     `json:"tokens"`
			Pred      int       `json:"pred"`
			PredNorm  int       `json:"pred_norm"`
		} `json:"items"`
	} `json:"windows"`
	Text struct {
		Window int     `json:"window"`
		Tokens int     `json:"tokens"`
		Loss   float64 `json:"loss"`
	} `json:"text"`
}

func readExpected(t *testing.T) *expected {
	t.Helper()
	raw, err := os.ReadFile("testdata/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	return &e
}

// refModel loads the reference model (byte-level, maxT 128) planned for (rows, window).
func refModel(t *testing.T, rows, window int) *gpt.Model {
	t.Helper()
	cfg, params, err := gpt.ReadLLMC("testdata/model.bin")
	if err != nil {
		t.Fatal(err)
	}
	m, err := gpt.New(cpu.New(2), cfg, rows, window)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetParams(params); err != nil {
		t.Fatal(err)
	}
	return m
}

func closeRel(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func TestHellaSwagMatchesPyTorch(t *testing.T) {
	exp := readExpected(t)
	items, err := ReadHellaSwag("testdata/hellaswag_items.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	rendered := Render(items, tokenizer.Byte())
	// rows 4: the 4 candidates in one forward pass; rows 3 at window 64: passes of 3 and 1 row.
	rowsFor := map[int]int{128: 4, 64: 3}
	for _, w := range exp.Windows {
		s := &Scorer{Model: refModel(t, rowsFor[w.Window], w.Window), Rows: rowsFor[w.Window], Window: w.Window}
		for i, want := range w.Items {
			got, err := s.Score(&rendered[i])
			if want.Skipped {
				if !errors.Is(err, ErrTooLong) {
					t.Errorf("window %d item %d: err %v, want ErrTooLong", w.Window, i, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("window %d item %d: %v", w.Window, i, err)
			}
			for k := range 4 {
				if !closeRel(got.SumLoss[k], want.SumLoss[k], 1e-4) || !closeRel(got.MeanLoss[k], want.MeanLoss[k], 1e-4) || got.Tokens[k] != want.Tokens[k] {
					t.Errorf("window %d item %d ending %d: sum %.6f mean %.6f tokens %d; PyTorch %.6f %.6f %d",
						w.Window, i, k, got.SumLoss[k], got.MeanLoss[k], got.Tokens[k], want.SumLoss[k], want.MeanLoss[k], want.Tokens[k])
				}
			}
			if got.Pred != want.Pred || got.PredNorm != want.PredNorm || got.Truncated != want.Truncated {
				t.Errorf("window %d item %d: pred %d pred_norm %d truncated %d; PyTorch %d %d %d",
					w.Window, i, got.Pred, got.PredNorm, got.Truncated, want.Pred, want.PredNorm, want.Truncated)
			}
		}
		calls := 0
		res, err := s.Run(context.Background(), rendered, func(done int) {
			if calls++; done != calls {
				t.Errorf("progress %d after %d items", done, calls)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.N != w.N || res.Acc != w.Acc || res.AccNorm != w.AccNorm || res.Skipped != len(items)-w.N || calls != len(items) {
			t.Errorf("window %d: n %d acc %v acc_norm %v skipped %d; PyTorch n %d acc %v acc_norm %v", w.Window, res.N, res.Acc, res.AccNorm, res.Skipped, w.N, w.Acc, w.AccNorm)
		}
		t.Logf("window %d: %+v (%s)", w.Window, res, res.Summary())
	}
}

func TestTextLossMatchesPyTorch(t *testing.T) {
	exp := readExpected(t).Text
	text, err := os.ReadFile("testdata/text.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := EncodeText(tokenizer.Byte(), text)
	if err != nil {
		t.Fatal(err)
	}
	for _, B := range []int{1, 3, 16} {
		var last int
		res, err := TextLoss(context.Background(), refModel(t, B, exp.Window), ids, B, exp.Window, func(n int) { last = n })
		if err != nil {
			t.Fatal(err)
		}
		if !closeRel(res.Loss, exp.Loss, 1e-5) || res.Tokens != exp.Tokens || last != exp.Tokens {
			t.Errorf("B=%d: loss %.7f over %d tokens (progress %d); PyTorch %.7f over %d", B, res.Loss, res.Tokens, last, exp.Loss, exp.Tokens)
		}
		if want := (exp.Tokens + exp.Window - 1) / exp.Window; res.Windows != want || res.Perplexity != math.Exp(res.Loss) {
			t.Errorf("B=%d: %d windows, perplexity %v; want %d windows, exp(loss)", B, res.Windows, res.Perplexity, want)
		}
	}
}

// Cancelling the context (Ctrl-C in gpt2go eval) stops HellaSwag between items and a text
// between batches, saying how far each came.
func TestInterrupted(t *testing.T) {
	items, err := ReadHellaSwag("testdata/hellaswag_items.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	model := refModel(t, 4, 128)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Scorer{Model: model, Rows: 4, Window: 128}
	_, err = s.Run(ctx, Render(items, tokenizer.Byte()), func(done int) {
		if done == 2 {
			cancel()
		}
	})
	if want := fmt.Sprintf("interrupted after 2 of %d items", len(items)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("hellaswag cancelled after 2 items: %v, want %q", err, want)
	}
	ids := make([]int32, 4*128+1)
	ctx, cancel = context.WithCancel(context.Background())
	_, err = TextLoss(ctx, model, ids, 1, 128, func(done int) {
		if done == 128 {
			cancel()
		}
	})
	if want := "interrupted after 128 of 512 tokens"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("text cancelled after 128 tokens: %v, want %q", err, want)
	}
}

// When no item can be scored, the error gives the reasons as Summary words them.
func TestNoneScored(t *testing.T) {
	items, err := ReadHellaSwag("testdata/hellaswag_items.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &Scorer{Model: refModel(t, 4, 4), Rows: 4, Window: 1}
	_, err = s.Run(context.Background(), Render(items, tokenizer.Byte()), nil)
	if want := fmt.Sprintf("none of the %d items could be scored (skipped %d items: an ending longer than the 1-token window)", len(items), len(items)); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("window 1: %v, want ...%q", err, want)
	}
}

func TestEncodeText(t *testing.T) {
	ids, err := EncodeText(tokenizer.Byte(), []byte("ab"))
	if err != nil || len(ids) != 3 || ids[0] != 256 || ids[1] != 'a' {
		t.Errorf("byte: %v %v; want [256 97 98]", ids, err)
	}
	char, err := tokenizer.NewChar("ab", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EncodeText(char, []byte("abc")); err == nil || !strings.Contains(err.Error(), "alphabet") {
		t.Errorf("char text with an unknown character: err %v", err)
	}
	if _, err := EncodeText(char, []byte("a")); err == nil {
		t.Error("one token: no error")
	}
	if _, err := EncodeText(tokenizer.Byte(), nil); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty text: %v, want an error saying it is empty", err)
	}
}

func TestRenderSkipsCharactersOutsideTheAlphabet(t *testing.T) {
	char, err := tokenizer.NewChar(" abc", true)
	if err != nil {
		t.Fatal(err)
	}
	items := []Item{
		{Ctx: "ab", Endings: []string{"a", "b", "c", "ab"}, Label: 1},
		{Ctx: "ab", Endings: []string{"a", "b", "c", "xyz"}, Label: 1},
	}
	r := Render(items, char)
	if r[0].Skip != "" || len(r[0].Context) != 2 || len(r[0].Endings[3]) != 3 || r[0].Label != 1 {
		t.Errorf("item 0: %+v", r[0])
	}
	if r[1].Skip == "" {
		t.Errorf("item 1 has characters outside the alphabet but is not skipped: %+v", r[1])
	}
}

func TestReadHellaSwag(t *testing.T) {
	items, err := ReadHellaSwag("testdata/hellaswag_items.jsonl", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[1].Label != 1 || items[1].Ctx != "A boy turns his bicycle upside down on the grass. he" || items[0].ActivityLabel != "Baking bread" {
		t.Errorf("limit 2: %+v", items)
	}
	dir := t.TempDir()
	hfCopy := filepath.Join(dir, "hf.jsonl") // the Hugging Face datasets copy writes labels as strings
	os.WriteFile(hfCopy, []byte(`{"ctx":"a","endings":["b","c","d","e"],"label":"3"}`+"\n"), 0o644)
	if items, err := ReadHellaSwag(hfCopy, 0); err != nil || len(items) != 1 || items[0].Label != 3 {
		t.Errorf("a string label: %+v, %v", items, err)
	}
	for _, tc := range []struct{ name, line, want string }{
		{"three endings", `{"ctx":"a","endings":["b","c","d"],"label":0}`, "3 endings"},
		{"no label", `{"ctx":"a","endings":["b","c","d","e"]}`, "no label"},
		{"label out of range", `{"ctx":"a","endings":["b","c","d","e"],"label":4}`, "label 4"},
		{"no ctx", `{"endings":["b","c","d","e"],"label":0}`, "no ctx"},
		{"not json", `{"ctx":`, "line 1"},
		{"empty", ``, "no items"},
		{"string label out of range", `{"ctx":"a","endings":["b","c","d","e"],"label":"7"}`, "label 7"},
		{"label not a number", `{"ctx":"a","endings":["b","c","d","e"],"label":"x"}`, `label "x" is not a number`},
	} {
		path := filepath.Join(dir, tc.name+".jsonl")
		os.WriteFile(path, []byte(tc.line+"\n"), 0o644)
		if _, err := ReadHellaSwag(path, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzHellaSwag feeds arbitrary jsonl through reading, tokenizing and scoring with a small
// window: whatever the input, no panic, and every scored item has sane figures.
func FuzzHellaSwag(f *testing.F) {
	seed, err := os.ReadFile("testdata/hellaswag_items.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"ctx":"a","endings":["","b","c\u00e9","d"],"label":3}`))
	f.Add([]byte(`{"ctx":"` + strings.Repeat("x", 40) + `","endings":["` + strings.Repeat("y", 17) + `","b","c","d"],"label":1}`))
	cfg, params, err := gpt.ReadLLMC("testdata/model.bin")
	if err != nil {
		f.Fatal(err)
	}
	const window = 16
	m, err := gpt.New(cpu.New(1), cfg, 1, window)
	if err != nil {
		f.Fatal(err)
	}
	if err := m.SetParams(params); err != nil {
		f.Fatal(err)
	}
	s := &Scorer{Model: m, Rows: 1, Window: window}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, jsonl []byte) {
		path := filepath.Join(dir, "items.jsonl")
		if err := os.WriteFile(path, jsonl, 0o644); err != nil {
			t.Fatal(err)
		}
		items, err := ReadHellaSwag(path, 8)
		if err != nil {
			return
		}
		for _, r := range Render(items, tokenizer.Byte()) {
			got, err := s.Score(&r)
			if err != nil {
				if r.Skip == "" && !errors.Is(err, ErrTooLong) {
					t.Fatalf("%+v: %v", r, err)
				}
				continue
			}
			for i, e := range r.Endings {
				if got.Tokens[i] != len(e) || !(got.SumLoss[i] >= 0) || math.IsInf(got.SumLoss[i], 0) || !closeRel(got.MeanLoss[i]*float64(len(e)), got.SumLoss[i], 1e-12) {
					t.Fatalf("ending %d of %+v: %+v", i, r, got)
				}
			}
			if got.Pred < 0 || got.Pred > 3 || got.PredNorm < 0 || got.PredNorm > 3 || got.Truncated < 0 || got.Truncated >= len(r.Context) {
				t.Fatalf("%+v: %+v", r, got)
			}
		}
	})
}
