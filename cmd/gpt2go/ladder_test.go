package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/gpt"
)

// On the CPU the ladder runs its two rungs as real child processes (this test binary acting as
// gpt2go) and prints them with MFU against the measured matmul peak; PyTorch's rungs are GPU-only.
func TestBenchLadderCPU(t *testing.T) {
	ladderSelfEnv = []string{"GPT2GO_TEST_CHILD=1"}
	defer func() { ladderSelfEnv = nil }()
	code, out, errOut := gpt2go(t, "bench", "--ladder", "--device", "cpu", "--threads", "1", "--n-layer", "1", "--n-head", "2", "--n-embd", "32",
		"--block-size", "16", "--vocab-size", "64", "--batch-size", "2", "--seq-len", "16", "--steps", "2", "--warmup-steps", "0")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Logf("\n%s", out)
	for _, want := range []string{"speed ladder: 1 layers x 2 heads x 32 channels", "B=2 T=16", "measured fp32 matmul peak", "gpt2go  fp32 ", "gpt2go  bf16 (emulated) "} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	if !strings.Contains(errOut, "PyTorch rungs need a GPU") {
		t.Errorf("stderr does not say why PyTorch's rungs are skipped:\n%s", errOut)
	}
	code, out, errOut = gpt2go(t, "bench", "--ladder", "--precision", "bf16", "--device", "cpu")
	if code == 0 || !strings.Contains(errOut, "leave out --precision") {
		t.Errorf("--ladder with --precision: exit %d, stderr %q", code, errOut)
	}
}

