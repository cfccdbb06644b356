package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpt2go/gpt2go/dist"
)

// envSwitches are the GPT2GO_ variables that take one of a few values, with those values (the
// empty value is always allowed and means the default). The packages read them where they act,
// some at start-up; checkEnv refuses a value none of them understands, which they would ignore.
var envSwitches = map[string][]string{
	"GPT2GO_SGEMM":       {"avx2"},       // CPU float32 matmul: avx2 keeps the AVX-512 kernel off
	"GPT2GO_INT8":        {"go", "avx2"}, // CPU int8 matmul: a slower kernel, the same bits
	"GPT2GO_ATTENTION":   {"fma"},        // CUDA attention: the FMA kernels instead of tensor cores
	"GPT2GO_CUDA_GRAPHS": {"0", "1"},
	"GPT2GO_MATMUL_TUNE": {"0", "1"},
	"GPT2GO_GELU_FUSION": {"0", "1"},
	"GPT2GO_SYNC_STEPS":  {"0", "1"},
	"GPT2GO_CUDA_SYNC":   {"0", "1"},
}

// envFree are the GPT2GO_ variables whose value is free: paths, or any value (a port: the
// dist package checks it where it reads it).
var envFree = []string{"GPT2GO_SHAKESPEARE", "GPT2GO_CUDA_LIBS", "GPT2GO_MPI_LIBS",
	"GPT2GO_KERNEL_CACHE", "GPT2GO_DEBUG", dist.IDPortEnv}

// envTestPrefixes mark the variables that the tests and scripts read (GPT2GO_REQUIRE_GPU, ...):
// not for gpt2go itself, but not a typo either.
var envTestPrefixes = []string{"GPT2GO_REQUIRE_", "GPT2GO_TEST_", "GPT2GO_MPI_", "GPT2GO_LONG_TESTS",
	"GPT2GO_CHROMIUM", "GPT2GO_KEEP_SCREENSHOT", "GPT2GO_FIXTURE_PINNED"}

// checkEnv looks at the GPT2GO_ variables in environ (NAME=VALUE entries, as os.Environ gives
// them). A switch set to a value it does not take is an error; a name gpt2go does not know (a typo,
// most likely) is a warning, returned to be printed.
func checkEnv(environ []string) (warnings []string, err error) {
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "GPT2GO_") {
			continue
		}
		if values, ok := envSwitches[name]; ok {
			if value != "" && !slices.Contains(values, value) {
				return warnings, fmt.Errorf("%s=%s is not a value it takes; set it to %s, or unset it for the default",
					name, value, strings.Join(values, " or "))
			}
			continue
		}
		if slices.Contains(envFree, name) || slices.ContainsFunc(envTestPrefixes, func(p string) bool {
			return strings.HasPrefix(name, p)
		}) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("%s is set but gpt2go reads no such variable (it reads %s)",
			name, strings.Join(envKnown(), ", ")))
	}
	return warnings, nil
}

// envKnown lists the variables a user may set, sorted.
func envKnown() []string {
	names := slices.Clone(envFree)
	for name := range envSwitches {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
