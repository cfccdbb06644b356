package cuda

import (
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// Until the 16-bit kernels exist the GPU refuses bf16 and fp16 with a one-line error that names
// what to use instead; it needs no GPU to say so.
func TestCheckDTypeRefuses16Bit(t *testing.T) {
	be := &Backend{}
	if err := be.CheckDType(backend.F32); err != nil {
		t.Errorf("fp32: %v", err)
	}
	for _, dt := range []backend.DType{backend.BF16, backend.F16} {
		err := be.CheckDType(dt)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--precision tf32") || !strings.Contains(err.Error(), "--device cpu") {
			t.Errorf("%v: %v; want a one-line error naming --precision tf32 and --device cpu", dt, err)
		}
	}
	if (&buf{}).DType() != backend.F32 {
		t.Error("CUDA buffers must report fp32")
	}
}
