package cuda

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpt2go/gpt2go/backend"
)

func TestFastest(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		times []float64
		want  int
	}{
		{[]float64{3, 2, 1}, 2},
		{[]float64{1, 2, 1}, 0},        // a tie goes to the heuristic's earlier candidate
		{[]float64{nan, 5, 4, nan}, 2}, // failed candidates are skipped
		{[]float64{nan, inf, -1}, -1},  // nothing ran
		{[]float64{}, -1},              //
		{[]float64{0.5, nan, 0.25, 0.25}, 2},
	} {
		if got := fastest(c.times); got != c.want {
			t.Errorf("fastest(%v) = %d, want %d", c.times, got, c.want)
		}
	}
}

// Every field of a plan key changes its string: two shapes that need different algorithms must
// never share a cached one.
func TestPlanKeyString(t *testing.T) {
	base := planKey{Gemm: Gemm{TransA: true, M: 768, N: 16384, K: 3072, LDA: 3072, LDB: 3072, LDD: 768, Bias: true,
		AB: backend.BF16, D: backend.BF16}, alignA: 256, alignB: 256, alignD: 256, alignBias: 256}
	variants := []func(k *planKey){
		func(k *planKey) { k.TransA = false },
		func(k *planKey) { k.TransB = true },
		func(k *planKey) { k.M++ },
		func(k *planKey) { k.N++ },
		func(k *planKey) { k.K++ },
		func(k *planKey) { k.LDA++ },
		func(k *planKey) { k.LDB++ },
		func(k *planKey) { k.LDD++ },
		func(k *planKey) { k.Bias = false },
		func(k *planKey) { k.TF32 = true },
		func(k *planKey) { k.AB = backend.F16 },
		func(k *planKey) { k.D = backend.F32 },
		func(k *planKey) { k.alignA = 4 },
		func(k *planKey) { k.alignB = 4 },
		func(k *planKey) { k.alignD = 4 },
		func(k *planKey) { k.alignBias = 4 },
		func(k *planKey) { k.Gelu, k.AuxLD, k.alignAux = GeluForward, 3072, 256 },
		func(k *planKey) { k.Gelu, k.AuxLD, k.alignAux = GeluBackward, 3072, 256 },
		func(k *planKey) { k.Gelu, k.AuxLD, k.alignAux = GeluForward, 3080, 256 },
		func(k *planKey) { k.Gelu, k.AuxLD, k.alignAux = GeluForward, 3072, 16 },
	}
	seen := map[string]int{base.String(): -1}
	for i, v := range variants {
		k := base
		v(&k)
		s := k.String()
		if j, ok := seen[s]; ok {
			t.Errorf("variant %d has the key of %d: %q", i, j, s)
		}
		seen[s] = i
	}
	if base.String() != base.String() {
		t.Error("key not stable")
	}
}

func testChoice(seed byte, index int) algoChoice {
	b := make([]byte, algoBytes)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return algoChoice{Algo: hex.EncodeToString(b), Index: index, Candidates: 8, Micros: 10, FirstMicro: 12}
}

// newTestCache opens a cache outside the process registry (each test its own).
func newTestCache(dir string, h algoCacheHeader) *algoCache {
	return newAlgoCache(algoCachePath(dir, h), h)
}

