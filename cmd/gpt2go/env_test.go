package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCheckEnv(t *testing.T) {
	for _, tc := range []struct {
		environ  []string
		warnings int
		err      string
	}{
		{environ: []string{"HOME=/root", "GPT2GO_SGEMM=avx2", "GPT2GO_INT8=go", "GPT2GO_CUDA_GRAPHS=0",
			"GPT2GO_SHAKESPEARE=/x", "GPT2GO_DEBUG=yes", "GPT2GO_REQUIRE_GPU=1", "GPT2GO_SGEMM=", "GPT2GO_ID_PORT=29600"}},
		{environ: []string{"GPT2GO_SGEMM=avx512"}, err: "GPT2GO_SGEMM=avx512 is not a value it takes; set it to avx2"},
		{environ: []string{"GPT2GO_INT8=vnni"}, err: "set it to go or avx2"},
		{environ: []string{"GPT2GO_CUDA_GRAPHS=off"}, err: "GPT2GO_CUDA_GRAPHS=off"},
		{environ: []string{"GPT2GO_SGEM=avx2", "GPT2GO_CUDA_GRAPH=0"}, warnings: 2},
	} {
		warnings, err := checkEnv(tc.environ)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%v: %v", tc.environ, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v: error %v, want one with %q", tc.environ, err, tc.err)
		case len(warnings) != tc.warnings:
			t.Errorf("%v: warnings %q, want %d", tc.environ, warnings, tc.warnings)
		}
		for _, w := range warnings {
			if !strings.Contains(w, "GPT2GO_SGEMM, GPT2GO_SHAKESPEARE") {
				t.Errorf("warning %q does not list the known variables", w)
			}
		}
	}
}

// A bad switch stops every command before it starts, with one line.
func TestBadEnvRefused(t *testing.T) {
	t.Setenv("GPT2GO_SGEMM", "bogus")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &stdout, &stderr); code != 1 || stdout.Len() != 0 ||
		strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "GPT2GO_SGEMM=bogus") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
