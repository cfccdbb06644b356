package cuda

import (
	"errors"

	"github.com/gpt2go/gpt2go/backend"
)

// errInt8 is what --int8 meets on the GPU: int8 inference runs on the CPU only so far (dp4a /
// int8 tensor-core kernels are later work).
var errInt8 = errors.New("--int8 is not implemented on the GPU yet; use --device cpu")

// QuantizeInt8 returns errInt8: there are no int8 kernels on the GPU yet.
func (be *Backend) QuantizeInt8(weight backend.Buf, OC, C int) (backend.Buf, error) {
	return nil, errInt8
}

// MatmulForwardInt8 cannot run: QuantizeInt8 never returns a weight for it on the GPU.
func (be *Backend) MatmulForwardInt8(out, inp, qweight, bias backend.Buf, N, C, OC int) {
	panic("cuda: " + errInt8.Error())
}
