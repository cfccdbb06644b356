package graphrec

import (
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
)

// Recording runs nothing; a launch runs the ops on the buffers' contents then; what a graph
// cannot replay fails the recording and leaves the wrapper usable.
func TestRecordAndReplay(t *testing.T) {
	r := Wrap(cpu.New(1))
	x, y := r.Alloc(4), r.Alloc(4)
	r.Upload(x, []float32{1, 2, 3, 4})
	if err := r.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	r.ResidualForward(y, x, x, 4) // y = 2x
	g, err := r.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	r.Download(got, y)
	if got[0] != 0 {
		t.Fatalf("recording ran the op: y = %v", got)
	}
	for _, v := range []float32{5, -1} {
		r.Upload(x, []float32{v, v, v, v})
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		r.Download(got, y)
		if got[3] != 2*v {
			t.Fatalf("launch after x = %v: y = %v, want %v", v, got, 2*v)
		}
	}
	g.Close()
	if g.Launch() == nil {
		t.Error("a closed graph launched")
	}
	for name, do := range map[string]func(){
		"Upload":   func() { r.Upload(x, got) },
		"Download": func() { r.Download(got, x) },
		"Alloc":    func() { r.Alloc(3) },
		"Sync":     func() { r.Sync() },
		"SumSquares": func() {
			r.SumSquares(x, 4)
		},
	} {
		if err := r.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		do()
		if _, err := r.EndCapture(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s while recording: %v, want an error naming it", name, err)
		}
	}
	// Slices are kept by value, as kernel arguments are.
	segs := []backend.AdamWSegment{{Len: 4, Decay: true}}
	p, m, v, step, stats := r.Alloc(4), r.Alloc(4), r.Alloc(4), r.Alloc(backend.AdamWStepLen), r.Alloc(backend.StepStatsLen)
	r.BeginCapture()
	r.AdamWAll(p, x, m, v, segs, backend.AdamWParams{Beta1: 0.9, Beta2: 0.95}, step, stats)
	g, err = r.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	segs[0].Len = 5 // would panic in AdamWAll if the recording shared the slice
	if err := g.Launch(); err != nil {
		t.Fatal(err)
	}
}
