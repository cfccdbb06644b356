package gpt_test

import "testing"

// The KV cache on the GPU gives the uncached forward's logits at every position (the CPU test's
// check, run on the CUDA backend: the cached attention kernel, the few-row matmuls through
// cuBLASLt, the encoder reading position embeddings from an offset view).
func TestCUDAKVCacheMatchesForward(t *testing.T) { testKVCacheMatchesForward(t, cudaBackend(t)) }
