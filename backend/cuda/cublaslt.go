package cuda

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpt2go/gpt2go/backend"
)

// cuBLASLt constants (cublasLt.h, library_types.h).
const (
	cudaR32F            = 0                              // CUDA_R_32F
	cudaR16F            = 2                              // CUDA_R_16F
	cudaR16BF           = 14                             // CUDA_R_16BF
	computeF32          = 68                             // CUBLAS_COMPUTE_32F
	computeF32FastTF32  = 77                             // CUBLAS_COMPUTE_32F_FAST_TF32
	descTransA          = 3                              // CUBLASLT_MATMUL_DESC_TRANSA
	descTransB          = 4                              // CUBLASLT_MATMUL_DESC_TRANSB
	descEpilogue        = 7                              // CUBLASLT_MATMUL_DESC_EPILOGUE
	descBiasPointer     = 8                              // CUBLASLT_MATMUL_DESC_BIAS_POINTER
	descAuxPointer      = 11                             // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER
	descAuxLD           = 12                             // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD
	epilogueDefault     = 1                              // CUBLASLT_EPILOGUE_DEFAULT
	epilogueBias        = 4                              // CUBLASLT_EPILOGUE_BIAS
	epilogueGeluAux     = 32 | 128                       // CUBLASLT_EPILOGUE_GELU_AUX: D = gelu(AB), aux = AB
	epilogueGeluAuxBias = epilogueGeluAux | epilogueBias // CUBLASLT_EPILOGUE_GELU_AUX_BIAS
	epilogueDGelu       = 64 | 128                       // CUBLASLT_EPILOGUE_DGELU: D = AB * gelu'(aux)
	opN                 = 0                              // CUBLAS_OP_N
	opT                 = 1                              // CUBLAS_OP_T
	prefMaxWorkspace    = 1                              // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
	prefMinAlignA       = 5                              // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES (B, C, D follow: 6, 7, 8)
	heuristicResultSize = 96                             // sizeof(cublasLtMatmulHeuristicResult_t): algo (64 bytes), workspaceSize (size_t), state, wavesCount, reserved[4]
	heuristicWorkspace  = 64                             // offset of workspaceSize in it
	heuristicState      = 72                             // offset of state (cublasStatus_t) in it
	cublasNotSupported  = 15                             // CUBLAS_STATUS_NOT_SUPPORTED
)

// CublasLt is the cuBLASLt library, loaded with purego.
type CublasLt struct {
	Path string

	create, getVersion, descCreate, descSetAttr, layoutCreate, prefCreate, prefSetAttr, algoHeuristic, algoCheck, matmul uintptr
}

var (
	cublasLtOnce sync.Once
	cublasLtLib  *CublasLt
	cublasLtErr  error
)

// LoadCublasLt opens cuBLASLt once per process.
func LoadCublasLt() (*CublasLt, error) {
	cublasLtOnce.Do(func() {
		h, path, err := libCublasLt.open()
		if err != nil {
			cublasLtErr = err
			return
		}
		c := &CublasLt{Path: path}
		cublasLtErr = symbols(libCublasLt, h, map[string]*uintptr{
			"cublasLtCreate":                       &c.create,
			"cublasLtGetVersion":                   &c.getVersion,
			"cublasLtMatmulDescCreate":             &c.descCreate,
			"cublasLtMatmulDescSetAttribute":       &c.descSetAttr,
			"cublasLtMatrixLayoutCreate":           &c.layoutCreate,
			"cublasLtMatmulPreferenceCreate":       &c.prefCreate,
			"cublasLtMatmulPreferenceSetAttribute": &c.prefSetAttr,
			"cublasLtMatmulAlgoGetHeuristic":       &c.algoHeuristic,
			"cublasLtMatmulAlgoCheck":              &c.algoCheck,
			"cublasLtMatmul":                       &c.matmul,
		})
		if cublasLtErr == nil {
			cublasLtLib = c
		}
	})
	return cublasLtLib, cublasLtErr
}

