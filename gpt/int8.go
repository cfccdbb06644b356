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
// refuses to run: the model is for inference only. The float weights stay allocated beside the
// int8 ones; NewInferenceInt8 builds the same model without them.
func (m *Model) QuantizeInt8() (Int8Stats, error) {
	if m.int8 {
		return Int8Stats{}, fmt.Errorf("the model is already int8")
	}
	// All or nothing: the weights are swapped in only once every one is quantized.
	var st Int8Stats
	type quantized struct {
		i, l int
		qw   backend.Buf
	}
	var done []quantized
	for i, s := range m.specs {
		if _, ok := int8Rows(s.Name, m.Config.Channels); ok {
			for l, w := range m.fwd.byIndex(i) {
				qw, err := m.quantizeLayer(&st, i, w)
				if err != nil {
					return Int8Stats{}, err
				}
				done = append(done, quantized{i, l, qw})
			}
		}
	}
	head, err := m.quantizeHead(&st)
	if err != nil {
		return Int8Stats{}, err
	}
	for _, q := range done {
		m.fwd.byIndex(q.i)[q.l] = q.qw
	}
	m.fwd.head, m.int8 = head, true
	return st, nil
}

// NewInferenceInt8 is NewInference followed by SetParamsFrom(read) and QuantizeInt8, the same
// model to the bit, without the float copies of the matmul weights: each layer's is gathered
// on the host as read hands it over, then quantized through one staging buffer (in the
// compute format, as QuantizeInt8 reads them), and never takes room in Params. For GPT-2 124M
// in fp32 that is 494 MB of parameters down to 160, plus the 125 MB of int8 weights.
func NewInferenceInt8(be backend.Backend, cfg Config, maxB, maxT int, prec Precision, read ParamsReader, opts ...InferenceOption) (*Model, Int8Stats, error) {
	var st Int8Stats
	m, err := newModel(be, cfg, maxB, maxT, prec, Parallel{}, int8Model, lossRowsOf(opts))
	if err != nil {
		return nil, st, err
	}
	stage := m.alloc(int8StagingLen(cfg), prec.Compute)
	layer := make([]float32, int8StagingLen(cfg)) // the matmul weight being gathered
	err = m.setParamsFrom(read, func(i, off int, part []float32) error {
		n := m.specs[i].Size() / cfg.NumLayers
		for len(part) > 0 {
			l, lo := off/n, off%n
			k := copy(layer[lo:n], part)
			if lo+k == n { // layer l's weight is complete
				w := be.View(stage, 0, n)
				be.Upload(w, layer[:n]) // rounded to the compute format, as Convert rounds
				qw, err := m.quantizeLayer(&st, i, w)
				if err != nil {
					return err
				}
				m.fwd.byIndex(i)[l] = qw
			}
			part, off = part[k:], off+k
		}
		return nil
	})
	if err != nil {
		return nil, Int8Stats{}, err
	}
	head, err := m.quantizeHead(&st)
	if err != nil {
		return nil, Int8Stats{}, err
	}
	m.fwd.head, m.int8 = head, true
	return m, st, nil
}

// quantizeLayer quantizes weight, a layer's matmul weight of spec index i, adding its sizes
// to st.
func (m *Model) quantizeLayer(st *Int8Stats, i int, weight backend.Buf) (backend.Buf, error) {
	s := m.specs[i]
	OC, _ := int8Rows(s.Name, m.Config.Channels)
	C := s.Size() / m.Config.NumLayers / OC
	qw, err := m.be.QuantizeInt8(weight, OC, C)
	if err != nil {
		return nil, err
	}
	st.Int8Bytes += int8Bytes(qw, OC, C)
	st.FP32Bytes += 4 * int64(OC) * int64(C)
	return qw, nil
}

// quantizeHead quantizes wte for the LM head, adding its sizes to st.
func (m *Model) quantizeHead(st *Int8Stats) (backend.Buf, error) {
	c := m.Config
	qw, err := m.be.QuantizeInt8(m.fwd.wte, c.PaddedVocabSize, c.Channels)
	if err != nil {
		return nil, err
	}
	st.Int8Bytes += int8Bytes(qw, c.PaddedVocabSize, c.Channels)
	st.FP32Bytes += 4 * int64(c.PaddedVocabSize) * int64(c.Channels)
	return qw, nil
}

// int8Rows gives the output channels of the parameter tensor name per layer when an int8 model
// quantizes it (a matmul weight of the layers), else false.
func int8Rows(name string, C int) (int, bool) {
	switch name {
	case "qkvw":
		return 3 * C, true
	case "attprojw", "fcprojw":
		return C, true
	case "fcw":
		return 4 * C, true
	}
	return 0, false
}

// int8StagingLen is NewInferenceInt8's staging buffer: the largest matmul weight of a layer.
func int8StagingLen(c Config) int { return 4 * c.Channels * c.Channels }

// int8PlanBytes is the memory plan's size of an int8 weight (OC,C): the CPU's layout (rows padded
// to 64 bytes, a float32 scale and an int32 row sum per row), which bounds the GPU's (rows padded
// to 16 bytes, a scale per row).
func int8PlanBytes(OC, C int64) int64 { return OC*((C+63)/64*64) + 8*OC }

// int8Bytes is the memory of a quantized weight: what the backend reports, else one byte per value
// and a float32 scale per row.
func int8Bytes(qw backend.Buf, OC, C int) int64 {
	if s, ok := qw.(interface{ Bytes() int64 }); ok {
		return s.Bytes()
	}
	return int64(OC)*int64(C) + 4*int64(OC)
}

// IsInt8 says whether this is an int8 inference model (QuantizeInt8, NewInferenceInt8).
func (m *Model) IsInt8() bool { return m.int8 }

// mlpUp is the MLP's first matmul and its GELU: pre = inp @ weight^T + bias, out = gelu(pre),
// fused (backend.Ops.MatmulGeluForward) unless the weight is int8.
func (m *Model) mlpUp(out, pre, inp, weight, bias backend.Buf, N, C, OC int) {
	if weight.DType() == backend.I8 {
		m.matmulForward(pre, inp, weight, bias, N, C, OC)
		m.be.GeluForward(out, pre, N*OC)
		return
	}
	m.be.MatmulGeluForward(out, pre, inp, weight, bias, N, C, OC)
}

// matmulForward is MatmulForward, or MatmulForwardInt8 for an int8 weight.
func (m *Model) matmulForward(out, inp, weight, bias backend.Buf, N, C, OC int) {
	if weight.DType() == backend.I8 {
		m.be.MatmulForwardInt8(out, inp, weight, bias, N, C, OC)
		return
	}
	m.be.MatmulForward(out, inp, weight, bias, N, C, OC)
}