// The cache file keeps choices across processes, only for its own GPU and library, survives a
// corrupt file, and keeps the first writer's choice of a shape.
func TestAlgoCacheFile(t *testing.T) {
	dir := t.TempDir()
	h := algoCacheHeader{Version: algoCacheVersion, Device: "NVIDIA H100 80GB HBM3", Arch: "sm_90", CublasLt: 130101, Workspace: 32 << 20}
	a := newTestCache(dir, h)
	if _, ok := a.get("x"); ok {
		t.Fatal("empty cache has a choice")
	}
	if got := a.put("x", testChoice(1, 3)); got != testChoice(1, 3) {
		t.Fatalf("put into a new file returned %+v", got)
	}
	a.put("y", testChoice(2, 0))

	// A second process reads both.
	b := newTestCache(dir, h)
	if got, ok := b.get("x"); !ok || got != testChoice(1, 3) {
		t.Fatalf("reloaded x = %+v, %v", got, ok)
	}
	if got, ok := b.get("y"); !ok || got != testChoice(2, 0) {
		t.Fatalf("reloaded y = %+v, %v", got, ok)
	}

	// Two processes time the same new shape: the file keeps the first, and the second adopts it.
	c := newTestCache(dir, h)
	a.put("z", testChoice(3, 1))
	if got := c.put("z", testChoice(4, 2)); got != testChoice(3, 1) {
		t.Fatalf("second writer got %+v, want the file's %+v", got, testChoice(3, 1))
	}
	if got, _ := c.get("z"); got != testChoice(3, 1) {
		t.Fatalf("second writer keeps %+v", got)
	}
	c.put("w", testChoice(5, 0)) // c's write keeps a's shapes
	if n := len(newTestCache(dir, h).choices); n != 4 {
		t.Fatalf("file has %d shapes, want 4 (x, y, z, w)", n)
	}

	// Another GPU, library or workspace: another file, and a foreign file's header is refused.
	for _, other := range []algoCacheHeader{
		{Version: h.Version, Device: "NVIDIA A100-SXM4-80GB", Arch: "sm_80", CublasLt: h.CublasLt, Workspace: h.Workspace},
		{Version: h.Version, Device: h.Device, Arch: h.Arch, CublasLt: 130200, Workspace: h.Workspace},
		{Version: h.Version, Device: h.Device, Arch: h.Arch, CublasLt: h.CublasLt, Workspace: 4 << 20},
		{Version: h.Version + 1, Device: h.Device, Arch: h.Arch, CublasLt: h.CublasLt, Workspace: h.Workspace},
	} {
		if algoCachePath(dir, other) == algoCachePath(dir, h) {
			t.Errorf("header %+v shares the file of %+v", other, h)
		}
		if n := len(readAlgoCache(algoCachePath(dir, h), other)); n != 0 {
			t.Errorf("header %+v read %d shapes of another GPU's file", other, n)
		}
	}

	// A damaged entry is dropped, the others kept; a corrupt file gives nothing and is rewritten.
	path := algoCachePath(dir, h)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), testChoice(2, 0).Algo, "zz"+testChoice(2, 0).Algo[2:], 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newTestCache(dir, h)
	if _, ok := d.get("y"); ok {
		t.Error("an entry whose algorithm is not hex was used")
	}
	if _, ok := d.get("x"); !ok {
		t.Error("a good entry was dropped with a bad one")
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newTestCache(dir, h)
	if len(e.choices) != 0 {
		t.Fatal("a corrupt file gave choices")
	}
	e.put("v", testChoice(6, 0))
	if got, ok := newTestCache(dir, h).get("v"); !ok || got != testChoice(6, 0) {
		t.Fatalf("after rewriting a corrupt file: %+v, %v", got, ok)
	}

	// An algorithm the library refused (drop) is not taken back from the file: the fresh
	// choice replaces it there too.
	newTestCache(dir, h).put("x", testChoice(1, 3))
	g := newTestCache(dir, h)
	if got, ok := g.get("x"); !ok || got != testChoice(1, 3) {
		t.Fatalf("x before the drop: %+v, %v", got, ok)
	}
	g.drop("x")
	if got := g.put("x", testChoice(8, 2)); got != testChoice(8, 2) {
		t.Fatalf("after dropping x, put returned %+v, want the fresh %+v", got, testChoice(8, 2))
	}
	if got, _ := newTestCache(dir, h).get("x"); got != testChoice(8, 2) {
		t.Fatalf("the file still holds the refused x: %+v", got)
	}

	// A candidate that did not run (NaN time) is stored as -1 and the file is still written,
	// now and on later puts.
	nan := testChoice(9, 1)
	nan.FirstMicro = math.NaN()
	got := g.put("u", nan)
	g.put("t", testChoice(10, 0))
	h2 := newTestCache(dir, h)
	if u, ok := h2.get("u"); !ok || u.FirstMicro != -1 || got.FirstMicro != -1 {
		t.Fatalf("a NaN timing: put returned %+v, the file holds %+v, %v", got, u, ok)
	}
	if _, ok := h2.get("t"); !ok {
		t.Fatal("a put after a NaN timing was not written")
	}

	// No cache directory: choices last for the process.
	f := newTestCache("", h)
	f.put("x", testChoice(7, 0))
	if got, ok := f.get("x"); !ok || got != testChoice(7, 0) {
		t.Fatal("an in-memory cache lost its choice")
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*.tmp*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}
}