// Version returns cuBLASLt's version number, e.g. 130101.
func (c *CublasLt) Version() int {
	v, _, _ := purego.SyscallN(c.getVersion)
	return int(v)
}

// cublasStatus names the cublasStatus_t values.
var cublasStatus = map[uintptr]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func checkCublas(call string, code uintptr) error {
	if code == 0 {
		return nil
	}
	name, ok := cublasStatus[code]
	if !ok {
		name = fmt.Sprintf("cublasStatus %d", code)
	}
	return fmt.Errorf("%s failed: %s", call, name)
}

// Gemm describes one column-major product D = alpha*op(A)@op(B) + beta*D (+ bias per row of D),
// with op(A) (m,k), op(B) (k,n), D (m,n) and leading dimensions lda, ldb, ldd.
//
// A and B are stored in format AB, D (and C, which is D) in format D; the zero values are fp32.
// Products always accumulate in fp32 (CUBLAS_COMPUTE_32F, fp32 alpha and beta): cuBLASLt's
// supported combinations include A/B bf16 or fp16 with C/D of the same format or fp32, so a
// 16-bit forward writes 16-bit outputs and a weight gradient accumulates (beta 1) into fp32.
// The bias has D's format (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE's default). TF32 applies only
// to fp32 A and B.
type Gemm struct {
	TransA, TransB bool
	M, N, K        int
	LDA, LDB, LDD  int
	Bias           bool // add a bias vector of length m to every column of D
	TF32           bool
	AB, D          backend.DType
	// Gelu fuses GPT-2's GELU (tanh form) into the product through an epilogue on an auxiliary
	// matrix of D's shape and format with leading dimension AuxLD (a multiple of 8): GeluForward
	// writes the product (+ bias) to aux and its GELU to D; GeluBackward multiplies the product
	// by GELU's derivative at aux, which it reads.
	Gelu  GeluEpilogue
	AuxLD int
}

// GeluEpilogue selects Gemm's GELU epilogue.
type GeluEpilogue int

const (
	NoGelu GeluEpilogue = iota
	GeluForward
	GeluBackward
)

// errNoAlgorithm says cuBLASLt has no algorithm for a product: for a fused epilogue, the op runs
// unfused instead.
var errNoAlgorithm = errors.New("cuBLASLt has no algorithm")

// cudaDataType is the cudaDataType_t of a storage format.
func cudaDataType(dt backend.DType) uintptr {
	switch dt {
	case backend.BF16:
		return cudaR16BF
	case backend.F16:
		return cudaR16F
	}
	return cudaR32F
}

// matmulPlan is what cuBLASLt needs for one Gemm shape, created once and reused.
type matmulPlan struct {
	desc, a, b, d uintptr
	heuristic     [heuristicResultSize]byte // the chosen algorithm
	alpha, beta   float32
	bias, aux     uintptr // the bias and aux pointers last set on desc
}

// Blas runs matrix products on one device through cuBLASLt.
type Blas struct {
	lib       *CublasLt
	g         *Device
	handle    uintptr
	workspace uintptr
	wsBytes   int64
	plans     map[planKey]*matmulPlan
	missing   map[planKey]bool // products with no algorithm (errNoAlgorithm)
	tune      bool             // pick algorithms by timing (matmul_tune.go)
	cache     *algoCache       // tuned choices, shared with later runs
	events    eventPair
	tuned     map[string]TunedShape
	// noEpilogues refuses every product with a bias or GELU epilogue as if cuBLASLt had no
	// algorithm for it, so tests can run the fallbacks a GPU may need for some alignments.
	noEpilogues bool
}

// planKey is a Gemm with the alignments of its pointers: cuBLASLt's heuristic assumes 256-byte
// aligned A, B, C, D unless told otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES) and reads
// the bias pointer's value for its alignment, and views into the flat parameter and activation
// buffers are often less aligned (any C that is not a multiple of 64), so an algorithm picked
// for 256 bytes may fail or fault on them. Each alignment gets its own plan.
type planKey struct {
	Gemm
	alignA, alignB, alignD, alignBias, alignAux uint32
}

