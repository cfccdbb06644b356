package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/train"
)

// The speed ladder (`gpt2go bench --ladder`): the same training step timed one optimisation at a
// time, gpt2go's rungs and the PyTorch peer's (bench/torch_gpu.py: build-nanogpt's road) in one
// command, each rung in a child process of its own so that no rung inherits another's memory,
// kernels or clocks.

// ladderRung is one configuration: gpt2go's bench with extra flags and environment, or the
// PyTorch script with its flags.
type ladderRung struct {
	Peer string   `json:"peer"` // "gpt2go" or "torch"
	Name string   `json:"rung"`
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
}

// gpt2goRungs are gpt2go's rungs on device ("cpu" or "cuda"). Each adds one thing to the one
// before: TF32 matmuls (attention still on fp32 FMAs), attention on tensor cores too, bf16
// activations and 16-bit parameter copies (fp32 master weights), cuBLASLt algorithms picked by
// timing instead of its heuristic's first, the MLP's GELU in the matmul epilogues, step s+1
// queued before step s is read back (no sync with the host inside a step; train/step.go), then
// each part of a step replayed as a CUDA graph (train/graphs.go). The CPU
// has no TF32, tensor cores or cuBLASLt, so its ladder is short.
func gpt2goRungs(device string) []ladderRung {
	if device == "cpu" {
		return []ladderRung{
			{Peer: "gpt2go", Name: "fp32", Args: []string{"--precision", "fp32"}},
			{Peer: "gpt2go", Name: "bf16 (emulated)", Args: []string{"--precision", "bf16"}},
		}
	}
	// The rungs before tuning, fusion, pipelining and graphs.
	plain := []string{"GPT2GO_MATMUL_TUNE=0", "GPT2GO_GELU_FUSION=0", "GPT2GO_SYNC_STEPS=1", "GPT2GO_CUDA_GRAPHS=0"}
	return []ladderRung{
		{Peer: "gpt2go", Name: "fp32", Args: []string{"--precision", "fp32"}, Env: plain},
		{Peer: "gpt2go", Name: "tf32 matmuls", Args: []string{"--precision", "tf32"}, Env: append([]string{"GPT2GO_ATTENTION=fma"}, plain...)},
		{Peer: "gpt2go", Name: "+ tensor-core attention", Args: []string{"--precision", "tf32"}, Env: plain},
		{Peer: "gpt2go", Name: "bf16 storage", Args: []string{"--precision", "bf16"}, Env: plain},
		{Peer: "gpt2go", Name: "+ tuned matmuls", Args: []string{"--precision", "bf16"}, Env: plain[1:]},
		{Peer: "gpt2go", Name: "+ GELU epilogues", Args: []string{"--precision", "bf16"}, Env: plain[2:]},
		{Peer: "gpt2go", Name: "+ no syncs", Args: []string{"--precision", "bf16"}, Env: plain[3:]},
		{Peer: "gpt2go", Name: "+ cuda graphs", Args: []string{"--precision", "bf16"}},
	}
}

// torchRungs are build-nanogpt's road in bench/torch_gpu.py (its model pads the vocabulary to
// 50304 throughout except in the first rung, as that road's "nice numbers" step does).
func torchRungs() []ladderRung {
	base := []string{"--vocab-pad", "0", "--tf32", "0", "--sdpa", "0"}
	steps := []struct {
		name string
		set  []string
	}{
		{"fp32 eager", nil},
		{"tf32 matmuls", []string{"--tf32", "1"}},
		{"bf16 autocast", []string{"--autocast", "bf16"}},
		{"+ torch.compile", []string{"--compile", "1"}},
		{"+ flash SDPA", []string{"--sdpa", "1"}},
		{"+ vocab 50304", []string{"--vocab-pad", "1"}},
		{"+ fused AdamW", []string{"--fused-adamw", "1"}},
	}
	var rungs []ladderRung
	args := base
	for _, s := range steps {
		args = setArgs(args, s.set)
		rungs = append(rungs, ladderRung{Peer: "torch", Name: s.name, Args: args})
	}
	return rungs
}

// setArgs returns args (pairs of --flag value) with the pairs of set replacing or added to them.
func setArgs(args, set []string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(set); i += 2 {
		found := false
		for j := 0; j+1 < len(out); j += 2 {
			if out[j] == set[i] {
				out[j+1], found = set[i+1], true
			}
		}
		if !found {
			out = append(out, set[i], set[i+1])
		}
	}
	return out
}

// rungResult is one measured rung, or why it has no figures.
type rungResult struct {
	ladderRung
	MsPerStep float64 `json:"ms_per_step,omitempty"`
	TokPerSec float64 `json:"tok_per_s,omitempty"`
	MFU       float64 `json:"mfu_pct,omitempty"`
	MemGiB    float64 `json:"memory_gib,omitempty"` // GPU memory allocated (gpt2go) or torch's peak; host RSS on the CPU
	Device    string  `json:"device,omitempty"`
	Err       string  `json:"error,omitempty"`

	peakGFlops float64 // gpt2go's measured matmul peak (train.BenchResult.PeakGFlops)
}

