package main

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/train"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("bench")
	var mf modelFlags
	var dev deviceFlags
	var B, T, steps, warmup int
	var asJSON, ladder bool
	var cpuProfile, python, torchScript string
	mf.register(fs)
	mf.registerArch(fs)
	mf.ctx, mf.progress = ctx, stderr
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the timed steps to this file (go tool pprof)")
	fs.IntVar(&B, "batch-size", 4, "sequences per step")
	fs.IntVar(&T, "seq-len", 64, "tokens per sequence")
	fs.IntVar(&steps, "steps", 5, "timed steps")
	fs.IntVar(&warmup, "warmup-steps", 1, "untimed steps first")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object")
	fs.BoolVar(&ladder, "ladder", false, "time the speed ladder: fp32, then one optimisation at a time (TF32 matmuls, tensor-core attention, bf16), each rung in a child process, and on a GPU PyTorch's rungs (build-nanogpt's road) beside them")
	fs.StringVar(&python, "python", "python3", "the Python with PyTorch for --ladder's peer rungs; none to skip them")
	fs.StringVar(&torchScript, "torch-script", "bench/torch_gpu.py", "--ladder's PyTorch script")
	dev.register(fs)
	dev.registerGraphs(fs)
	// bench has no data: the model flags' help that speaks of it says what bench does instead.
	fs.Lookup("vocab-size").Usage = "vocabulary of the random tokens (default 50257, GPT-2's; with --arch bert 30522, bert-base-uncased's), padded as train pads it: by --pad-vocab, or to the --model preset's size (gpt2*: 50304)"
	fs.Lookup("arch").Usage = "model family: gpt2 (decoder, next-token prediction) or bert (encoder, masked-language modelling)"
	fs.Lookup("init").Usage = "time the architecture of these pretrained weights (the steps start from a fresh initialisation): " + train.InitHelp
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	set := setFlags(fs)
	if mf.archName() == "bert" && mf.init != "" { // before a download
		return fmt.Errorf("--init loads GPT-2 weights; a BERT is benched from its own initialisation (leave out --init)")
	}
	if err := positiveVocab(set, mf.vocabSize); err != nil {
		return err
	}
	vocab := 50257 // GPT-2's BPE
	if mf.archName() == "bert" {
		vocab = 30522 // bert-base-uncased's WordPiece
	}
	if set["vocab-size"] {
		vocab = mf.vocabSize
	}
	cfg, err := mf.build(set, vocab)
	if err != nil {
		return err
	}
	if T > cfg.BlockSize {
		return fmt.Errorf("--seq-len %d exceeds the model's block size %d", T, cfg.BlockSize)
	}
	// The run bench times: the model and batch shape above, random tokens (a BERT's with its
	// special tokens as the vocabulary's last four), the trainer's optimizer defaults.
	run := train.Defaults()
	run.Arch, run.Model, run.BatchSize, run.SeqLen, run.Precision = mf.archName(), cfg, B, T, dev.precision
	if run.Encoder, err = mf.encoder(set); err != nil {
		return err
	}
	run.Tokenizer = train.RandomTokensInfo(cfg.VocabSize, run.IsBERT())
	if ladder && run.IsBERT() {
		return fmt.Errorf("bench --ladder times GPT-2 (its rungs and PyTorch's are a GPT-2's); leave out --arch bert")
	}
	if ladder {
		if set["precision"] || set["cpuprofile"] {
			return fmt.Errorf("bench --ladder sets the precision of each rung itself: leave out --precision and --cpuprofile")
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench --ladder: cannot find its own executable to run the rungs: %w", err)
		}
		o := ladderOptions{benchArgs: ladderBenchArgs(fs), cfg: cfg, B: B, T: T, steps: steps, warmup: warmup,
			python: python, torchScript: torchScript, self: self, selfEnv: ladderSelfEnv}
		return runLadder(ctx, o, execRunner(o), asJSON, stdout, stderr)
	}
	be, err := dev.open(stderr)
	if err != nil {
		return err
	}
	if p, ok := be.(backend.Peaker); ok && cpuProfile != "" {
		p.PeakFLOPS() // measured (and cached) now, so that the profile holds only training steps
	}
	stop, err := startCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer func() {
		if perr := stop(); err == nil {
			err = perr
		} else if perr != nil {
			fmt.Fprintf(stderr, "warning: %v\n", perr)
		}
	}()
	// The budget before the model allocates, for the micro-batch that would fit.
	budget := backend.BudgetOf(be)
	res, err := train.BenchRun(ctx, be, run, warmup, steps, !dev.graphs)
	if err != nil {
		return err
	}
	_, onGPU := be.(*cuda.Backend)
	res.Hints, res.LargestBatch = train.Pitfalls(run, dev.modelPrecision(), budget, onGPU)
	if h := res.LaunchHint(); h != "" {
		res.Hints = append(res.Hints, h)
	}
	res.Precision = train.PrecisionOn(dev.precision, onGPU)
	if a, ok := be.(interface{ Allocated() int64 }); ok {
		res.DeviceMemMB = float64(a.Allocated()) / (1 << 20)
	}
	if _, ok := be.(*cpu.Backend); ok {
		res.MatmulKernel = cpu.MatmulKernel()
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	on := res.Backend
	if res.MatmulKernel != "" {
		on += ", matmul kernel " + res.MatmulKernel
	}
	fmt.Fprintf(stdout, "%s %d layers x %d heads x %d channels (%.1fM params), B=%d T=%d, %s, on %s\n",
		familyName(run.Arch), cfg.NumLayers, cfg.NumHeads, cfg.Channels, float64(run.NumParams())/1e6, B, T, precisionRun(dev.precision, res.Precision), on)
	fmt.Fprintf(stdout, "%.1f ms/step (min %.1f) over %d steps | %.0f tok/s | %.1f GFLOP/s",
		res.MsPerStep, res.MinMs, res.Steps, res.TokPerSec, res.GFlops)
	if res.PeakGFlops > 0 {
		fmt.Fprintf(stdout, " = %.0f%% of the measured sgemm peak %.1f GFLOP/s", res.PctOfPeak, res.PeakGFlops)
	}
	fmt.Fprintf(stdout, " | peak RSS %.0f MB, Go heap %.0f MB\n", res.PeakRSSMB, res.PeakHeapMB)
	if res.Graphs != "" {
		fmt.Fprintf(stdout, "cuda graphs: %s\n", res.Graphs)
	}
	if c := res.Calls; c != nil {
		fmt.Fprintln(stdout, c)
	}
	for _, h := range res.Hints {
		fmt.Fprintf(stdout, "hint: %s\n", h)
	}
	if g, ok := be.(*cuda.Backend); ok && dev.verbose {
		printTuned(stdout, g.TunedMatmuls(), g.MatmulCachePath())
	}
	return nil
}

