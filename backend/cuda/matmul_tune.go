package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"

	"github.com/gpt2go/gpt2go/internal/atomicfile"
)

// Picking cuBLASLt algorithms by timing.
//
// cuBLASLt's heuristic ranks the algorithms for a shape by a model of the GPU, and its first
// choice is often not the fastest: on an H100 the backward matmuls of GPT-2 ran at about half of
// the forward's rate. So for each new shape the backend asks for up to tuneCandidates
// algorithms, times each on the real operands and keeps the fastest.
//
// Timings are noisy, and two algorithms of one shape round differently (another tile or split
// of k sums in another order), so a choice made by timing alone would make two runs of the same
// command differ in their last bits. Every choice is therefore written to an on-disk cache, kept
// per GPU model and cuBLASLt version (NVIDIA documents cublasLtMatmulAlgo_t as safe to store and
// reuse with the same library version), and a shape found there is never timed again: a resumed
// run, or a second run on the same machine, uses the same algorithms and gets the same bits.
// GPT2GO_MATMUL_TUNE=0 (Options.NoMatmulTuning) takes the heuristic's first choice instead,
// which needs no cache to repeat.

const (
	tuneCandidates = 8 // algorithms asked of the heuristic and timed
	tuneReps       = 3 // timed runs per candidate, after one warm-up; the fastest counts
	algoBytes      = 64
)

// algoCacheVersion changes when the file's meaning does.
const algoCacheVersion = 1

// algoCacheHeader says which GPU and library a cache file's algorithms are for: a file whose
// header differs from the running one is not used.
type algoCacheHeader struct {
	Version   int    `json:"version"`
	Device    string `json:"device"`
	Arch      string `json:"arch"`
	CublasLt  int    `json:"cublaslt"`
	Workspace int64  `json:"workspace_bytes"`
}

// algoChoice is one tuned shape: the chosen algorithm and what the timing saw.
type algoChoice struct {
	Algo       string  `json:"algo"`       // the 64 bytes of cublasLtMatmulAlgo_t, hex
	Index      int     `json:"index"`      // its rank in the heuristic's list (0 = the heuristic's choice)
	Candidates int     `json:"candidates"` // algorithms timed
	Micros     float64 `json:"us"`         // the chosen algorithm's time, µs
	FirstMicro float64 `json:"first_us"`   // the heuristic's first choice's time, µs (-1: it did not run)
}

// algo decodes Algo, ok false when it is not 64 bytes of hex.
func (c algoChoice) algo() (a [algoBytes]byte, ok bool) {
	b, err := hex.DecodeString(c.Algo)
	if err != nil || len(b) != algoBytes {
		return a, false
	}
	copy(a[:], b)
	return a, true
}

type algoCacheFile struct {
	algoCacheHeader
	Shapes map[string]algoChoice `json:"shapes"`
}

// algoCache is the process's view of one cache file; every Blas of the process with the same
// header shares it (openAlgoCache), so two backends in one process agree even without a file.
// The file keeps the first choice any process wrote for a shape, and a process that timed a
// shape another had just written takes the file's choice (put).
type algoCache struct {
	mu       sync.Mutex
	path     string // "" when there is no cache directory: choices then last for the process
	header   algoCacheHeader
	choices  map[string]algoChoice
	rejected map[string]string // per key, the stored algorithm the library refused (drop)
	unlocked bool              // the file's lock could not be had once: later puts do not wait
}

