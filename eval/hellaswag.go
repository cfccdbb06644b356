// Package eval measures a trained model on held-out data: HellaSwag-style multiple choice
// (hellaswag.go) and the loss and perplexity of any text file (text.go).
//
// HellaSwag is scored the way llm.c's dev/data/hellaswag.py and build-nanogpt's hellaswag.py do
// ("completion style"): for each item, each of the 4 candidate rows is the tokens of ctx followed
// by the tokens of " " + ending (tokenized separately, no start token), and the model's
// cross-entropy is taken at the ending tokens only. acc counts items whose correct ending has the
// lowest summed loss; acc_norm counts items whose correct ending has the lowest mean loss per
// ending token. (lm-evaluation-harness differs: it rewrites ctx from ctx_a/ctx_b and normalises by
// the ending's length in bytes, so its acc_norm is not comparable with this one except under the
// byte tokenizer, where tokens are bytes.) Ties go to the lowest index, like torch's argmin.
package eval

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// Item is one line of the official HellaSwag jsonl files (rowanz/hellaswag data/*.jsonl).
type Item struct {
	Ind           int      `json:"ind"`
	ActivityLabel string   `json:"activity_label"`
	CtxA          string   `json:"ctx_a"`
	CtxB          string   `json:"ctx_b"`
	Ctx           string   `json:"ctx"` // the context scored: ctx_a + " " + ctx_b
	Endings       []string `json:"endings"`
	Label         int      `json:"label"` // index of the correct ending
	Split         string   `json:"split"`
	SplitType     string   `json:"split_type"`
	SourceID      string   `json:"source_id"`
}