// precisionRun names the precision that ran (train.PrecisionOn), and the one asked for where
// the device ran it as another.
func precisionRun(asked, ran string) string {
	if asked == ran {
		return ran
	}
	return fmt.Sprintf("%s (%s runs as %s on the CPU)", ran, asked, ran)
}

// printTuned reports the matmul algorithms picked by timing: each shape's candidates, the rank
// of the fastest in cuBLASLt's heuristic list, its time and the heuristic's first choice's.
func printTuned(w io.Writer, shapes []cuda.TunedShape, cache string) {
	if len(shapes) == 0 {
		return
	}
	if cache == "" {
		cache = "none: choices last for this process"
	}
	fmt.Fprintf(w, "cuBLASLt algorithms picked by timing (cache %s):\n", cache)
	fmt.Fprintf(w, "  %-64s %5s %4s %10s %10s %6s\n", "shape", "cands", "pick", "us", "first us", "gain")
	var first, chosen float64
	for _, s := range shapes {
		src := ""
		if s.Cached {
			src = " (cached)"
		}
		fmt.Fprintf(w, "  %-64s %5d %4d %10.1f %10.1f %5.2fx%s\n", s.Key, s.Candidates, s.Index, s.Micros, s.FirstMicro, s.FirstMicro/s.Micros, src)
		first += s.FirstMicro
		chosen += s.Micros
	}
	fmt.Fprintf(w, "  one call of each shape: %.1f us with the picks, %.1f us with the heuristic's first (%.2fx)\n", chosen, first, first/chosen)
}