// ladderRunner runs one rung and returns its JSON line's figures; the ladder's only contact with
// processes, so that tests can run the rungs in their own binary.
type ladderRunner func(ctx context.Context, r ladderRung) (*rungResult, error)

// ladderOptions are what the children need: the bench flags the user gave (model, batch, steps,
// device), the peer's command, and the model for the FLOP count.
type ladderOptions struct {
	benchArgs   []string
	cfg         gpt.Config
	B, T, steps int
	warmup      int
	python      string // "none": no PyTorch rungs
	torchScript string
	self        string   // gpt2go's executable
	selfEnv     []string // added to gpt2go children's environment
}

// execRunner runs rungs as child processes: gpt2go's bench --json, or the PyTorch script --json.
func execRunner(o ladderOptions) ladderRunner {
	return func(ctx context.Context, r ladderRung) (*rungResult, error) {
		var cmd *exec.Cmd
		if r.Peer == "gpt2go" {
			args := append(append([]string{"bench"}, o.benchArgs...), r.Args...)
			cmd = exec.CommandContext(ctx, o.self, append(args, "--json")...)
			cmd.Env = append(append(os.Environ(), o.selfEnv...), r.Env...)
		} else {
			c := o.cfg
			args := append([]string{o.torchScript, "--model", "", "--n-layer", strconv.Itoa(c.NumLayers), "--n-head", strconv.Itoa(c.NumHeads),
				"--n-embd", strconv.Itoa(c.Channels), "-B", strconv.Itoa(o.B), "-T", strconv.Itoa(o.T),
				"--steps", strconv.Itoa(o.steps), "--warmup-steps", strconv.Itoa(max(o.warmup, 2))}, r.Args...)
			cmd = exec.CommandContext(ctx, o.python, append(args, "--json")...)
			cmd.Env = append(os.Environ(), r.Env...)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			why := stderr.String() // where both peers say what went wrong
			if strings.TrimSpace(why) == "" {
				why = stdout.String()
			}
			return nil, fmt.Errorf("%v: %s", err, lastLine(why))
		}
		return parseRung(r, stdout.Bytes())
	}
}

// parseRung reads the last JSON line a child printed: train.BenchResult from gpt2go, torch_gpu.py's
// object from PyTorch.
func parseRung(r ladderRung, out []byte) (*rungResult, error) {
	line := lastLine(string(out))
	res := &rungResult{ladderRung: r}
	if r.Peer == "gpt2go" {
		var b train.BenchResult
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			return nil, fmt.Errorf("no JSON result from gpt2go bench: %q", line)
		}
		res.MsPerStep, res.TokPerSec, res.Device, res.peakGFlops = b.MsPerStep, b.TokPerSec, b.Backend, b.PeakGFlops
		res.MemGiB = b.DeviceMemMB / 1024
		if res.MemGiB == 0 {
			res.MemGiB = b.PeakRSSMB / 1024
		}
		return res, nil
	}
	var t struct {
		MsPerStep float64 `json:"ms_per_step"`
		TokPerSec float64 `json:"tok_per_s"`
		PeakMem   float64 `json:"peak_mem_gib"`
		Device    string  `json:"device"`
	}
	if err := json.Unmarshal([]byte(line), &t); err != nil || t.MsPerStep <= 0 {
		return nil, fmt.Errorf("no JSON result from the PyTorch script: %q", line)
	}
	res.MsPerStep, res.TokPerSec, res.MemGiB, res.Device = t.MsPerStep, t.TokPerSec, t.PeakMem, t.Device
	return res, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// datasheetPeaks are dense bf16 tensor-core peaks in TFLOP/s (NVIDIA's datasheets, without
