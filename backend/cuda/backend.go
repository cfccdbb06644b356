package cuda

import (
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/gpt2go/gpt2go/backend"
)

// Options configure the backend.
type Options struct {
	Device int  // GPU ordinal
	TF32   bool // matmuls on TF32 tensor cores (fp32 storage, 10-bit mantissa products)
	// SyncEachOp waits after every op, so an asynchronous kernel fault names the op that caused
	// it (slow; for debugging, GPT2GO_CUDA_SYNC=1).
	SyncEachOp bool
	// FMAAttention runs bf16, fp16 and TF32 attention on the fp32-FMA tiled kernels instead of
	// tensor cores (GPT2GO_ATTENTION=fma): for comparisons, and a way around a suspected fault.
	FMAAttention bool
	// NoMatmulTuning takes cuBLASLt's heuristic's first algorithm for every matmul shape instead
	// of the fastest of its candidates, timed once and cached on disk (GPT2GO_MATMUL_TUNE=0;
	// see matmul_tune.go).
	NoMatmulTuning bool
	// NoGeluFusion runs GPT-2's MLP GELU as kernels of its own instead of in cuBLASLt's matmul
	// epilogues (GPT2GO_GELU_FUSION=0).
	NoGeluFusion bool
	// Verbose, when set, receives the memory plan (bytes per category) before allocation.
	Verbose io.Writer
}

// Backend runs the model's ops on one GPU. It queues everything on one stream and never waits
// for the GPU except in Download, SumSquares and Sync.
//
// Errors are sticky: the first failed call (an allocation, a launch, a copy) is kept, later ops
// are skipped, and Sync (which the trainer calls every step) returns it, naming the op.
type Backend struct {
	g       *Device
	blas    *Blas
	opts    Options
	kernels map[string]*Kernel
	err     error
	// captureErr is the first failure while a graph is recorded (graph.go).
	captureErr error
	// scratchGen counts the times ensure freed a scratch buffer to grow it: a graph recorded
	// before holds the old address and must not be launched (graph.go).
	scratchGen int

	naiveAttention bool // tests and benchmarks: the one-row-per-block kernels at every head size
	noAttentionMM  bool // tests and benchmarks: the two-lane kernels at head size 64
	noTensorCores  bool // tests and benchmarks (Options.FMAAttention): attention on the fp32-FMA tiled kernels

	events    []uintptr // fences' events, free for reuse (async.go)
	stage     staging   // page-locked memory uploads go through (staging.go)
	allocated int64     // bytes from Alloc, AllocDType and AllocInt32
	peak      float64   // measured matmul FLOP/s, see PeakFLOPS
	scratch   struct {
		partial uintptr // layernorm / column-sum partials
		partN   int64   // its size in floats
		delta   uintptr // attention backward's delta
		deltaN  int64
		sumsq   uintptr // sum-of-squares partials and result (doubles)
		blocks  uintptr // SumSquaresBlocks' and GradStats' per-block sums (doubles)
		blocksN int64
		int8q   uintptr // MatmulForwardInt8's quantized input rows
		int8qN  int64
		int8s   uintptr // and their scales
		int8sN  int64
		segs    struct { // AdamWAll's segment table
			host []backend.AdamWSegment
			dev  uintptr
			devN int64
		}
	}
}

// blasWorkspace is cuBLASLt's workspace; 32 MiB is what it asks for on Hopper.
const blasWorkspace = 32 << 20

// sumSquaresBlocks fixes the grid of the grad-norm reduction, which fixes its summation order.
const sumSquaresBlocks = 264

// New opens GPU opts.Device, compiles (or loads from the cache) every kernel for it and creates a
// cuBLASLt handle.
func New(opts Options) (*Backend, error) {
	g, err := OpenDevice(opts.Device)
	if err != nil {
		return nil, err
	}
	nv, err := LoadNVRTC()
	if err != nil {
		return nil, err
	}
	be := &Backend{g: g, opts: opts, kernels: map[string]*Kernel{}, noTensorCores: opts.FMAAttention}
	for _, f := range KernelFiles() {
		img, err := nv.CompileCached(f, g.Info.Arch())
		if err != nil {
			return nil, fmt.Errorf("%s on %s: %w", f, g.Info.Name, err)
		}
		mod, err := g.LoadModule(img)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", f, err)
		}
		for _, name := range kernelNames[f] {
			k, err := mod.Kernel(name)
			if err != nil {
				return nil, err
			}
			be.kernels[name] = k
		}
	}
	if be.blas, err = NewBlas(g, blasWorkspace, !opts.NoMatmulTuning, cacheDir()); err != nil {
		return nil, err
	}
	if be.scratch.sumsq, err = g.Alloc(8 * (sumSquaresBlocks + 1)); err != nil {
		return nil, err
	}
	return be, nil
}