// ReadHellaSwag reads the first limit items (limit <= 0: all) of a HellaSwag jsonl file. Every
// item must have a context, 4 endings and a label (the official test split hides its labels, so
// only train and val can be scored).
func ReadHellaSwag(path string, limit int) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hellaswag: %w", err)
	}
	defer f.Close()
	var items []Item
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan() && (limit <= 0 || len(items) < limit); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var it struct {
			Item
			Label *label `json:"label"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, fmt.Errorf("hellaswag %s line %d: %w", path, line, err)
		}
		switch {
		case it.Ctx == "":
			return nil, fmt.Errorf("hellaswag %s line %d: no ctx", path, line)
		case len(it.Endings) != 4:
			return nil, fmt.Errorf("hellaswag %s line %d: %d endings, want 4", path, line, len(it.Endings))
		case it.Label == nil:
			return nil, fmt.Errorf("hellaswag %s line %d: no label (the test split's labels are hidden; use val or train)", path, line)
		case *it.Label < 0 || *it.Label > 3:
			return nil, fmt.Errorf("hellaswag %s line %d: label %d, want 0..3", path, line, *it.Label)
		}
		it.Item.Label = int(*it.Label)
		items = append(items, it.Item)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hellaswag %s: %w", path, err)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("hellaswag %s holds no items", path)
	}
	return items, nil
}

// Rendered is an item as token ids.
type Rendered struct {
	Context []int32    // tokens of ctx
	Endings [4][]int32 // tokens of " " + ending
	Label   int
	// Skip says why the item cannot be scored with this tokenizer ("" if it can).
	Skip string
}

// Render tokenizes items. An item with a character outside a char tokenizer's alphabet (which
// Encode would drop silently) or with an ending that encodes to no tokens is marked Skip.
func Render(items []Item, tok tokenizer.Tokenizer) []Rendered {
	char, _ := tok.(*tokenizer.Char)
	out := make([]Rendered, len(items))
	for i, it := range items {
		r := &out[i]
		r.Label = it.Label
		texts := []string{it.Ctx, " " + it.Endings[0], " " + it.Endings[1], " " + it.Endings[2], " " + it.Endings[3]}
		for j, s := range texts {
			if char != nil && r.Skip == "" {
				if err := char.Check([]byte(s)); err != nil {
					r.Skip = "characters outside the alphabet"
				}
			}
			ids := encode(tok, s)
			if len(ids) == 0 && r.Skip == "" {
				r.Skip = "empty after tokenizing"
			}
			if j == 0 {
				r.Context = ids
			} else {
				r.Endings[j-1] = ids
			}
		}
	}
	return out
}

func encode(tok tokenizer.Tokenizer, s string) []int32 {
	ids := tok.Encode([]byte(s))
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// Len is the number of model inputs the item's longest row needs: context plus ending, less
// the last token, which is only a target.
func (r *Rendered) Len() int {
	longest := 0
	for _, e := range r.Endings {
		longest = max(longest, len(e))
	}
	return len(r.Context) + longest - 1
}

// Window is the shortest window that scores every item without truncation, at most maxT.
func Window(items []Rendered, maxT int) int {
	window := 1
	for i := range items {
		window = max(window, items[i].Len())
	}
	return min(window, maxT)
}

// ItemScore is the model's verdict on one item.
type ItemScore struct {
	SumLoss   [4]float64 // summed cross-entropy (nats) over each ending's tokens
	MeanLoss  [4]float64 // SumLoss / Tokens
	Tokens    [4]int     // ending tokens scored
	Pred      int        // argmin SumLoss (acc)
	PredNorm  int        // argmin MeanLoss (acc_norm)
	Truncated int        // context tokens dropped from the left to fit the window
}

// ErrTooLong marks an item whose longest ending alone does not fit the window.
var ErrTooLong = errors.New("an ending is longer than the window")

// Scorer runs a model on rendered items. The model must have been built (gpt.New) for at least
// Rows sequences of Window tokens; Window is the longest row it is given, so a model built for
// (4, T) scores the 4 candidates in one forward pass and one built for (B, T) with B < 4 (the
// training model) in several.
type Scorer struct {
	Model  *gpt.Model
	Rows   int
	Window int

	inputs []int32
	logits []float32
}

// Score computes the losses of the 4 endings of r. If the longest row needs more than Window
// inputs, the context is cut from the left by the same number of tokens in every row, so the
// candidates still share one context; an item whose ending alone exceeds Window is ErrTooLong.
func (s *Scorer) Score(r *Rendered) (ItemScore, error) {
	var res ItemScore
	if r.Skip != "" {
		return res, fmt.Errorf("item cannot be scored: %s", r.Skip)
	}
	ctx := r.Context
	if over := r.Len() - s.Window; over > 0 {
		if over >= len(ctx) {
			return res, ErrTooLong
		}
		ctx, res.Truncated = ctx[over:], over
	}
	T := len(ctx) + r.Len() - len(r.Context) // inputs of the longest row after truncation
	rows := min(4, max(1, s.Rows*s.Window/T))
	V := s.Model.Config.VocabSize
	if cap(s.logits) < V {
		s.logits = make([]float32, V)
	}
	logits := s.logits[:V]
	for first := 0; first < 4; first += rows {
		n := min(rows, 4-first)
		if cap(s.inputs) < n*T {
			s.inputs = make([]int32, n*T)
		}
		inputs := s.inputs[:n*T]
		for j := range n {
			row := inputs[j*T : (j+1)*T]
			end := r.Endings[first+j]
			k := copy(row, ctx)
			k += copy(row[k:], end[:len(end)-1]) // the last ending token is only a target
			clear(row[k:])                       // padding after the row: never attended to, never scored
		}
		if _, err := s.Model.Forward(inputs, nil, n, T); err != nil {
			return res, err
		}
		for i := first; i < first+n; i++ {
			end := r.Endings[i]
			var sum float64
			for k, target := range end {
				// The logits at input position p predict the token at p+1: the k-th ending
				// token sits at len(ctx)+k, so it is predicted at len(ctx)+k-1.
				s.Model.LogitsRow(logits, i-first, len(ctx)+k-1)
				sum += crossEntropy(logits, int(target))
			}
			res.SumLoss[i], res.Tokens[i] = sum, len(end)
			res.MeanLoss[i] = sum / float64(len(end))
		}
	}
	res.Pred, res.PredNorm = argmin(res.SumLoss), argmin(res.MeanLoss)
	return res, nil
}

// crossEntropy is -log softmax(logits)[target], computed in float64.
func crossEntropy(logits []float32, target int) float64 {
	maxLogit := math.Inf(-1)
	for _, l := range logits {
		maxLogit = math.Max(maxLogit, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - maxLogit)
	}
	return maxLogit + math.Log(sum) - float64(logits[target])
}

func argmin(x [4]float64) int {
	best := 0
	for i := 1; i < len(x); i++ {
		if x[i] < x[best] {
			best = i
		}
	}
	return best
}

// Result sums up a HellaSwag run.
type Result struct {
	N           int            `json:"n"` // items scored
	Correct     int            `json:"correct"`
	CorrectNorm int            `json:"correct_norm"`
	Acc         float64        `json:"acc"`       // Correct / N
	AccNorm     float64        `json:"acc_norm"`  // CorrectNorm / N
	Truncated   int            `json:"truncated"` // items whose context was cut to fit the window
	Skipped     int            `json:"skipped"`   // items not scored (see SkipReasons)
	SkipReasons map[string]int `json:"skip_reasons,omitempty"`
}

// Run scores every item and calls done (may be nil) after each. Items that cannot be scored
// (ErrTooLong, or Skip set by Render) are counted in Skipped; it is an error if none is scored.
// Cancelling ctx stops it between items.
func (s *Scorer) Run(ctx context.Context, items []Rendered, done func(i int)) (Result, error) {
	res := Result{SkipReasons: map[string]int{}}
	for i := range items {
		if ctx.Err() != nil {
			return res, fmt.Errorf("hellaswag: interrupted after %d of %d items", i, len(items))
		}
		sc, err := s.Score(&items[i])
		switch {
		case items[i].Skip != "":
			res.Skipped++
			res.SkipReasons[items[i].Skip]++
		case errors.Is(err, ErrTooLong):
			res.Skipped++
			res.SkipReasons[fmt.Sprintf("an ending longer than the %d-token window", s.Window)]++
		case err != nil:
			return res, err
		default:
			res.N++
			if sc.Pred == items[i].Label {
				res.Correct++
			}
			if sc.PredNorm == items[i].Label {
				res.CorrectNorm++
			}
			if sc.Truncated > 0 {
				res.Truncated++
			}
		}
		if done != nil {
			done(i + 1)
		}
	}
	if res.N == 0 {
		return res, fmt.Errorf("hellaswag: none of the %d items could be scored (%s)", len(items), res.Summary())
	}
	res.Acc = float64(res.Correct) / float64(res.N)
	res.AccNorm = float64(res.CorrectNorm) / float64(res.N)
	return res, nil
}

// Summary is a one-line description of what Run did beyond acc and acc_norm: truncations and
// skips ("" if none).
func (r Result) Summary() string {
	var parts []string
	if r.Truncated > 0 {
		parts = append(parts, fmt.Sprintf("%s had their context cut from the left to fit the window", items(r.Truncated)))
	}
	for _, reason := range slices.Sorted(maps.Keys(r.SkipReasons)) {
		parts = append(parts, fmt.Sprintf("skipped %s: %s", items(r.SkipReasons[reason]), reason))
	}
	return strings.Join(parts, "; ")
}

func items(n int) string {
	if n == 1 {
		return "1 item"
	}
	return fmt.Sprintf("%d items", n)
}

// label is an item's correct ending: a number in the original files, a string of one digit
// ("3") in the Hugging Face datasets copy (Rowan/hellaswag).
type label int

func (l *label) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("label %q is not a number", s)
		}
		*l = label(n)
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("label %s is not a number", b)
	}
	*l = label(n)
	return nil
}