// alignOf returns the largest power of two up to 256 that divides p (256 for a null pointer).
func alignOf(p uintptr) uint32 {
	a := uint32(256)
	for a > 1 && p%uintptr(a) != 0 {
		a /= 2
	}
	return a
}

// NewBlas creates a cuBLASLt handle and a workspace of wsBytes on g. With tune, each new shape's
// algorithm is the fastest of the heuristic's candidates, timed once and kept in the cache in
// cacheDir ("" for none) for later runs (matmul_tune.go); without, the heuristic's first.
func NewBlas(g *Device, wsBytes int64, tune bool, cacheDir string) (*Blas, error) {
	lib, err := LoadCublasLt()
	if err != nil {
		return nil, err
	}
	b := &Blas{lib: lib, g: g, wsBytes: wsBytes, plans: map[planKey]*matmulPlan{}, missing: map[planKey]bool{}, tune: tune, tuned: map[string]TunedShape{}}
	defer g.bind()()
	if err := checkCublas("cublasLtCreate", first(purego.SyscallN(lib.create, uintptr(unsafe.Pointer(&b.handle))))); err != nil {
		return nil, err
	}
	if b.workspace, err = g.Alloc(wsBytes); err != nil {
		return nil, err
	}
	if tune {
		if b.events, err = g.newEventPair(); err != nil {
			return nil, err
		}
		b.cache = openAlgoCache(cacheDir, algoCacheHeader{Version: algoCacheVersion, Device: g.Info.Name, Arch: g.Info.Arch(),
			CublasLt: lib.Version(), Workspace: wsBytes})
	}
	return b, nil
}

// operands are the device pointers of one Matmul call.
type operands struct {
	a, b, d, bias, aux uintptr
	accumulate         bool
}

func (b *Blas) plan(key planKey, op operands) (*matmulPlan, error) {
	if p := b.plans[key]; p != nil {
		return p, nil
	}
	s := key.Gemm
	lib := b.lib
	p := &matmulPlan{}
	compute := uintptr(computeF32)
	if s.TF32 && s.AB == backend.F32 {
		compute = computeF32FastTF32
	}
	if err := checkCublas("cublasLtMatmulDescCreate", first(purego.SyscallN(lib.descCreate, uintptr(unsafe.Pointer(&p.desc)), compute, cudaR32F))); err != nil {
		return nil, err
	}
	setAttr := func(attr uintptr, v int32) error {
		return checkCublas("cublasLtMatmulDescSetAttribute", first(purego.SyscallN(lib.descSetAttr, p.desc, attr, uintptr(unsafe.Pointer(&v)), 4)))
	}
	trans := func(t bool) int32 {
		if t {
			return opT
		}
		return opN
	}
	epilogue := int32(epilogueDefault)
	switch {
	case s.Gelu == GeluForward && s.Bias:
		epilogue = epilogueGeluAuxBias
	case s.Gelu == GeluForward:
		epilogue = epilogueGeluAux
	case s.Gelu == GeluBackward:
		epilogue = epilogueDGelu
	case s.Bias:
		epilogue = epilogueBias
	}
	for _, a := range []struct {
		attr uintptr
		v    int32
	}{{descTransA, trans(s.TransA)}, {descTransB, trans(s.TransB)}, {descEpilogue, epilogue}} {
		if err := setAttr(a.attr, a.v); err != nil {
			return nil, err
		}
	}
	layout := func(dst *uintptr, dt backend.DType, rows, cols, ld int) error {
		return checkCublas("cublasLtMatrixLayoutCreate", first(purego.SyscallN(lib.layoutCreate, uintptr(unsafe.Pointer(dst)), cudaDataType(dt), uintptr(rows), uintptr(cols), uintptr(ld))))
	}
	// Stored shapes: A is (m,k) or, transposed, (k,m); likewise B.
	ar, ac := s.M, s.K
	if s.TransA {
		ar, ac = s.K, s.M
	}
	br, bc := s.K, s.N
	if s.TransB {
		br, bc = s.N, s.K
	}
	if s.Bias { // before the heuristic, which reads the pointer's alignment
		if err := p.setBias(lib, op.bias); err != nil {
			return nil, err
		}
	}
	if s.Gelu != NoGelu {
		if s.Bias && s.Gelu == GeluBackward {
			return nil, fmt.Errorf("cuBLASLt: a bias with the GELU backward epilogue")
		}
		ld := int64(s.AuxLD)
		if err := checkCublas("cublasLtMatmulDescSetAttribute(aux ld)", first(purego.SyscallN(lib.descSetAttr, p.desc, descAuxLD, uintptr(unsafe.Pointer(&ld)), 8))); err != nil {
			return nil, err
		}
		if err := p.setAux(lib, op.aux); err != nil {
			return nil, err
		}
	}
	if err := layout(&p.a, s.AB, ar, ac, s.LDA); err != nil {
		return nil, err
	}
	if err := layout(&p.b, s.AB, br, bc, s.LDB); err != nil {
		return nil, err
	}
	if err := layout(&p.d, s.D, s.M, s.N, s.LDD); err != nil {
		return nil, err
	}
	if err := b.chooseAlgo(key, p, op); err != nil {
		return nil, err
	}
	b.plans[key] = p
	return p, nil
}

