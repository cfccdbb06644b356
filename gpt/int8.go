package gpt

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// Int8Stats are the sizes of an int8 model's matmul weights and of the fp32 ones they stand for.
type Int8Stats struct {
	Int8Bytes, FP32Bytes int64
}

// QuantizeInt8 turns the model into an int8 inference model: it keeps an int8 copy (one symmetric
// scale per output channel, backend.QuantizeInt8) of every matmul weight, qkvw, attprojw, fcw and
// fcprojw of each layer and wte for the LM head, and from then on Forward and the KV-cached
// generation run those matmuls with MatmulForwardInt8, quantizing their inputs per row. The
// embedding lookup, LayerNorms, attention and biases stay in the model's precision. Backward
// refuses to run: the model is for inference only.
func (m *Model) QuantizeInt8() (Int8Stats, error) {
	var st Int8Stats
	if m.int8 != nil {
		return st, fmt.Errorf("the model is already int8")
	}
	c, p := m.Config, m.forwardParams()
	C, Vp := c.Channels, c.PaddedVocabSize
	q := map[backend.Buf]backend.Buf{}
	add := func(w backend.Buf, OC, C int) error {
		qw, err := m.be.QuantizeInt8(w, OC, C)
		if err != nil {
			return err
		}
		q[w] = qw
		st.Int8Bytes += int8Bytes(qw, OC, C)
		st.FP32Bytes += 4 * int64(OC) * int64(C)
		return nil
	}
	for l := range c.NumLayers {
		for _, w := range []struct {
			buf   backend.Buf
			OC, C int
		}{{p.qkvw[l], 3 * C, C}, {p.attprojw[l], C, C}, {p.fcw[l], 4 * C, C}, {p.fcprojw[l], C, 4 * C}} {
			if err := add(w.buf, w.OC, w.C); err != nil {
				return Int8Stats{}, err
			}
		}
	}
	if err := add(p.wte, Vp, C); err != nil {
		return Int8Stats{}, err
	}
	m.int8 = q
	return st, nil
}

// int8Bytes is the memory of a quantized weight: what the backend reports, else one byte per value
// and a float32 scale per row.
func int8Bytes(qw backend.Buf, OC, C int) int64 {
	if s, ok := qw.(interface{ Bytes() int64 }); ok {
		return s.Bytes()
	}
	return int64(OC)*int64(C) + 4*int64(OC)
}

// IsInt8 says whether QuantizeInt8 has made this an int8 inference model.
func (m *Model) IsInt8() bool { return m.int8 != nil }

// matmulForward is MatmulForward, or MatmulForwardInt8 with weight's int8 copy in an int8 model.
// mlpUp is the MLP's first matmul and its GELU: pre = inp @ weight^T + bias, out = gelu(pre),
// fused (backend.Ops.MatmulGeluForward) unless the weight is int8.
func (m *Model) mlpUp(out, pre, inp, weight, bias backend.Buf, N, C, OC int) {
	if _, ok := m.int8[weight]; ok {
		m.matmulForward(pre, inp, weight, bias, N, C, OC)
		m.be.GeluForward(out, pre, N*OC)
		return
	}
	m.be.MatmulGeluForward(out, pre, inp, weight, bias, N, C, OC)
}

func (m *Model) matmulForward(out, inp, weight, bias backend.Buf, N, C, OC int) {
	if qw, ok := m.int8[weight]; ok {
		m.be.MatmulForwardInt8(out, inp, qw, bias, N, C, OC)
		return
	}
	m.be.MatmulForward(out, inp, weight, bias, N, C, OC)
}
