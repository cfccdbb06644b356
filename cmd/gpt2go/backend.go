package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/backend/cuda"
	"github.com/gpt2go/gpt2go/dist"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/train"
)

type deviceFlags struct {
	device    string
	threads   int
	tf32      bool
	precision string        // as given; "" until open resolves the default
	flagSet   *flag.FlagSet // register's, where open reads which of --tf32 and --precision were given
	verbose   bool
	int8      bool // --int8 (registerInt8: sample and eval)
	stderr    io.Writer
	job       dist.Env // data parallel: this process's rank, whose GPU auto and cuda pick (gpuOrdinal)
	graphs    bool     // --cuda-graphs (train and bench: registerGraphs)
}

func (d *deviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.device, "device", "auto", "compute device: auto (a GPU when one is usable, else the CPU), cpu, cuda or cuda:N")
	fs.IntVar(&d.threads, "threads", 0, "CPU threads (0 = all cores)")
	fs.BoolVar(&d.tf32, "tf32", true, "GPU matmuls of fp32 buffers on TF32 tensor cores (as PyTorch recommends); given alone, --tf32 means --precision tf32 (fp32 storage, TF32 matmuls), --tf32=false means --precision fp32 (exact); with neither flag a GPU runs bf16 or fp16 (see --precision)")
	fs.StringVar(&d.precision, "precision", "", "fp32, tf32, bf16 or fp16: bf16/fp16 keep fp32 master weights and compute in 16 bits (emulated exactly on the CPU); default: bf16 on a GPU that has it (sm_80+), fp16 on older GPUs, fp32 on the CPU; --tf32 alone means tf32, --tf32=false fp32; --precision wins over --tf32")
	d.flagSet = fs
	fs.BoolVar(&d.verbose, "verbose", false, "report device details such as the memory plan (bytes per category)")
}

// registerInt8 adds --int8, for the commands that run a GPT-2 forward only (sample, eval).
func (d *deviceFlags) registerInt8(fs *flag.FlagSet) {
	fs.BoolVar(&d.int8, "int8", false, "int8 matmul weights, one scale per output channel, and inputs quantized per row: a quarter of the weight bytes (CPU: AVX-512 VNNI or AVX2; GPU: dp4a); with --precision bf16|fp16, int8 matmuls and 16-bit activations (and KV cache)")
}

// registerGraphs adds --cuda-graphs, for the commands that run training steps.
func (d *deviceFlags) registerGraphs(fs *flag.FlagSet) {
	fs.BoolVar(&d.graphs, "cuda-graphs", true, "on a GPU, record each part of a training step once as a CUDA graph and replay it (one launch instead of hundreds; the same bits); false runs every kernel directly, as does GPT2GO_CUDA_GRAPHS=0")
}

// open returns the backend the flags ask for and says which one it picked.
func (d *deviceFlags) open(stderr io.Writer) (backend.Backend, error) {
	if d.threads < 0 {
		return nil, fmt.Errorf("--threads must be >= 0, got %d", d.threads)
	}
	if n := runtime.NumCPU(); d.threads > n { // each thread spins for work: more than cores only waits
		fmt.Fprintf(stderr, "warning: --threads %d is more than the %d CPUs this process may use; steps will be slower than with --threads %d (or 0, all of them)\n", d.threads, n, n)
	}
	d.stderr = stderr
	dt, err := train.ParsePrecision(d.precision)
	if err != nil {
		return nil, err
	}
	given := setFlags(d.flagSet)
	switch d.precision { // --precision wins over --tf32
	case "fp32":
		d.tf32 = false
	case "tf32":
		d.tf32 = true
	}
	be, err := d.openDevice(stderr)
	if err != nil {
		return nil, err
	}
	if err := be.CheckDType(dt); err != nil {
		return nil, err
	}
	gpuMajor := 0
	if g, onGPU := be.(*cuda.Backend); onGPU {
		gpuMajor, _ = g.ComputeCapability()
	}
	d.precision = resolvePrecision(d.precision, d.tf32, given["tf32"], gpuMajor)
	return be, nil
}