// kernelNames lists the kernels each file defines (checked by a test against the compiled
// sources): each kernel of kernelTypes once per storage format (see formatSuffix and
// pairSuffix), the rest once.
var kernelNames = func() map[string][]string {
	names := map[string][]string{}
	for file, k := range kernelTypes {
		names[file] = append(names[file], k.single...)
		for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
			for _, base := range k.perFormat {
				names[file] = append(names[file], base+formatSuffix(dt))
			}
		}
		for _, p := range gradPairs {
			for _, base := range k.perPair {
				names[file] = append(names[file], base+pairSuffix(p[0], p[1]))
			}
		}
	}
	return names
}()

// kernelTypes names each file's kernels by how many storage variants they have: perFormat
// kernels exist for every format (X_VARIANTS in common.cuh), perPair ones for every pair of
// activation and gradient formats a model uses (XG_VARIANTS), single ones once.
var kernelTypes = map[string]struct{ perFormat, perPair, single []string }{
	"attention_mma.cu":    {perFormat: []string{"attention_forward_tc", "attention_backward_dq_tc", "attention_backward_dkv_tc"}},
	"attention.cu":        {perFormat: []string{"attention_forward", "attention_backward_delta", "attention_backward_dq", "attention_backward_dkv"}},
	"attention_cached.cu": {perFormat: []string{"attention_cache_append", "attention_forward_cached"}},
	"attention_tiled.cu": {perFormat: []string{"attention_forward_hs16", "attention_forward_hs32", "attention_forward_hs48", "attention_forward_hs64",
		"attention_backward_dq_hs16", "attention_backward_dq_hs32", "attention_backward_dq_hs48", "attention_backward_dq_hs64",
		"attention_backward_dkv_hs16", "attention_backward_dkv_hs32", "attention_backward_dkv_hs48", "attention_backward_dkv_hs64",
		"attention_forward_mm64", "attention_backward_dq_mm64", "attention_backward_dkv_mm64"}},
	"crossentropy.cu": {perFormat: []string{"crossentropy_forward", "crossentropy_backward", "crossentropy_fused", "match_targets"}},
	"elementwise.cu": {perFormat: []string{"gelu_forward", "gelu_backward", "gelu_erf_forward", "gelu_erf_backward", "residual_forward", "residual_backward", "adamw", "adamw_all",
		"sum_squares_partial", "sum_squares_blocks", "column_sum_partial", "column_sum_reduce", "broadcast_rows"},
		single: []string{"sum_squares_final", "grad_stats", "convert_bf16_fp32", "convert_fp16_fp32", "convert_fp32_bf16", "convert_fp32_fp16"}},
	"int8.cu":    {perFormat: []string{"quantize_rows_int8", "matmul_int8"}},
	"encoder.cu": {perFormat: []string{"encoder_forward"}, perPair: []string{"encoder_backward_wte", "encoder_backward_wte_index", "encoder_backward_wpe"}},
	"layernorm.cu": {perFormat: []string{"layernorm_forward", "layernorm_backward", "layernorm_backward_reduce", "residual_layernorm_forward"},
		single: []string{"layernorm_backward4"}},
}

// gradPairs are the (activation, parameter gradient) formats of XG_VARIANTS.
var gradPairs = [][2]backend.DType{
	{backend.F32, backend.F32}, {backend.BF16, backend.F32}, {backend.BF16, backend.BF16}, {backend.F16, backend.F32}, {backend.F16, backend.F16},
}

// formatSuffix is the kernel-name suffix of a storage format: none for fp32, _bf16, _fp16.
func formatSuffix(dt backend.DType) string {
	if dt.Is16() {
		return "_" + dt.String()
	}
	return ""
}

// pairSuffix is the suffix of a kernel over activations in x and gradients in g: none for fp32
// and fp32, else _x_g (_bf16_fp32).
func pairSuffix(x, g backend.DType) string {
	if x == backend.F32 && g == backend.F32 {
		return ""
	}
	return "_" + x.String() + "_" + g.String()
}

// Name says which GPU and matmul precision.
func (be *Backend) Name() string {
	prec := "fp32"
	if be.opts.TF32 {
		prec = "tf32"
	}
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %.0f GiB, %s matmuls)", be.g.Info.Ordinal, be.g.Info.Name,
		be.g.Info.Major, be.g.Info.Minor, float64(be.g.Info.TotalMem)/(1<<30), prec)
}

