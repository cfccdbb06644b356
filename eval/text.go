package eval

import (
	"context"
	"fmt"
	"math"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/tokenizer"
)

// EncodeText tokenizes a text file's content for TextLoss: the end-of-text token first (when the
// tokenizer has one, as prepare puts before every document, so the first token is predicted
// too), then the text. A char tokenizer refuses characters outside its alphabet.
func EncodeText(tok tokenizer.Tokenizer, text []byte) ([]int32, error) {
	if len(text) == 0 {
		return nil, fmt.Errorf("the text is empty; evaluate a file that holds text")
	}
	if c, ok := tok.(*tokenizer.Char); ok {
		if err := c.Check(text); err != nil {
			return nil, err
		}
	}
	var ids []int32
	if tok.EOT() >= 0 {
		ids = append(ids, int32(tok.EOT()))
	}
	ids = append(ids, encode(tok, string(text))...)
	if len(ids) < 2 {
		return nil, fmt.Errorf("the text holds %d tokens; at least 2 are needed to predict one", len(ids))
	}
	return ids, nil
}

// TextResult is the loss of a model on a token stream.
type TextResult struct {
	Loss       float64 `json:"loss"`       // mean cross-entropy per predicted token (nats)
	Perplexity float64 `json:"perplexity"` // exp(Loss)
	Tokens     int     `json:"tokens"`     // tokens predicted: len(ids) - 1
	Windows    int     `json:"windows"`
}

// TextLoss runs model over ids in non-overlapping windows of T inputs: window w predicts
// ids[w*T+1 .. w*T+T] from ids[w*T .. w*T+T-1], so every token but the first is predicted
// exactly once, with at most T tokens of context (the last window may be shorter). B windows
// go through the model at once; the model must have been built for at least (B, T). done (may be
// nil) gets the number of tokens predicted so far. Cancelling ctx stops it between batches.
func TextLoss(ctx context.Context, model *gpt.Model, ids []int32, B, T int, done func(tokens int)) (TextResult, error) {
	predicted := len(ids) - 1
	full := predicted / T // windows of exactly T inputs
	var sum float64
	inputs, targets := make([]int32, B*T), make([]int32, B*T)
	for w := 0; w < full; w += B {
		if ctx.Err() != nil {
			return TextResult{}, fmt.Errorf("interrupted after %d of %d tokens", w*T, predicted)
		}
		n := min(B, full-w)
		for j := range n {
			start := (w + j) * T
			copy(inputs[j*T:(j+1)*T], ids[start:start+T])
			copy(targets[j*T:(j+1)*T], ids[start+1:start+T+1])
		}
		loss, err := model.Forward(inputs[:n*T], targets[:n*T], n, T)
		if err != nil {
			return TextResult{}, err
		}
		sum += float64(loss) * float64(n*T)
		if done != nil {
			done((w + n) * T)
		}
	}
	windows := full
	if rest := predicted - full*T; rest > 0 {
		start := full * T
		loss, err := model.Forward(ids[start:start+rest], ids[start+1:start+rest+1], 1, rest)
		if err != nil {
			return TextResult{}, err
		}
		sum += float64(loss) * float64(rest)
		windows++
		if done != nil {
			done(predicted)
		}
	}
	res := TextResult{Loss: sum / float64(predicted), Tokens: predicted, Windows: windows}
	res.Perplexity = math.Exp(res.Loss)
	return res, nil
}
