package profile

import "github.com/gpt2go/gpt2go/backend"

// QuantizeInt8 passes straight through: it is load-time preparation, not an op of a step.
func (p *Backend) QuantizeInt8(weight backend.Buf, OC, C int) (backend.Buf, error) {
	return p.Backend.QuantizeInt8(weight, OC, C)
}

func (p *Backend) MatmulForwardInt8(out, inp, qweight, bias backend.Buf, N, C, OC int) {
	start := p.now()
	p.Backend.MatmulForwardInt8(out, inp, qweight, bias, N, C, OC)
	p.record("MatmulForwardInt8", start, p.finish(), matmulForwardInt8Cost(N, C, OC, bias != nil))
}

// matmulForwardInt8Cost: 2*N*C*OC integer operations (counted as FLOPs, to compare with
// MatmulForward); read inp (N,C) and bias (OC) as float32 and the weight (OC,C) as one byte per
// value (its OC scales are not counted); write out (N,OC).
func matmulForwardInt8Cost(N, C, OC int, bias bool) Cost {
	return Cost{
		Flops: 2 * float64(N) * float64(C) * float64(OC),
		Bytes: elems(N*C, b2i(bias)*OC, N*OC) + float64(OC*C),
		Dims:  dims("N", N, "C", C, "OC", OC),
	}
}