// Device returns the GPU the backend runs on.
func (be *Backend) Device() *Device { return be.g }

// Allocated returns the bytes allocated through Alloc and AllocInt32.
func (be *Backend) Allocated() int64 { return be.allocated }

// buf is device memory: n elements of dt at ptr (4 bytes each, 2 for bf16 and fp16).
type buf struct {
	ptr  uintptr
	n    int
	dt   backend.DType
	idx  *tokenIndex // int32 buffers: the encoder backward's token index of the last upload
	root *buf        // views: the allocation they are part of (nil for an allocation)
}

func (b *buf) Len() int { return b.n }

// DType is the buffer's storage format (backend.I32 for token buffers).
func (b *buf) DType() backend.DType { return b.dt }

// bytes is the size of n elements of b.
func (b *buf) bytes(n int) int64 { return int64(n) * int64(b.dt.Bytes()) }

// dropIndex forgets the token index of b's allocation, whose contents are being overwritten.
func (b *buf) dropIndex() {
	if b.root != nil {
		b = b.root
	}
	if b.idx != nil {
		b.idx.n = 0
	}
}

func ptrOf(b backend.Buf) uintptr {
	if b == nil {
		return 0
	}
	return b.(*buf).ptr
}

func (be *Backend) fail(err error) {
	if err == nil {
		return
	}
	if be.g != nil && be.g.capturing { // the recording fails, not the backend (graph.go)
		if be.captureErr == nil {
			be.captureErr = err
		}
		return
	}
	if be.err == nil {
		be.err = err
	}
}

func (be *Backend) alloc(n int, dt backend.DType) backend.Buf {
	b := &buf{n: n, dt: dt}
	if be.err != nil {
		return b
	}
	p, err := be.g.Alloc(b.bytes(max(n, 1)))
	if err != nil {
		be.fail(err)
		return b
	}
	b.ptr = p
	be.allocated += b.bytes(n)
	be.Zero(b)
	return b
}

// Alloc returns n zeroed float32s of device memory.
func (be *Backend) Alloc(n int) backend.Buf { return be.alloc(n, backend.F32) }

// AllocInt32 returns n zeroed int32s of device memory.
func (be *Backend) AllocInt32(n int) backend.Buf { return be.alloc(n, backend.I32) }

// View returns elements [off, off+n) of b.
func (be *Backend) View(b backend.Buf, off, n int) backend.Buf {
	src := b.(*buf)
	if off < 0 || n < 0 || off+n > src.n {
		panic(fmt.Sprintf("cuda: view [%d,%d) of a %d-element buffer", off, off+n, src.n))
	}
	root := src
	if src.root != nil {
		root = src.root
	}
	return &buf{ptr: src.ptr + uintptr(src.bytes(off)), n: n, dt: src.dt, root: root}
}

// Words is b's bytes as float32 words (backend.WordViewer), for all-gathers of a 16-bit buffer
// over NCCL as fp32; a 16-bit b must have an even length.
func (be *Backend) Words(b backend.Buf) backend.Buf {
	src := b.(*buf)
	size := src.bytes(src.n)
	if src.dt == backend.I32 || size%4 != 0 {
		panic(fmt.Sprintf("cuda: Words of a %d-element %v buffer", src.n, src.dt))
	}
	root := src
	if src.root != nil {
		root = src.root
	}
	return &buf{ptr: src.ptr, n: int(size / 4), dt: backend.F32, root: root}
}

var _ backend.WordViewer = (*Backend)(nil)

// Upload copies src into dst[:len(src)], rounded to nearest even to dst's format (on the host).
func (be *Backend) Upload(dst backend.Buf, src []float32) {
	if be.err != nil || len(src) == 0 {
		return
	}
	if len(src) > dst.Len() { // the CPU's slices would panic; a device copy would run past dst
		be.fail(fmt.Errorf("Upload: %d elements into a buffer of %d", len(src), dst.Len()))
		return
	}
	if dt := dst.DType(); dt.Is16() {
		bits := pack16(dt, src)
		be.htod(ptrOf(dst), unsafe.Pointer(&bits[0]), int64(len(bits))*2)
		return
	}
	be.htod(ptrOf(dst), unsafe.Pointer(&src[0]), int64(len(src))*4)
}

