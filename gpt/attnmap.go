package gpt

import (
	"fmt"
	"math"
)

// AttentionMap is the attention of one layer over one sequence: Probs[(h*T+query)*T+key] is how
// much head h at position query attends to position key. Rows sum to 1; keys after the query
// are 0 (the causal mask).
type AttentionMap struct {
	Layer, NumHeads, T int
	Probs              []float64 // (NH,T,T)
}

// At is the attention of head h from position query to position key.
func (a *AttentionMap) At(h, query, key int) float64 { return a.Probs[(h*a.T+query)*a.T+key] }

// Attention runs the model on one sequence of tokens and computes, on the host from layer's qkv
// activation, each head's causal softmax(q.k/sqrt(HS)) in float64. It uses only qkv, not the
// probabilities the backend's attention op saved, so tests can compare the two. The model must
// have been planned for sequences of at least len(tokens).
func (m *Model) Attention(tokens []int32, layer int) (*AttentionMap, error) {
	c, T := m.Config, len(tokens)
	if err := CheckAttentionArgs(layer, c.NumLayers, T); err != nil {
		return nil, err
	}
	C := c.Channels
	qkv := make([]float32, T*3*C)
	// The forward pass copies the layer's qkv as soon as it is made: an inference model's
	// layers share one buffer, which the next layer overwrites.
	m.peek = &qkvPeek{layer: layer, qkv: qkv}
	defer func() { m.peek = nil }()
	if _, err := m.Forward(tokens, nil, 1, T); err != nil {
		return nil, err
	}
	return &AttentionMap{Layer: layer, NumHeads: c.NumHeads, T: T, Probs: AttentionProbs(qkv, T, C, c.NumHeads, true)}, nil
}

// qkvPeek asks the next forward pass for a copy of one layer's qkv activation.
type qkvPeek struct {
	layer int
	qkv   []float32
}

// CheckAttentionArgs checks an attention map's request: layer of layers, over T >= 1 tokens.
func CheckAttentionArgs(layer, layers, T int) error {
	if layer < 0 || layer >= layers {
		return fmt.Errorf("layer %d does not exist; the model has layers 0..%d", layer, layers-1)
	}
	if T == 0 {
		return fmt.Errorf("attention: no tokens")
	}
	return nil
}

// AttentionProbs computes on the host, in float64, each head's softmax(q.k/sqrt(HS)) from one
// sequence's qkv activation (T, 3C): q, k, v side by side, each NH heads of HS = C/NH channels.
// It returns (NH,T,T) probabilities; with causal, keys after the query get 0.
func AttentionProbs(qkv []float32, T, C, NH int, causal bool) []float64 {
	HS := C / NH
	scale := 1 / math.Sqrt(float64(HS))
	probs := make([]float64, NH*T*T)
	for h := range NH {
		for t := range T {
			q := qkv[t*3*C+h*HS : t*3*C+(h+1)*HS]
			row := probs[(h*T+t)*T : (h*T+t+1)*T]
			keys := T
			if causal {
				keys = t + 1
			}
			maxScore := math.Inf(-1)
			for t2 := range keys {
				k := qkv[t2*3*C+C+h*HS : t2*3*C+C+(h+1)*HS]
				var dot float64
				for i := range HS {
					dot += float64(q[i]) * float64(k[i])
				}
				row[t2] = dot * scale
				maxScore = math.Max(maxScore, row[t2])
			}
			var sum float64
			for t2 := range keys {
				row[t2] = math.Exp(row[t2] - maxScore)
				sum += row[t2]
			}
			for t2 := range keys {
				row[t2] /= sum
			}
		}
	}
	return probs
}
