package bert_test

import (
	"testing"

	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/internal/gputest"
)

// The PyTorch fixtures on the GPU in exact fp32 (TF32 off), with the CPU's tolerances: the
// bidirectional padded attention kernels, erf GELU and the masked-row gather of the MLM head.
// They skip without a GPU (GPT2GO_REQUIRE_GPU makes that a failure, as in scripts/gpu-check.sh).
func TestCUDAForwardBackwardMatchesPyTorch(t *testing.T) {
	testForwardBackward(t, gputest.Backend(t, cuda.Options{TF32: false}))
}

func TestCUDATenAdamWStepsMatchPyTorch(t *testing.T) {
	testTenAdamWSteps(t, gputest.Backend(t, cuda.Options{TF32: false}))
}

// bf16 and fp16 on the GPU against the same fp32 fixture, with the CPU emulation's bounds: the
// 16-bit kernels of every op the encoder uses (padded bidirectional attention, erf GELU, the
// masked-row gather and scatter) and the compute copy's conversion.
func TestCUDAMixedPrecisionMatchesPyTorch(t *testing.T) {
	testMixedPrecision(t, gputest.Backend(t, cuda.Options{TF32: false}))
}

// TestCUDAMatchesCPUAtHeadSize64 runs an encoder with GPT-2's head size (64), which the PyTorch
// fixtures (head size 8) do not reach: its attention goes through the tiled and tensor-core
// kernels, bidirectional, with padded sequences whose lengths cut through the key tiles. The
// loss, every logit row and every gradient must match the CPU's (fp32, TF32 off: rounding only;
// bf16: the CPU's emulation of the same storage plan, within 16-bit rounding).
func TestCUDAMatchesCPUAtHeadSize64(t *testing.T) {
	testMatchesCPUAtHeadSize64(t, gputest.Backend(t, cuda.Options{TF32: false}))
}
