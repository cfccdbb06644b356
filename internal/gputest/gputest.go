// Package gputest gives tests a CUDA backend, or skips them cleanly (saying why) on machines
// without a usable GPU. With GPT2GO_REQUIRE_GPU set, as scripts/gpu-check.sh does, a missing GPU
// fails the test instead, so a GPU run cannot silently skip.
package gputest

import (
	"math"
	"os"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cuda"
)

// RequireEnv is the variable that turns skips into failures.
const RequireEnv = "GPT2GO_REQUIRE_GPU"

// Backend returns a CUDA backend on GPU 0 with opts, or skips tb.
func Backend(tb testing.TB, opts cuda.Options) *cuda.Backend {
	tb.Helper()
	be, err := cuda.New(opts)
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("%s is set but the CUDA backend did not start: %v", RequireEnv, err)
		}
		tb.Skipf("no usable GPU, so this GPU test did not run: %v", err)
	}
	return be
}

// RelL2 is |got - want| / |want| over whole tensors (float64 sums): the measure tests use to
// compare a GPU's result with the CPU's or a reference's.
func RelL2(got, want []float32) float64 {
	var d, w float64
	for i := range got {
		d += (float64(got[i]) - float64(want[i])) * (float64(got[i]) - float64(want[i]))
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / max(w, 1e-300))
}