// setAux points the plan's descriptor at the epilogue's auxiliary matrix.
func (p *matmulPlan) setAux(lib *CublasLt, aux uintptr) error {
	v := aux
	if err := checkCublas("cublasLtMatmulDescSetAttribute(aux)", first(purego.SyscallN(lib.descSetAttr, p.desc, descAuxPointer, uintptr(unsafe.Pointer(&v)), 8))); err != nil {
		return err
	}
	p.aux = aux
	return nil
}

// setBias points the plan's descriptor at bias.
func (p *matmulPlan) setBias(lib *CublasLt, bias uintptr) error {
	v := bias
	if err := checkCublas("cublasLtMatmulDescSetAttribute(bias)", first(purego.SyscallN(lib.descSetAttr, p.desc, descBiasPointer, uintptr(unsafe.Pointer(&v)), 8))); err != nil {
		return err
	}
	p.bias = bias
	return nil
}

// chooseAlgo fills p.heuristic: the cached choice for key if cuBLASLt still accepts it, else
// the heuristic's first candidate, or with tuning the fastest of its candidates on op's operands
// (which are left as they were), then cached.
func (b *Blas) chooseAlgo(key planKey, p *matmulPlan, op operands) error {
	lib, name := b.lib, key.String()
	if b.tune {
		if ch, ok := b.cache.get(name); ok {
			algo, _ := ch.algo()
			var check [heuristicResultSize]byte // the workspace the algorithm needs here, among others
			r, _, _ := purego.SyscallN(lib.algoCheck, b.handle, p.desc, p.a, p.b, p.d, p.d,
				uintptr(unsafe.Pointer(&algo[0])), uintptr(unsafe.Pointer(&check[0])))
			if r == 0 && *(*uint64)(unsafe.Pointer(&check[heuristicWorkspace])) <= uint64(b.wsBytes) {
				copy(p.heuristic[:algoBytes], algo[:])
				b.tuned[name] = TunedShape{Candidates: ch.Candidates, Index: ch.Index, Micros: ch.Micros, FirstMicro: ch.FirstMicro, Cached: true}
				return nil
			}
			b.cache.drop(name) // another library build than the cache was written with: time again
		}
	}
	var pref uintptr
	if err := checkCublas("cublasLtMatmulPreferenceCreate", first(purego.SyscallN(lib.prefCreate, uintptr(unsafe.Pointer(&pref))))); err != nil {
		return err
	}
	ws := uint64(b.wsBytes)
	if err := checkCublas("cublasLtMatmulPreferenceSetAttribute", first(purego.SyscallN(lib.prefSetAttr, pref, prefMaxWorkspace, uintptr(unsafe.Pointer(&ws)), 8))); err != nil {
		return err
	}
	for i, align := range []uint32{key.alignA, key.alignB, key.alignD, key.alignD} { // C is D
		v := align
		if err := checkCublas("cublasLtMatmulPreferenceSetAttribute(alignment)", first(purego.SyscallN(lib.prefSetAttr, pref, prefMinAlignA+uintptr(i), uintptr(unsafe.Pointer(&v)), 4))); err != nil {
			return err
		}
	}
	want := 1
	if b.tune {
		want = tuneCandidates
	}
	results := make([]byte, want*heuristicResultSize)
	var found int32
	r, _, _ := purego.SyscallN(lib.algoHeuristic, b.handle, p.desc, p.a, p.b, p.d, p.d, pref, uintptr(want),
		uintptr(unsafe.Pointer(&results[0])), uintptr(unsafe.Pointer(&found)))
	if r == cublasNotSupported { // how the heuristic says it has nothing for this configuration
		return fmt.Errorf("%w for %+v (CUBLAS_STATUS_NOT_SUPPORTED)", errNoAlgorithm, key.Gemm)
	}
	if err := checkCublas("cublasLtMatmulAlgoGetHeuristic", r); err != nil {
		return err
	}
	found = int32(usableCandidates(results, int(found)))
	if found == 0 {
		return fmt.Errorf("%w for %+v", errNoAlgorithm, key.Gemm)
	}
	candidate := func(i int) []byte { return results[i*heuristicResultSize : (i+1)*heuristicResultSize] }
	if !b.tune || found == 1 {
		copy(p.heuristic[:], candidate(0))
		return nil
	}
	times, err := b.timeCandidates(key, p, op, int(found), candidate)
	if err != nil {
		return err
	}
	best := fastest(times)
	if best < 0 {
		// Every candidate was refused at launch: as good as none listed, so that callers with a
		// fallback (an unfused bias or GELU) take it, as they do without tuning.
		return fmt.Errorf("%w that runs for %+v: none of the %d the heuristic listed launched", errNoAlgorithm, key.Gemm, found)
	}
	copy(p.heuristic[:], candidate(best))
	ch := b.cache.put(name, algoChoice{Algo: hex.EncodeToString(p.heuristic[:algoBytes]), Index: best, Candidates: int(found),
		Micros: 1000 * times[best], FirstMicro: 1000 * times[0]})
	algo, _ := ch.algo() // another process's choice, if it wrote one first
	copy(p.heuristic[:algoBytes], algo[:])
	b.tuned[name] = TunedShape{Candidates: ch.Candidates, Index: ch.Index, Micros: ch.Micros, FirstMicro: ch.FirstMicro}
	return nil
}