// Processes writing one cache file at once (the ranks of a job on one machine; here caches
// opened separately, which lock the file as processes do) lose none of each other's shapes, and
// all use the first choice written for a shape they share.
func TestAlgoCacheConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	h := algoCacheHeader{Version: algoCacheVersion, Device: "test", Arch: "sm_00", CublasLt: 1, Workspace: 1}
	const writers, keys = 6, 12
	shared := make([]algoChoice, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newTestCache(dir, h)
			for k := range keys {
				c.put(fmt.Sprintf("w%d-k%d", w, k), testChoice(byte(w), k))
			}
			shared[w] = c.put("shared", testChoice(byte(100+w), 0))
		}()
	}
	wg.Wait()
	final := newTestCache(dir, h)
	for w := range writers {
		for k := range keys {
			if got, ok := final.get(fmt.Sprintf("w%d-k%d", w, k)); !ok || got != testChoice(byte(w), k) {
				t.Errorf("writer %d's shape %d: %+v, %v in the file", w, k, got, ok)
			}
		}
		if shared[w] != shared[0] {
			t.Errorf("writers 0 and %d use different choices for a shared shape", w)
		}
	}
	if got, _ := final.get("shared"); got != shared[0] {
		t.Errorf("the file holds %+v for the shared shape, the writers use %+v", got, shared[0])
	}
}

// A lock held by a process that never lets go (stopped, hung) delays the first put by
// algoCacheLockWait, not for ever, and later puts not at all; the choices are still written.
func TestAlgoCacheLockHeld(t *testing.T) {
	defer func(d time.Duration) { algoCacheLockWait = d }(algoCacheLockWait)
	algoCacheLockWait = 200 * time.Millisecond
	dir := t.TempDir()
	h := algoCacheHeader{Version: algoCacheVersion, Device: "test", Arch: "sm_00", CublasLt: 1, Workspace: 1}
	c := newTestCache(dir, h)
	unlock, ok := lockFile(c.path + ".lock") // the stuck holder
	if !ok {
		t.Fatal("no lock to hold")
	}
	defer unlock()
	start := time.Now()
	c.put("x", testChoice(1, 0))
	if d := time.Since(start); d < algoCacheLockWait || d > 10*algoCacheLockWait {
		t.Errorf("put took %v with the lock held elsewhere; want about %v", d, algoCacheLockWait)
	}
	// Later shapes do not wait again: one stuck holder costs one wait.
	start = time.Now()
	c.put("y", testChoice(2, 0))
	if d := time.Since(start); d >= algoCacheLockWait {
		t.Errorf("a second put waited %v", d)
	}
	for _, k := range []string{"x", "y"} {
		if _, ok := newTestCache(dir, h).get(k); !ok {
			t.Errorf("the choice for %s was not written", k)
		}
	}
}

// openAlgoCache gives every Blas of a process the same cache, so that two backends agree.
func TestOpenAlgoCacheShared(t *testing.T) {
	dir := t.TempDir()
	h := algoCacheHeader{Version: algoCacheVersion, Device: "test", Arch: "sm_00", CublasLt: 1, Workspace: 1}
	if openAlgoCache(dir, h) != openAlgoCache(dir, h) {
		t.Error("two opens of one cache are different caches")
	}
	if openAlgoCache("", h) == openAlgoCache(dir, h) {
		t.Error("the in-memory cache is the file's")
	}
}

// GPU: a shape timed by one backend is cached, a second backend (as a resumed run would) reads
// the same algorithm and gets the same bits, and timing leaves the operands as they were (a
// weight gradient accumulates into D: the candidates' runs must not add to it).
func TestMatmulTuning(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(CacheEnv, dir)
	g := gpu(t, false)
	if !g.blas.tune {
		t.Fatal("tuning is off by default")
	}
	rng := rand.New(rand.NewPCG(7, 9))
	const M, N, K = 768, 1024, 3072
	randBuf := func(n int, dt backend.DType) (backend.Buf, []float32) {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(2*rng.Float64() - 1)
		}
		b := g.AllocDType(n, dt)
		g.Upload(b, v)
		return b, v
	}
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		a, _ := randBuf(M*K, dt)
		bm, _ := randBuf(K*N, dt)
		d0, _ := randBuf(M*N, backend.F32)
		// dweight += dout^T @ inp, as MatmulBackward calls it: D fp32, accumulated.
		s := Gemm{TransB: true, M: M, N: N, K: K, LDA: M, LDB: N, LDD: M, AB: dt, D: backend.F32}
		run := func(be *Backend) []float32 {
			d := be.Alloc(M * N)
			be.fail(be.g.DtoD(ptrOf(d), ptrOf(d0), M*N*4))
			if err := be.blas.Matmul(s, ptrOf(a), ptrOf(bm), ptrOf(d), 0, true); err != nil {
				t.Fatal(err)
			}
			if err := be.Sync(); err != nil {
				t.Fatal(err)
			}
			out := make([]float32, M*N)
			be.Download(out, d)
			return out
		}
		tuned := run(g)
		// The same product on the heuristic's first algorithm: agrees to rounding, so the
		// candidates' runs did not accumulate into D.
		h, err := NewBlas(g.g, blasWorkspace, false, "")
		if err != nil {
			t.Fatal(err)
		}
		plain := &Backend{g: g.g, blas: h, opts: g.opts, kernels: g.kernels}
		near(t, dt.String()+" tuned vs heuristic", run(plain), tuned, 1e-5)

		shapes := g.TunedMatmuls()
		if len(shapes) == 0 {
			t.Logf("%v: the heuristic offered one algorithm; nothing to time", dt)
			continue
		}
		for _, sh := range shapes {
			t.Logf("%v: %s: %d candidates, picked #%d at %.1f us (first %.1f us)", dt, sh.Key, sh.Candidates, sh.Index, sh.Micros, sh.FirstMicro)
		}
		if g.MatmulCachePath() == "" {
			t.Fatal("no cache file with a cache directory set")
		}
		if _, err := os.Stat(g.MatmulCachePath()); err != nil {
			t.Fatalf("cache not written: %v", err)
		}
		// A second process: forget this process's caches, read the file.
		algoCaches.Lock()
		clear(algoCaches.m)
		algoCaches.Unlock()
		b2, err := NewBlas(g.g, blasWorkspace, true, dir)
		if err != nil {
			t.Fatal(err)
		}
		again := &Backend{g: g.g, blas: b2, opts: g.opts, kernels: g.kernels}
		sameBits(t, dt.String()+" second backend", tuned, run(again))
		for _, sh := range again.TunedMatmuls() {
			if !sh.Cached {
				t.Errorf("%s: timed again instead of read from the cache", sh.Key)
			}
		}
	}
}

