package cuda

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
)

// asyncGPU is a backend without SyncEachOp (a graph cannot record a sync), or a skip.
func asyncGPU(t *testing.T) *Backend {
	t.Helper()
	g, err := New(Options{})
	if err != nil {
		if os.Getenv(requireGPUEnv) != "" {
			t.Fatalf("%s is set but the CUDA backend did not start: %v", requireGPUEnv, err)
		}
		t.Skipf("no usable GPU, CUDA graph tests skipped: %v", err)
	}
	return g
}

// A recorded graph replays its ops on what the buffers hold at each launch: new inputs and a new
// learning rate (AdamWAll's step buffer) give the bits of running the ops directly; nothing runs
// while recording; once scratch memory it uses has moved, it refuses to launch.
func TestGraphReplays(t *testing.T) {
	g := asyncGPU(t)
	segs := []backend.AdamWSegment{{Len: 3000, Decay: true}, {Len: 97}}
	N := backend.SegmentsLen(segs)
	h := backend.AdamWParams{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	type state struct{ x, y, p, m, v, step, stats backend.Buf }
	alloc := func() state {
		s := state{g.Alloc(N), g.Alloc(N), g.Alloc(N), g.Alloc(N), g.Alloc(N), g.Alloc(backend.AdamWStepLen), g.Alloc(backend.StepStatsLen)}
		g.Upload(s.p, randomHost(40, N, 0.02))
		return s
	}
	// The step: y = gelu(x), used as the gradient of an AdamW update with clipping at 1.
	work := func(s state) {
		g.GeluForward(s.y, s.x, N)
		g.GradStats(s.stats, s.y, N, 1024, 1, 1)
		g.AdamWAll(s.p, s.y, s.m, s.v, segs, h, s.step, s.stats)
	}
	setStep := func(s state, i int) {
		hs := h
		hs.LR, hs.Step = float32(1e-3*float64(i)), i
		enc := make([]float32, backend.AdamWStepLen)
		hs.EncodeStep(enc)
		g.Upload(s.step, enc)
		g.Upload(s.x, randomHost(uint64(50+i), N, 1))
	}
	eager, graphed := alloc(), alloc()
	setStep(eager, 1)
	work(eager) // warm-up: scratch allocated, segment table uploaded, kernels loaded
	setStep(graphed, 1)
	work(graphed)
	before := make([]float32, N)
	g.Download(before, graphed.p)
	if err := g.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	work(graphed)
	gr, err := g.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	after := make([]float32, N)
	g.Download(after, graphed.p)
	for i := range after {
		if after[i] != before[i] {
			t.Fatalf("recording ran the ops: p[%d] changed from %v to %v", i, before[i], after[i])
		}
	}
	for i := 2; i <= 4; i++ {
		setStep(eager, i)
		work(eager)
		setStep(graphed, i)
		if err := gr.Launch(); err != nil {
			t.Fatal(err)
		}
		want, got := make([]float32, N), make([]float32, N)
		g.Download(want, eager.p)
		g.Download(got, graphed.p)
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Fatalf("step %d: p[%d] = %v from the graph, %v run directly", i, j, got[j], want[j])
			}
		}
	}
	// A larger op regrows the scratch memory the graph's GradStats points into: the graph is
	// stale and refuses to launch, and the backend goes on.
	big := g.Alloc(64 * N)
	g.GradStats(eager.stats, big, 64*N, 16, 1, 1)
	if err := gr.Launch(); !errors.Is(err, backend.ErrGraphStale) {
		t.Fatalf("a launch after the scratch memory moved: %v, want ErrGraphStale", err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
}

// What a replay cannot repeat fails the recording, not the backend: EndCapture names it, and the
// backend goes on working.
func TestGraphRefusesHostWork(t *testing.T) {
	g := asyncGPU(t)
	x := g.Alloc(1024)
	host := make([]float32, 1024)
	for _, c := range []struct {
		name, want string
		do         func()
	}{
		{"upload", "copy from the host", func() { g.Upload(x, host) }},
		{"download", "copy to the host", func() { g.Download(host, x) }},
		{"alloc", "allocating GPU memory", func() { g.Alloc(7) }},
		{"sync", "waiting for the GPU", func() { g.Sync() }},
		{"fence", "recording an event", func() { g.Fence() }},
	} {
		if err := g.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		g.GeluForward(x, x, 1024)
		c.do()
		gr, err := g.EndCapture()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s while recording: EndCapture gave %v, want an error naming %q", c.name, err, c.want)
		}
		if gr != nil {
			gr.Close()
		}
		if err := g.Sync(); err != nil {
			t.Fatalf("%s while recording left the backend failed: %v", c.name, err)
		}
	}
}

// The graph calls resolve in whatever libcuda this machine has (a driver, or the toolkit's
// stub), GPU or not: a misspelt symbol fails here rather than on the first GPU run.
func TestGraphSymbolsResolve(t *testing.T) {
	h, path, err := libCUDA.open()
	if err != nil {
		t.Skipf("no libcuda to resolve symbols in: %v", err)
	}
	var gs graphSymbols
	if err := symbols(libCUDA, h, gs.table()); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for name, p := range gs.table() {
		if *p == 0 {
			t.Errorf("%s: %s resolved to 0", path, name)
		}
	}
}