// algoCachePath is the cache file for header in dir: one per GPU model, library version and
// workspace size, beside the compiled kernels.
func algoCachePath(dir string, h algoCacheHeader) string {
	if dir == "" {
		return ""
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%d\n%s\n%s\n%d\n%d", h.Version, h.Device, h.Arch, h.CublasLt, h.Workspace))
	return filepath.Join(dir, fmt.Sprintf("cublaslt-%s-%d-%s.json", h.Arch, h.CublasLt, hex.EncodeToString(sum[:6])))
}

// readAlgoCache returns the valid choices of the file at path for header h; a missing,
// unreadable or foreign file, and entries that do not decode, give nothing (it is a cache:
// those shapes are timed again and the file rewritten).
func readAlgoCache(path string, h algoCacheHeader) map[string]algoChoice {
	out := map[string]algoChoice{}
	if path == "" {
		return out
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	var f algoCacheFile
	if json.Unmarshal(data, &f) != nil || f.algoCacheHeader != h {
		return out
	}
	for k, c := range f.Shapes {
		if _, ok := c.algo(); ok && c.Index >= 0 {
			out[k] = c
		}
	}
	return out
}

var algoCaches = struct {
	sync.Mutex
	m map[string]*algoCache
}{m: map[string]*algoCache{}}

// openAlgoCache returns the process's cache for header h in dir ("" for none), reading the file
// the first time.
func openAlgoCache(dir string, h algoCacheHeader) *algoCache {
	path := algoCachePath(dir, h)
	id := fmt.Sprintf("%s\x00%+v", path, h)
	algoCaches.Lock()
	defer algoCaches.Unlock()
	c := algoCaches.m[id]
	if c == nil {
		c = newAlgoCache(path, h)
		algoCaches.m[id] = c
	}
	return c
}

// newAlgoCache is the cache of the file at path ("" for none) for header h, read now.
func newAlgoCache(path string, h algoCacheHeader) *algoCache {
	return &algoCache{path: path, header: h, choices: readAlgoCache(path, h), rejected: map[string]string{}}
}

// get returns the choice for key.
func (c *algoCache) get(key string) (algoChoice, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.choices[key]
	return ch, ok
}

// put records the choice for key and saves the file: the file's current shapes (another process
// may have added some) and this process's. Where the file already has key (another process
// timed it meanwhile) its choice wins, and put returns it for this process to use too, unless it
// is the algorithm this process dropped: then ch replaces it in the file. Write errors are
// ignored: the cache only saves time and keeps later runs' bits.
func (c *algoCache) put(key string, ch algoChoice) algoChoice {
	c.mu.Lock()
	defer c.mu.Unlock()
	// A candidate that did not run has a NaN time (the heuristic's first, in FirstMicro); JSON
	// has no NaN, and one would keep every later write of the file from happening.
	for _, t := range []*float64{&ch.Micros, &ch.FirstMicro} {
		if math.IsNaN(*t) || math.IsInf(*t, 0) {
			*t = -1
		}
	}
	if c.path == "" {
		c.choices[key] = ch
		return ch
	}
	// Other processes (the ranks of a job on one machine) merge into the same file: the read,
	// merge and write run under an exclusive lock on a file beside it, so none loses another's
	// shapes and the first choice written for a shape is the one every process uses.
	if !c.unlocked {
		unlock, ok := lockFile(c.path + ".lock")
		defer unlock()
		c.unlocked = !ok // a stuck holder costs one wait, not one per shape
	}
	merged := readAlgoCache(c.path, c.header)
	if theirs, ok := merged[key]; ok && theirs.Algo != c.rejected[key] {
		ch = theirs
	}
	merged[key] = ch
	c.choices[key] = ch
	for k, v := range c.choices {
		if _, ok := merged[k]; !ok {
			merged[k] = v
		}
	}
	data, err := json.MarshalIndent(algoCacheFile{algoCacheHeader: c.header, Shapes: merged}, "", " ")
	if err == nil && os.MkdirAll(filepath.Dir(c.path), 0o755) == nil {
		_ = atomicfile.WriteBytes(c.path, append(data, '\n'))
	}
	return ch
}

// algoCacheLockWait bounds lockFile's wait for another process's lock.
var algoCacheLockWait = 10 * time.Second

// lockFile takes an exclusive lock on the file at path (creating it), waiting up to
// algoCacheLockWait for other processes to release theirs, and returns its release and true.
// Without the lock (a read-only folder, a file system without flock, a holder that is stopped or
// hung) it returns a no-op and false: the cache then works as before, racily, rather than
// stalling the matmuls.
func lockFile(path string) (unlock func(), ok bool) {
	if os.MkdirAll(filepath.Dir(path), 0o755) != nil {
		return func() {}, false
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil { // another user's lock file: flock works on a read-only descriptor too
		if f, err = os.Open(path); err != nil {
			return func() {}, false
		}
	}
	deadline := time.Now().Add(algoCacheLockWait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if (err != unix.EWOULDBLOCK && err != unix.EINTR) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		f.Close()
		return func() {}, false
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, true
}

// drop forgets key's stored algorithm, which the library no longer accepts, and remembers it
// as refused so that put writes the next choice over it in the file rather than taking it back.
func (c *algoCache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.choices[key]; ok {
		c.rejected[key] = ch.Algo
	}
	delete(c.choices, key)
}

// String is the cache key of a plan: every field that changes which algorithms apply.
func (k planKey) String() string {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	key := fmt.Sprintf("t%d%d m%d n%d k%d ld%d,%d,%d bias%d tf32%d %v>%v align%d,%d,%d,%d",
		b(k.TransA), b(k.TransB), k.M, k.N, k.K, k.LDA, k.LDB, k.LDD, b(k.Bias), b(k.TF32),
		k.AB, k.D, k.alignA, k.alignB, k.alignD, k.alignBias)
	if k.Gelu != NoGelu { // keys without an epilogue read as before it existed
		key += fmt.Sprintf(" gelu%d ld%d align%d", k.Gelu, k.AuxLD, k.alignAux)
	}
	return key
}

// fastest returns the index of the smallest finite time, the earlier one on a tie (the
// heuristic ranks better candidates first), or -1 when none ran.
func fastest(times []float64) int {
	best := -1
	for i, t := range times {
		if math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			continue
		}
		if best < 0 || t < times[best] {
			best = i
		}
	}
	return best
}

// eventPair times work queued on the device's stream.
type eventPair struct{ start, end uintptr }

func (g *Device) newEventPair() (eventPair, error) {
	defer g.bind()()
	var e eventPair
	for _, p := range []*uintptr{&e.start, &e.end} {
		if err := g.drv.check("cuEventCreate", first(purego.SyscallN(g.drv.eventCreate, uintptr(unsafe.Pointer(p)), 0))); err != nil {
			return e, err
		}
	}
	return e, nil
}

// time returns the milliseconds that run's queued work takes on the stream, waiting for it.
func (g *Device) time(e eventPair, run func() error) (float64, error) {
	if err := g.refuseInCapture("timing a matmul algorithm (tuning)"); err != nil {
		return 0, err
	}
	defer g.bind()()
	if err := g.drv.check("cuEventRecord", first(purego.SyscallN(g.drv.eventRecord, e.start, g.stream))); err != nil {
		return 0, err
	}
	if err := run(); err != nil {
		return 0, err
	}
	if err := g.drv.check("cuEventRecord", first(purego.SyscallN(g.drv.eventRecord, e.end, g.stream))); err != nil {
		return 0, err
	}
	if err := g.drv.check("cuEventSynchronize", first(purego.SyscallN(g.drv.eventSynchronize, e.end))); err != nil {
		return 0, err
	}
	var ms float32
	err := g.drv.check("cuEventElapsedTime", first(purego.SyscallN(g.drv.eventElapsedTime, uintptr(unsafe.Pointer(&ms)), e.start, e.end)))
	return float64(ms), err
}

// TunedShape is one shape Blas timed, for reports (bench --verbose, gpu-check).
type TunedShape struct {
	Key        string
	Candidates int
	Index      int     // the fastest's rank in the heuristic's list
	Micros     float64 // its time
	FirstMicro float64 // the heuristic's first choice's time
	Cached     bool    // read from the cache, not timed in this process
}

// TunedMatmuls lists the matmul shapes whose algorithms were picked by timing (Blas.Tuned).
func (be *Backend) TunedMatmuls() []TunedShape { return be.blas.Tuned() }

// MatmulCachePath is the file tuned algorithms are kept in ("" for none, or without tuning).
func (be *Backend) MatmulCachePath() string {
	if be.blas.cache == nil {
		return ""
	}
	return be.blas.cache.path
}

// Tuned lists the shapes this Blas chose algorithms for, timed or read from the cache, in key
// order.
func (b *Blas) Tuned() []TunedShape {
	var out []TunedShape
	for k, t := range b.tuned {
		t.Key = k
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b TunedShape) int { return strings.Compare(a.Key, b.Key) })
	return out
}