// ladderSelfEnv is added to the environment of --ladder's gpt2go children (tests set it so that
// their binary behaves as gpt2go).
var ladderSelfEnv []string

// startCPUProfile starts a Go CPU profile into path (nothing when path is empty); stop ends it
// and puts the profile in place, the way atomicfile writes every output: into a temp file beside
// path, fsynced and renamed over it only when whole, so that a full disk leaves the old file and
// an error, not a torn profile and exit 0. path is refused up front where it would replace a
// run's files or a file that is not a CPU profile (a checkpoint given by mistake).
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	if err := checkProfileOutput(path); err != nil {
		return nil, err
	}
	started, done, result := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		result <- writeProfile(path, func(w io.Writer) error {
			sw := &stickyWriter{w: w} // pprof drops its writer's errors
			if err := pprof.StartCPUProfile(sw); err != nil {
				started <- err
				return err
			}
			started <- nil
			<-done
			pprof.StopCPUProfile()
			return sw.err
		})
	}()
	select {
	case err = <-started:
	case err = <-result: // the temp file could not be made
	}
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		close(done)
		if err := <-result; err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// writeProfile is atomicfile.Write; tests make the writes fail.
var writeProfile = atomicfile.Write

// stickyWriter keeps the first error of its writer and fails every later write with it.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// checkProfileOutput refuses a --cpuprofile path that is a run's folder, checkpoint or log (as
// every output is refused), a folder, or an existing file other than a Go CPU profile (a torn
// one included): a gzip stream of protobuf fields of pprof's Profile message. An empty file
// holds nothing to lose.
func checkProfileOutput(path string) error {
	if err := checkOutputFile(path, "--cpuprofile", "cpu.prof"); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil // nothing to replace, or the write says what is wrong
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return nil
	}
	if !isProfile(f) {
		return fmt.Errorf("--cpuprofile %s exists and is not a Go CPU profile; choose another path (an earlier profile is replaced)", path)
	}
	return nil
}

// isProfile reports whether r starts as a gzip-compressed pprof profile: its first 64 KiB (or
// all of it) are protobuf fields numbered as Profile's (1-15), each a varint or a length-
// delimited value, the last one possibly cut off there.
func isProfile(r io.Reader) bool {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return false
	}
	b := make([]byte, 64<<10)
	n, _ := io.ReadFull(zr, b) // a torn profile is still one
	b = b[:n]
	fields := 0
	for len(b) > 0 {
		tag, k := binary.Uvarint(b)
		if k <= 0 || tag>>3 < 1 || tag>>3 > 15 {
			return false
		}
		b = b[k:]
		switch tag & 7 {
		case 0:
			if _, k = binary.Uvarint(b); k <= 0 {
				return len(b) < 10 && fields > 0 // cut off
			}
			b = b[k:]
		case 2:
			size, k := binary.Uvarint(b)
			if k <= 0 {
				return len(b) < 10 && fields > 0
			}
			b = b[k:]
			b = b[min(uint64(len(b)), size):]
		default:
			return false
		}
		fields++
	}
	return fields > 0
}

// positiveVocab refuses a given --vocab-size below 1 (bench and profile, whose tokens are
// random without data, where build would blame a missing meta.json).
func positiveVocab(set map[string]bool, vocabSize int) error {
	if set["vocab-size"] && vocabSize < 1 {
		return fmt.Errorf("--vocab-size must be >= 1, got %d", vocabSize)
	}
	return nil
}

// familyName names a model family in bench's and profile's first line.
func familyName(arch string) string {
	if arch == "bert" {
		return "BERT encoder"
	}
	return "model"
}