// usableCandidates moves the first n heuristic results whose state is CUBLAS_STATUS_SUCCESS
// (the documented condition for the rest of a result to be valid) to the front of results, in
// order, and returns how many there are.
func usableCandidates(results []byte, n int) int {
	kept := 0
	for i := range n {
		r := results[i*heuristicResultSize : (i+1)*heuristicResultSize]
		if *(*int32)(unsafe.Pointer(&r[heuristicState])) != 0 {
			continue
		}
		if kept != i {
			copy(results[kept*heuristicResultSize:], r)
		}
		kept++
	}
	return kept
}

// timeCandidates returns the fastest of tuneReps runs of each candidate algorithm in ms (NaN for
// one that fails), on op's operands. Runs that accumulate into D change it, so D is saved first
// and put back after; a product that overwrites D is about to be run for real anyway.
func (b *Blas) timeCandidates(key planKey, p *matmulPlan, op operands, n int, candidate func(int) []byte) ([]float64, error) {
	var saved uintptr
	dBytes := (int64(key.LDD)*int64(key.N-1) + int64(key.M)) * int64(key.D.Bytes()) // D's extent, column-major
	if op.accumulate {
		var err error
		if saved, err = b.g.Alloc(dBytes); err != nil {
			return nil, fmt.Errorf("timing cuBLASLt algorithms for %+v: %w", key.Gemm, err)
		}
		defer b.g.Free(saved)
		if err := b.g.DtoD(saved, op.d, dBytes); err != nil {
			return nil, err
		}
	}
	times := make([]float64, n)
	for i := range n {
		algo := candidate(i)
		run := func() error { return b.launch(key.Gemm, p, op, algo) }
		times[i] = math.NaN()
		if run() != nil { // a candidate the library lists but cannot launch here
			continue
		}
		for range tuneReps {
			ms, err := b.g.time(b.events, run)
			if err != nil {
				times[i] = math.NaN()
				break
			}
			if math.IsNaN(times[i]) || ms < times[i] {
				times[i] = ms
			}
		}
	}
	if op.accumulate {
		if err := b.g.DtoD(op.d, saved, dBytes); err != nil {
			return nil, err
		}
	}
	// Surface a fault of a candidate now, not at the next op.
	return times, b.g.Sync()
}