// The table and JSON from a fake runner on an H100: the rungs in order, PyTorch's flags added one
// rung at a time, MFU against the datasheet bf16 peak, each rung against the one before, the best
// of each peer, and failures: a PyTorch rung's is shown and tolerated, a gpt2go rung's fails the
// command after the table.
func TestBenchLadderTable(t *testing.T) {
	cfg := gpt.Config{NumLayers: 12, NumHeads: 12, Channels: 768, BlockSize: 1024, VocabSize: 50257, PaddedVocabSize: 50304}
	o := ladderOptions{cfg: cfg, B: 16, T: 1024, steps: 10, python: "python3"}
	const dev = "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, 79 GiB, fp32 matmuls)"
	ms := map[string]float64{"fp32": 300, "tf32 matmuls": 110, "+ tensor-core attention": 80, "bf16 storage": 40, "+ tuned matmuls": 36, "+ GELU epilogues": 34, "+ no syncs": 33, "+ cuda graphs": 31,
		"fp32 eager": 320, "tf32 matmuls/torch": 120, "bf16 autocast": 90, "+ torch.compile": 60, "+ flash SDPA": 45, "+ vocab 50304": 44, "+ fused AdamW": 42}
	var ran []ladderRung
	fake := func(fail string) ladderRunner {
		return func(_ context.Context, r ladderRung) (*rungResult, error) {
			ran = append(ran, r)
			if r.Peer+" "+r.Name == fail {
				return nil, errors.New("out of memory")
			}
			key := r.Name
			if r.Peer == "torch" && key == "tf32 matmuls" {
				key += "/torch"
			}
			return &rungResult{ladderRung: r, MsPerStep: ms[key], TokPerSec: 16 * 1024 / (ms[key] / 1000), Device: dev, MemGiB: 10}, nil
		}
	}
	var out, errOut bytes.Buffer
	if err := runLadder(context.Background(), o, fake("torch + torch.compile"), false, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	var names []string
	for _, r := range ran {
		names = append(names, r.Peer+" "+r.Name)
	}
	want := []string{"gpt2go fp32", "gpt2go tf32 matmuls", "gpt2go + tensor-core attention", "gpt2go bf16 storage", "gpt2go + tuned matmuls", "gpt2go + GELU epilogues",
		"gpt2go + no syncs", "gpt2go + cuda graphs", "torch fp32 eager", "torch tf32 matmuls", "torch bf16 autocast", "torch + torch.compile", "torch + flash SDPA", "torch + vocab 50304", "torch + fused AdamW"}
	if !slices.Equal(names, want) {
		t.Errorf("rungs ran %v, want %v", names, want)
	}
	last := ran[len(ran)-1].Args
	for _, f := range [][2]string{{"--tf32", "1"}, {"--autocast", "bf16"}, {"--compile", "1"}, {"--sdpa", "1"}, {"--vocab-pad", "1"}, {"--fused-adamw", "1"}} {
		if i := slices.Index(last, f[0]); i < 0 || last[i+1] != f[1] || strings.Count(strings.Join(last, " "), f[0]+" ") != 1 {
			t.Errorf("the last PyTorch rung's flags %v lack %s %s exactly once", last, f[0], f[1])
		}
	}
	if i := slices.Index(ran[8].Args, "--vocab-pad"); i < 0 || ran[8].Args[i+1] != "0" {
		t.Errorf("PyTorch's first rung should keep the 50257 vocabulary: %v", ran[8].Args)
	}
	if !slices.Contains(ran[1].Env, "GPT2GO_ATTENTION=fma") || slices.Contains(ran[2].Env, "GPT2GO_ATTENTION=fma") {
		t.Errorf("the tf32 rungs' environments: %v and %v", ran[1].Env, ran[2].Env)
	}
	// Tuning, GELU fusion, pipelined steps and graphs are off until their rungs, each rung
	// adding one.
	for i, want := range [][]string{3: {"GPT2GO_MATMUL_TUNE=0", "GPT2GO_GELU_FUSION=0", "GPT2GO_SYNC_STEPS=1", "GPT2GO_CUDA_GRAPHS=0"},
		4: {"GPT2GO_GELU_FUSION=0", "GPT2GO_SYNC_STEPS=1", "GPT2GO_CUDA_GRAPHS=0"}, 5: {"GPT2GO_SYNC_STEPS=1", "GPT2GO_CUDA_GRAPHS=0"},
		6: {"GPT2GO_CUDA_GRAPHS=0"}, 7: nil} {
		if i >= 3 && !slices.Equal(ran[i].Env, want) {
			t.Errorf("rung %q's environment %v, want %v", ran[i].Name, ran[i].Env, want)
		}
	}
	text := out.String()
	for _, w := range []string{"dense bf16 peak of an H100, 989 TFLOP/s", "2.73x", "2.00x", "FAIL", "out of memory",
		"best gpt2go (+ cuda graphs) / best PyTorch (+ fused AdamW): 1.35x the tok/s"} {
		if !strings.Contains(text, w) {
			t.Errorf("the table lacks %q", w)
		}
	}
	// MFU of the tensor-core rung: 409,600 tok/s at 6N + 6LCT FLOPs per token against 989 TFLOP/s.
	mfu := 100 * (16 * 1024 / 0.040) * (cfg.FlopsPerToken(1024) - 6*12*768*1024) / 989e12
	out.Reset()
	ran = nil
	if err := runLadder(context.Background(), o, fake(""), true, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var res []rungResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res) != 15 {
		t.Fatalf("--json gave %d results, %v:\n%s", len(res), err, out.String())
	}
	if got := res[3].MFU; math.Abs(got-mfu) > 1e-9 || got < 30 || got > 36 {
		t.Errorf("tensor-core rung MFU %.4f%%, want %.4f%%", got, mfu)
	}
	out.Reset()
	err := runLadder(context.Background(), o, fake("gpt2go tf32 matmuls"), false, &out, &errOut)
	if err == nil || !strings.Contains(out.String(), "FAIL") {
		t.Errorf("a failed gpt2go rung: err %v, table:\n%s", err, out.String())
	}
}

// parseRung reads both peers' JSON lines, taking the last line of the output.
func TestParseRung(t *testing.T) {
	g, err := parseRung(ladderRung{Peer: "gpt2go"}, []byte("note\n{\"backend\":\"cuda:0 X\",\"ms_per_step\":40,\"tok_per_s\":409600,\"device_mem_mb\":2048,\"peak_gflop_per_s\":5}\n"))
	if err != nil || g.MsPerStep != 40 || g.MemGiB != 2 || g.Device != "cuda:0 X" || g.peakGFlops != 5 {
		t.Errorf("gpt2go: %+v, %v", g, err)
	}
	p, err := parseRung(ladderRung{Peer: "torch"}, []byte("torch_gpu: 42 ms\n{\"ms_per_step\":42,\"tok_per_s\":390000,\"peak_mem_gib\":11.5,\"device\":\"NVIDIA H100\"}"))
	if err != nil || p.MsPerStep != 42 || p.MemGiB != 11.5 {
		t.Errorf("torch: %+v, %v", p, err)
	}
	if _, err := parseRung(ladderRung{Peer: "torch"}, []byte("Traceback ...")); err == nil {
		t.Error("no JSON line must be an error")
	}
}
