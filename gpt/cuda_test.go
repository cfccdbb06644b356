package gpt_test

import (
	"testing"

	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/internal/gputest"
)

// cudaBackend returns an exact-fp32 CUDA backend or skips, saying why. With GPT2GO_REQUIRE_GPU set
// (scripts/gpu-check.sh) a missing GPU fails the test instead.
func cudaBackend(t *testing.T) *cuda.Backend {
	return gputest.Backend(t, cuda.Options{TF32: false})
}

// The PyTorch fixture on the GPU: logits, loss, every gradient (fp32, the same tolerances as
// on the CPU), then 10 AdamW steps with clipping.
func TestCUDAForwardBackwardMatchesPyTorch(t *testing.T) { testForwardBackward(t, cudaBackend(t)) }

func TestCUDATenAdamWStepsMatchPyTorch(t *testing.T) { testTenAdamWSteps(t, cudaBackend(t)) }

// ForwardTrain on the GPU: the fused classifier kernel gives the bits of the forward and backward
// kernels, in fp32 and (sm_80 and later) bf16 and fp16.
func TestCUDAForwardTrainMatchesForward(t *testing.T) { testForwardTrain(t, cudaBackend(t)) }