// sparsity), matched against the device name in order: the ladder's MFU is measured against the
// bf16 peak for every rung, so that the rungs compare with each other and with the 40% target.
var datasheetPeaks = []struct {
	match string
	bf16  float64
}{
	{"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989}, {"H200 NVL", 835}, {"H200", 989},
	{"A100", 312}, {"L40S", 362}, {"A10G", 70}, {"RTX 4090", 165},
}

// mfuPeak returns the peak (FLOP/s) MFU is measured against and its description: the GPU's
// datasheet bf16 peak, or, without one (a CPU, an unknown GPU), measuredGFlops, the backend's own
// measured matmul peak.
func mfuPeak(device string, measuredGFlops float64) (float64, string) {
	for _, p := range datasheetPeaks {
		if strings.Contains(device, p.match) {
			return p.bf16 * 1e12, fmt.Sprintf("the dense bf16 peak of an %s, %.0f TFLOP/s (datasheet)", p.match, p.bf16)
		}
	}
	if measuredGFlops > 0 {
		return measuredGFlops * 1e9, fmt.Sprintf("the backend's measured fp32 matmul peak, %.1f GFLOP/s", measuredGFlops)
	}
	return 0, "no known peak"
}

// ladderFlopsPerToken counts issue 18's model FLOPs: 6 per parameter (the tied LM head as the
// matmul it is) plus 6*L*C*T for causal attention, half of the PaLM count's 12*L*C*T.
func ladderFlopsPerToken(c gpt.Config, T int) float64 {
	return c.FlopsPerToken(T) - 6*float64(c.NumLayers*c.Channels*T)
}

var errLadderInterrupted = errors.New("bench --ladder: interrupted")

// runLadder runs every rung (gpt2go's, then PyTorch's unless python is "none") and prints the
// table, or the results as JSON. A rung that fails gets its error in the table and the ladder
// goes on; the command fails at the end when any gpt2go rung did.
//
// The first rung (fp32, the same flags on every device) also says where --device (auto by
// default) put the model, which picks the other rungs: the parent never opens a device itself.
func runLadder(ctx context.Context, o ladderOptions, run ladderRunner, asJSON bool, stdout, stderr io.Writer) error {
	var results []*rungResult
	failed := false
	measure := func(r ladderRung) *rungResult {
		fmt.Fprintf(stderr, "ladder: %s %s ...\n", r.Peer, r.Name)
		res, err := run(ctx, r)
		if err != nil {
			res = &rungResult{ladderRung: r, Err: err.Error()}
			failed = failed || r.Peer == "gpt2go"
		}
		results = append(results, res)
		return res
	}
	first := measure(gpt2goRungs("cpu")[0])
	if ctx.Err() != nil {
		return errLadderInterrupted
	}
	if first.Err != "" {
		return fmt.Errorf("bench --ladder: the first rung (fp32) failed: %s", first.Err)
	}
	device := "cpu"
	if strings.HasPrefix(first.Device, "cuda") {
		device = "cuda"
	}
	rungs := gpt2goRungs(device)[1:]
	if o.python != "none" {
		if device == "cpu" {
			fmt.Fprintln(stderr, "bench --ladder: the PyTorch rungs need a GPU (bench/torch_gpu.py); on the CPU compare with bench/cpu_compare.sh")
		} else {
			rungs = append(rungs, torchRungs()...)
		}
	}
	for _, r := range rungs {
		measure(r)
		if ctx.Err() != nil {
			return errLadderInterrupted
		}
	}
	peak, peakWhat := mfuPeak(first.Device, first.peakGFlops)
	flops := ladderFlopsPerToken(o.cfg, o.T)
	for _, r := range results {
		if r.Err == "" && peak > 0 {
			r.MFU = 100 * r.TokPerSec * flops / peak
		}
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(results); err != nil {
			return err
		}
	} else {
		printLadder(stdout, o, first.Device, peakWhat, results)
	}
	if failed {
		return errors.New("bench --ladder: a gpt2go rung failed (its error is in the table)")
	}
	return nil
}

func printLadder(w io.Writer, o ladderOptions, device, peakWhat string, results []*rungResult) {
	c := o.cfg
	fmt.Fprintf(w, "speed ladder: %d layers x %d heads x %d channels (%.1fM params), B=%d T=%d, %d timed steps, on %s\n",
		c.NumLayers, c.NumHeads, c.Channels, float64(c.NumParams())/1e6, o.B, o.T, o.steps, device)
	fmt.Fprintf(w, "MFU: 6N + 6LCT FLOPs per token against %s\n\n", peakWhat)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "peer\trung\tms/step\ttok/s\tMFU\tmemory GiB\tvs previous\t")
	var prev *rungResult
	for _, r := range results {
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t%s\tFAIL\t\t\t\t\t  %s\n", r.Peer, r.Name, r.Err)
			continue
		}
		vs := ""
		if prev != nil && prev.Peer == r.Peer {
			vs = fmt.Sprintf("%.2fx", prev.MsPerStep/r.MsPerStep)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.0f\t%.1f%%\t%.2f\t%s\t\n", r.Peer, r.Name, r.MsPerStep, r.TokPerSec, r.MFU, r.MemGiB, vs)
		prev = r
	}
	tw.Flush()
	best := map[string]*rungResult{}
	for _, r := range results {
		if r.Err == "" && (best[r.Peer] == nil || r.TokPerSec > best[r.Peer].TokPerSec) {
			best[r.Peer] = r
		}
	}
	if g, t := best["gpt2go"], best["torch"]; g != nil && t != nil {
		fmt.Fprintf(w, "\nbest gpt2go (%s) / best PyTorch (%s): %.2fx the tok/s\n", g.Name, t.Name, g.TokPerSec/t.TokPerSec)
	}
}

// ladderBenchArgs turns the bench flags the user set into the children's flags, leaving out the
// ladder's own and those each rung sets.
func ladderBenchArgs(fs *flag.FlagSet) []string {
	skip := map[string]bool{"ladder": true, "json": true, "python": true, "torch-script": true, "precision": true, "tf32": true, "cpuprofile": true, "cuda-graphs": true}
	var args []string
	fs.Visit(func(f *flag.Flag) {
		if !skip[f.Name] {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}