// resolvePrecision is the precision a command runs in: --precision when given; else what --tf32
// says when it is given (--tf32: tf32, fp32 storage and TF32 matmuls, as before mixed precision;
// --tf32=false: exact fp32); else on a GPU of compute capability gpuMajor the default of its
// generation (bf16 from sm_80, where cuBLASLt multiplies bf16; fp16 on sm_70 and sm_75), and fp32
// on the CPU (gpuMajor 0), where 16-bit formats are emulated and cost time and memory.
func resolvePrecision(precision string, tf32, tf32Given bool, gpuMajor int) string {
	switch {
	case precision != "":
		return precision
	case tf32Given && tf32:
		return "tf32"
	case tf32Given:
		return "fp32"
	case gpuMajor > 0:
		return cuda.DefaultDTypeFor(gpuMajor).String()
	}
	return "fp32"
}

// newModel builds loaded's forward-only model (no gradients or moments) on be for batches of
// (B,T) in the --precision plan (with opts, e.g. gpt.LossOnly) and, with --int8, an int8 inference model (without the float
// matmul weights), saying on stderr how much its matmul weights take. The weights go straight
// from the checkpoint file into the model when loadFlags.open left them there; otherwise it
// drops loaded.Params, the host copy, once the model holds them, so that it can be freed (a
// second model needs the weights loaded again).
// When the model does not fit, the error's advice names shrink, the command's flags that
// would make it fit.
func (d *deviceFlags) newModel(loaded *train.Loaded, be backend.Backend, B, T int, shrink string, opts ...gpt.InferenceOption) (*gpt.Model, error) {
	advice := "use " + shrink + "a smaller model"
	if !d.int8 {
		advice += ", or --int8 (its matmul weights in a quarter of the bytes)"
		model, err := loaded.NewInferenceModel(be, B, T, d.modelPrecision(), opts...)
		if err == nil {
			loaded.Params = nil
		}
		return model, backend.WithAdvice(err, advice)
	}
	model, st, err := gpt.NewInferenceInt8(be, loaded.Config, B, T, d.modelPrecision(), loaded.ReadParams, opts...)
	if err != nil {
		return nil, backend.WithAdvice(err, advice)
	}
	loaded.Params = nil
	fmt.Fprintf(d.stderr, "int8 weights: %.1f MB (fp32: %.1f MB)\n", float64(st.Int8Bytes)/1e6, float64(st.FP32Bytes)/1e6)
	return model, nil
}

// lossOnly is the model option of an evaluation on be: gpt.LossOnly on the CPU (host memory),
// where the batch's logits would be most of the process (1.6 GB of GPT-2's at B=8 T=1024);
// none on a GPU, which has the room, and where 128-row LM heads would re-read wte per chunk.
func lossOnly(be backend.Backend) []gpt.InferenceOption {
	if _, host := be.(backend.HostMemory); host {
		return []gpt.InferenceOption{gpt.LossOnly}
	}
	return nil
}

// modelPrecision is the model's storage plan for the resolved --precision (after open).
func (d *deviceFlags) modelPrecision() gpt.Precision {
	return train.Config{Precision: d.precision}.ModelPrecision()
}

