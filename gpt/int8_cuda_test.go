package gpt_test

import (
	"math/rand/v2"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/gputest"
)

// TestQuantizeInt8's checks on the GPU (dp4a kernels): the int8 model against its fp32 self, the
// KV-cached generation against the int8 Forward, the weights' bytes (a float32 scale per row).
func TestCUDAQuantizeInt8(t *testing.T) { testQuantizeInt8(t, cudaBackend(t), 4) }

// TestCUDAInt8TracksCPU builds one random model on both backends, makes both int8 and compares
// their logits: the int8 products are the same bits on both (backend/cuda TestInt8MatchesCPUBits),
// but the float ops around them (LayerNorm, attention) round differently, which can move an input
// across a quantization boundary. So the GPU's int8 logits must be much closer to the CPU's int8
// logits than int8 is to fp32: within a quarter of that distance, in relative L2 (a CPU
// stand-in, one-ulp nudges of the float parameters, moved them up to 0.06 of it, in steps of one
// flipped quantum; a broken kernel moves them by the whole distance or more).
func TestCUDAInt8TracksCPU(t *testing.T) {
	g := cudaBackend(t)
	cfg := kvConfig
	const B = 2
	T := cfg.BlockSize
	rng := rand.New(rand.NewPCG(5, 6))
	tokens := make([]int32, B*T)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(cfg.VocabSize))
	}
	logits := func(m *gpt.Model) []float32 {
		if _, err := m.Forward(tokens, nil, B, T); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, 0, B*T*cfg.VocabSize)
		row := make([]float32, cfg.VocabSize)
		for i := range B * T {
			m.LogitsRow(row, i/T, i%T)
			out = append(out, row...)
		}
		return out
	}
	int8Logits := func(be backend.Backend) (fp32, int8 []float32) {
		m := randomModel(t, be, cfg, B, T, gpt.Precision{})
		fp32 = logits(m)
		if _, err := m.QuantizeInt8(); err != nil {
			t.Fatal(err)
		}
		return fp32, logits(m)
	}
	cpuFP32, cpuInt8 := int8Logits(cpu.New(0))
	_, gpuInt8 := int8Logits(g)
	quantization, backends := gputest.RelL2(cpuInt8, cpuFP32), gputest.RelL2(gpuInt8, cpuInt8)
	t.Logf("relative L2: int8 vs fp32 (CPU) %.3g, GPU int8 vs CPU int8 %.3g", quantization, backends)
	if backends > quantization/4 {
		t.Fatalf("the GPU's int8 logits are %.3g from the CPU's (relative L2); int8 itself moves them %.3g", backends, quantization)
	}
}

// TestNewInferenceInt8's checks on the GPU: the same bits as QuantizeInt8's model.
func TestCUDANewInferenceInt8(t *testing.T) { testNewInferenceInt8(t, cudaBackend(t)) }