// BenchmarkMatmulTuning compares the heuristic's first algorithm with the timed pick on GPT-2
// 124M's matmuls at B*T = 16384 in bf16 (forward and both backward products), in TFLOP/s.
func BenchmarkMatmulTuning(b *testing.B) {
	const N, C = 16384, 768
	type mm struct {
		name   string
		OC, IC int
	}
	layers := []mm{{"qkv", 3 * C, C}, {"attproj", C, C}, {"fc", 4 * C, C}, {"fcproj", C, 4 * C}, {"lmhead", 50304, C}}
	g, err := New(Options{})
	if err != nil {
		b.Skipf("no usable GPU: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Random operands: products of zeros draw less power and run at higher clocks.
	randBuf := func(n int, dt backend.DType) backend.Buf {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(2*rng.Float64() - 1)
		}
		buf := g.AllocDType(n, dt)
		g.Upload(buf, v)
		return buf
	}
	for _, tune := range []bool{false, true} {
		dir := ""
		if tune {
			dir = b.TempDir()
		}
		blas, err := NewBlas(g.g, blasWorkspace, tune, dir)
		if err != nil {
			b.Fatal(err)
		}
		mode := map[bool]string{false: "heuristic", true: "tuned"}[tune]
		for _, l := range layers {
			x, w, out := randBuf(N*l.IC, backend.BF16), randBuf(l.OC*l.IC, backend.BF16), randBuf(N*l.OC, backend.BF16)
			dw := randBuf(l.OC*l.IC, backend.F32)
			products := []struct {
				name  string
				s     Gemm
				a, bm uintptr
				d     uintptr
				acc   bool
			}{
				{"fwd", Gemm{TransA: true, M: l.OC, N: N, K: l.IC, LDA: l.IC, LDB: l.IC, LDD: l.OC, AB: backend.BF16, D: backend.BF16}, ptrOf(w), ptrOf(x), ptrOf(out), false},
				{"dinp", Gemm{M: l.IC, N: N, K: l.OC, LDA: l.IC, LDB: l.OC, LDD: l.IC, AB: backend.BF16, D: backend.BF16}, ptrOf(w), ptrOf(out), ptrOf(x), false},
				{"dweight", Gemm{TransB: true, M: l.IC, N: l.OC, K: N, LDA: l.IC, LDB: l.OC, LDD: l.IC, AB: backend.BF16, D: backend.F32}, ptrOf(x), ptrOf(out), ptrOf(dw), true},
			}
			for _, p := range products {
				b.Run(mode+"/"+l.name+"/"+p.name, func(b *testing.B) {
					if err := blas.Matmul(p.s, p.a, p.bm, p.d, 0, p.acc); err != nil { // tunes, untimed
						b.Fatal(err)
					}
					if err := g.Sync(); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for b.Loop() {
						if err := blas.Matmul(p.s, p.a, p.bm, p.d, 0, p.acc); err != nil {
							b.Fatal(err)
						}
					}
					if err := g.Sync(); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(2*float64(N)*float64(l.OC)*float64(l.IC)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
				})
			}
		}
	}
}