// openDevice opens the backend --device names.
func (d *deviceFlags) openDevice(stderr io.Writer) (backend.Backend, error) {
	switch {
	case d.device == "cpu":
		return d.cpu(stderr, ""), nil
	case d.device == "auto":
		visible, err := visibleGPUs()
		var drvErr *cuda.Error
		loaded := err == nil || errors.As(err, &drvErr) // the driver loaded; a call of it failed (cuInit: no device)
		if err == nil && visible == 0 {
			err = errors.New("the CUDA driver sees no GPU")
		}
		if err != nil && loaded && d.job.Distributed() {
			// A node with the driver whose rank sees no GPU (CUDA_VISIBLE_DEVICES per rank,
			// pointing past the node's GPUs or empty): the other ranks may have theirs.
			return nil, onRank(d.job, fmt.Errorf("--device auto: the CUDA driver loads but this rank sees no usable GPU (%v); a rank of a job does not fall back to the CPU alone: check CUDA_VISIBLE_DEVICES (%q here) and nvidia-smi on this node, or give every rank --device cpu",
				shortReason(err), os.Getenv("CUDA_VISIBLE_DEVICES")))
		}
		if err != nil { // no driver here (a CPU machine): every rank without one takes the CPU
			return d.cpu(stderr, " (no usable GPU: "+shortReason(err)+")"), nil
		}
		ordinal, err := gpuOrdinal(d.job, visible)
		if err != nil {
			return nil, err
		}
		be, err := d.cuda(ordinal)
		if err != nil && d.job.Distributed() {
			// The other ranks may have their GPUs: one rank alone on the CPU would fail later,
			// far from the cause (a communicator of another kind), or set the job's pace.
			return nil, onRank(d.job, fmt.Errorf("--device auto: GPU %d of the %d the driver sees: %v; a rank of a job does not fall back to the CPU alone: fix the GPU, or give every rank --device cpu",
				ordinal, visible, shortReason(err)))
		}
		if err != nil {
			return d.cpu(stderr, " (no usable GPU: "+shortReason(err)+")"), nil
		}
		fmt.Fprintf(stderr, "device: %s\n", be.Name())
		return be, nil
	case d.device == "cuda" || strings.HasPrefix(d.device, "cuda:"):
		var ordinal int
		if rest, ok := strings.CutPrefix(d.device, "cuda:"); ok {
			if _, err := fmt.Sscan(rest, &ordinal); err != nil || ordinal < 0 {
				return nil, fmt.Errorf("bad --device %q; use cuda or cuda:N with N >= 0", d.device)
			}
		} else if visible, err := visibleGPUs(); err == nil { // else d.cuda says what failed
			if ordinal, err = gpuOrdinal(d.job, visible); err != nil {
				return nil, err
			}
		}
		be, err := d.cuda(ordinal)
		if err != nil {
			return nil, onRank(d.job, fmt.Errorf("--device %s: %w; use --device cpu to run on the CPU", d.device, err))
		}
		fmt.Fprintf(stderr, "device: %s\n", be.Name())
		return be, nil
	default:
		return nil, fmt.Errorf("unknown --device %q; use auto, cpu, cuda or cuda:N", d.device)
	}
}

// gpuOrdinal is the GPU that rank job opens among the visible ones the driver sees: its local
// rank when there are more GPUs than that (one node's ranks share its GPUs), 0 when there is
// exactly one (srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per rank, binds each rank to
// its own GPU, which it sees as device 0). Otherwise the local ranks outnumber the GPUs: an error
// naming the rank, its local rank and the count.
func gpuOrdinal(job dist.Env, visible int) (int, error) {
	switch {
	case visible == 0:
		return 0, onRank(job, errors.New("the CUDA driver sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)"))
	case job.LocalRank < visible:
		return job.LocalRank, nil
	case visible == 1:
		return 0, nil
	}
	return 0, rankError{job.Rank, job.Size, fmt.Errorf("local rank %d on its node, but the driver sees %d GPUs (0..%d): start at most %d ranks per node, or bind one GPU to each rank (srun --gpus-per-task=1, or CUDA_VISIBLE_DEVICES per rank)",
		job.LocalRank, visible, visible-1, visible)}
}

func (d *deviceFlags) cpu(stderr io.Writer, why string) backend.Backend {
	be := cpu.New(d.threads)
	if d.verbose {
		be.SetVerbose(stderr)
	}
	fmt.Fprintf(stderr, "device: %s%s\n", be.Name(), why)
	return be
}

func (d *deviceFlags) cuda(ordinal int) (*cuda.Backend, error) {
	opts := cuda.Options{Device: ordinal, TF32: d.tf32, SyncEachOp: os.Getenv("GPT2GO_CUDA_SYNC") == "1",
		FMAAttention: os.Getenv("GPT2GO_ATTENTION") == "fma", NoMatmulTuning: os.Getenv("GPT2GO_MATMUL_TUNE") == "0",
		NoGeluFusion: os.Getenv("GPT2GO_GELU_FUSION") == "0"}
	if d.verbose {
		opts.Verbose = d.stderr
	}
	return newCUDA(opts)
}

// The GPU's entry points, which tests replace to play a machine with GPUs.
var (
	visibleGPUs = cuda.VisibleDevices
	newCUDA     = cuda.New
)

// shortReason keeps the first clause of a library error for the one-line "device:" note.
func shortReason(err error) string {
	var le *cuda.LibError
	if errors.As(err, &le) {
		return "cannot load " + le.What + " (--device cuda says more)"
	}
	return err.Error()
}