// UploadInt32 copies src into dst[:len(src)]. Into an allocation, or a view at its start (the
// model's batch-sized views of its token buffers), token ids in [0, 1<<20) also get an index of
// the allocation's first len(src) tokens that lets EncoderBackward add each token's gradient rows
// in parallel and in a fixed order (see tokenIndex): built here on the host, where the tokens are,
// so the step needs no sync for it. An upload into any other view drops its allocation's index.
func (be *Backend) UploadInt32(dst backend.Buf, src []int32) {
	if be.err != nil || len(src) == 0 {
		return
	}
	if len(src) > dst.Len() {
		be.fail(fmt.Errorf("UploadInt32: %d elements into a buffer of %d", len(src), dst.Len()))
		return
	}
	be.htod(ptrOf(dst), unsafe.Pointer(&src[0]), int64(len(src))*4)
	b := dst.(*buf)
	if b.root != nil && b.ptr != b.root.ptr { // a view inside: the allocation's index no longer matches its tokens
		b.dropIndex()
		return
	}
	if b.root != nil {
		b = b.root
	}
	if b.idx == nil {
		b.idx = &tokenIndex{}
	}
	if !b.idx.build(src) {
		return
	}
	be.ensure(&b.idx.dev, &b.idx.devN, int64(3*b.n+2), 4) // room for any upload into b
	be.htod(b.idx.dev, unsafe.Pointer(&b.idx.host[0]), int64(len(b.idx.host))*4)
}

// Download copies src[:len(dst)] into dst, waiting for the GPU. After a failure it fills dst
// with NaN, which the trainer stops on; Sync then says what failed.
func (be *Backend) Download(dst []float32, src backend.Buf) {
	if be.err == nil && len(dst) > src.Len() {
		be.fail(fmt.Errorf("Download: %d elements from a buffer of %d", len(dst), src.Len()))
	}
	if be.err == nil && len(dst) > 0 {
		if dt := src.DType(); dt.Is16() {
			bits := make([]uint16, len(dst))
			be.fail(be.g.DtoH(unsafe.Pointer(&bits[0]), ptrOf(src), int64(len(bits))*2))
			unpack16(dt, dst, bits)
		} else {
			be.fail(be.g.DtoH(unsafe.Pointer(&dst[0]), ptrOf(src), int64(len(dst))*4))
		}
	}
	if be.err != nil {
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
	}
}

// Zero sets every element of b to 0.
func (be *Backend) Zero(b backend.Buf) {
	if be.err == nil {
		bb := b.(*buf)
		bb.dropIndex()
		if bb.dt.Is16() {
			be.fail(be.g.Memset16(bb.ptr, 0, int64(bb.n)))
		} else {
			be.fail(be.g.Memset32(bb.ptr, 0, int64(bb.n)))
		}
	}
}

// Sync waits for the GPU and returns the first error since the backend was made.
func (be *Backend) Sync() error {
	if be.err == nil {
		be.fail(be.g.Sync())
	}
	if be.err != nil {
		return fmt.Errorf("cuda: %w", be.err)
	}
	return nil
}

// launch runs kernel name with the arguments set by args, on grid blocks of block threads.
func (be *Backend) launch(op, name string, grid, block, shared int, args func(k *Kernel)) {
	if be.err != nil {
		return
	}
	k := be.kernels[name]
	if k == nil { // a combination of formats no kernel was written for
		be.fail(fmt.Errorf("%s: no kernel %s for these buffers' formats", op, name))
		return
	}
	args(k.Args())
	if err := k.Launch(grid, block, shared); err != nil {
		be.fail(fmt.Errorf("%s: %w", op, err))
		return
	}
	if be.opts.SyncEachOp {
		if err := be.g.Sync(); err != nil {
			be.fail(fmt.Errorf("%s (kernel %s): %w", op, name, err))
		}
	}
}

// ensure grows a scratch buffer to at least n elements of size bytes each.
func (be *Backend) ensure(p *uintptr, have *int64, n int64, size int64) uintptr {
	if be.err != nil || *have >= n {
		return *p
	}
	if *p != 0 {
		be.fail(be.g.Sync())
		be.fail(be.g.Free(*p))
		be.scratchGen++
	}
	np, err := be.g.Alloc(n * size)
	if err != nil {
		be.fail(err)
		return 0
	}
	*p, *have = np, n
	return np
}

var _ backend.Backend = (*Backend)(nil)
var _ backend.Peaker = (*Backend)(nil)

// HostCalls implements backend.CallCounter.
func (be *Backend) HostCalls() backend.HostCalls { return be.g.HostCalls() }

var _ backend.CallCounter = (*Backend)(nil)
