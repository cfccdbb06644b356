package train

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
	"github.com/gpt2go/gpt2go/internal/graphrec"
)

// BenchmarkTrainStep times full training steps (forward, backward, AdamW) on random tokens:
//
//	go test -run '^$' -bench TrainStep -benchtime 3x ./train
func BenchmarkTrainStep(b *testing.B) {
	gpt2, _ := gpt.Preset("gpt2")
	small := gpt.Config{BlockSize: 64, VocabSize: 65, PaddedVocabSize: 65, NumLayers: 4, NumHeads: 4, Channels: 128}
	for _, bc := range []struct {
		name string
		cfg  gpt.Config
		B, T int
	}{
		{"shakespeare-char-B12-T64", small, 12, 64},
		{"gpt2-124M-B4-T64", gpt2, 4, 64},
	} {
		b.Run(bc.name, func(b *testing.B) {
			res, err := Bench(cpu.New(0), bc.cfg, bc.B, bc.T, 1, b.N)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.MsPerStep, "ms/step")
			b.ReportMetric(res.TokPerSec, "tok/s")
			b.ReportMetric(res.GFlops, "GFLOP/s")
		})
	}
}

func TestPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("PeakRSS reads /proc/self/status, which only Linux has")
	}
	if rss := PeakRSS(); rss <= 0 {
		t.Fatalf("PeakRSS = %d, want > 0", rss)
	}
}

// On a backend that records graphs, bench runs its steps as the trainer does: two graphs (the
// micro-batch, the update), each run directly once, then recorded and launched at every step;
// with noGraphs, none.
func TestBenchGraphs(t *testing.T) {
	cfg := gpt.Config{BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 1, NumHeads: 2, Channels: 16}
	const warmup, steps = 1, 3
	rec := graphrec.Wrap(cpu.New(1))
	res, err := BenchGraphs(context.Background(), rec, cfg, gpt.Precision{}, 2, 16, warmup, steps, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Graphs != "on: 2 graphs recorded and replayed" || rec.Captures != 2 || rec.Launches != 2*(warmup+steps-1) {
		t.Errorf("graphs %q: %d recorded, %d launched; want 2 and %d", res.Graphs, rec.Captures, rec.Launches, 2*(warmup+steps-1))
	}
	rec = graphrec.Wrap(cpu.New(1))
	if res, err = BenchGraphs(context.Background(), rec, cfg, gpt.Precision{}, 2, 16, warmup, steps, true); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Graphs, "off") || rec.Captures != 0 {
		t.Errorf("noGraphs: graphs %q, %d recorded", res.Graphs, rec.Captures)
	}
	if res, err = BenchGraphs(context.Background(), cpu.New(1), cfg, gpt.Precision{}, 2, 16, warmup, steps, false); err != nil || res.Graphs != "" {
		t.Errorf("the CPU records no graphs: %q, %v", res.Graphs, err)
	}
}