// Matmul queues D = op(A)@op(B) (+ bias), accumulating into D when accumulate is set.
func (b *Blas) Matmul(s Gemm, a, bm, d, bias uintptr, accumulate bool) error {
	return b.MatmulAux(s, a, bm, d, bias, 0, accumulate)
}

// MatmulAux is Matmul with s.Gelu's epilogue on the auxiliary matrix aux. A product cuBLASLt has
// no algorithm for returns an error wrapping errNoAlgorithm, at once on later calls.
func (b *Blas) MatmulAux(s Gemm, a, bm, d, bias, aux uintptr, accumulate bool) error {
	defer b.g.bind()() // the plan's heuristic query also needs the device's context current
	if !s.Bias {
		bias = 0
	}
	if s.Gelu == NoGelu {
		aux = 0
	}
	key := planKey{Gemm: s, alignA: alignOf(a), alignB: alignOf(bm), alignD: alignOf(d), alignBias: alignOf(bias), alignAux: alignOf(aux)}
	if b.missing[key] {
		return fmt.Errorf("%w for %+v", errNoAlgorithm, s)
	}
	if b.noEpilogues && (s.Bias || s.Gelu != NoGelu) {
		return fmt.Errorf("%w for %+v (epilogues turned off for a test)", errNoAlgorithm, s)
	}
	p, err := b.plan(key, operands{a: a, b: bm, d: d, bias: bias, aux: aux, accumulate: accumulate})
	if errors.Is(err, errNoAlgorithm) {
		b.missing[key] = true
	}
	if err != nil {
		return err
	}
	if s.Bias && p.bias != bias {
		if err := p.setBias(b.lib, bias); err != nil {
			return err
		}
	}
	if s.Gelu != NoGelu && p.aux != aux {
		if err := p.setAux(b.lib, aux); err != nil {
			return err
		}
	}
	err = b.launch(s, p, operands{a: a, b: bm, d: d, accumulate: accumulate}, p.heuristic[:algoBytes])
	if errors.Is(err, errNoAlgorithm) { // nothing was queued: callers with a fallback can take it
		b.missing[key] = true
	}
	return err
}

// launch queues one cublasLtMatmul of plan p for s on op's operands with algorithm algo (C is D;
// beta 1 when op accumulates).
func (b *Blas) launch(s Gemm, p *matmulPlan, op operands, algo []byte) error {
	p.alpha, p.beta = 1, 0
	if op.accumulate {
		p.beta = 1
	}
	defer b.g.launched(time.Now())
	r, _, _ := purego.SyscallN(b.lib.matmul, b.handle, p.desc, uintptr(unsafe.Pointer(&p.alpha)), op.a, p.a, op.b, p.b,
		uintptr(unsafe.Pointer(&p.beta)), op.d, p.d, op.d, p.d, uintptr(unsafe.Pointer(&algo[0])), b.workspace, uintptr(b.wsBytes), b.g.stream)
	if r == cublasNotSupported { // "the current implementation on this device does not support the operation"
		return fmt.Errorf("%w for %+v (cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED)", errNoAlgorithm, s)
	}
	return checkCublas(fmt.Sprintf("cublasLtMatmul(m=%d n=%d k=%d)", s.M, s.N, s.K), r)
}
