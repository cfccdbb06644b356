package gpt_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// counting records what a model allocates and what plan it was asked to check.
type counting struct {
	backend.Backend
	bytes   int64
	checked []backend.MemoryItem
	refuse  bool
}

func (c *counting) Alloc(n int) backend.Buf { c.bytes += 4 * int64(n); return c.Backend.Alloc(n) }
func (c *counting) AllocInt32(n int) backend.Buf {
	c.bytes += 4 * int64(n)
	return c.Backend.AllocInt32(n)
}
func (c *counting) QuantizeInt8(w backend.Buf, OC, C int) (backend.Buf, error) {
	q, err := c.Backend.QuantizeInt8(w, OC, C)
	if err == nil {
		c.bytes += q.(interface{ Bytes() int64 }).Bytes()
	}
	return q, err
}
func (c *counting) CheckMemory(plan []backend.MemoryItem) error {
	c.checked = plan
	if c.refuse {
		return fmt.Errorf("does not fit")
	}
	return nil
}

// The plan is exactly what New allocates, and New checks it before allocating.
func TestMemoryPlanMatchesAllocations(t *testing.T) {
	for _, cfg := range []gpt.Config{
		{BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 16},
		{BlockSize: 64, VocabSize: 101, PaddedVocabSize: 128, NumLayers: 3, NumHeads: 3, Channels: 60},
	} {
		for _, bt := range [][2]int{{1, 1}, {3, 11}, {4, cfg.BlockSize}} {
			be := &counting{Backend: cpu.New(1)}
			if _, err := gpt.New(be, cfg, bt[0], bt[1]); err != nil {
				t.Fatal(err)
			}
			plan := cfg.MemoryPlan(bt[0], bt[1])
			if got := gpt.PlanBytes(plan); got != be.bytes {
				t.Errorf("%+v B=%d T=%d: plan says %d bytes, New allocated %d", cfg, bt[0], bt[1], got, be.bytes)
			}
			if gpt.PlanBytes(be.checked) != gpt.PlanBytes(plan) {
				t.Errorf("New checked a plan of %d bytes, want %d", gpt.PlanBytes(be.checked), gpt.PlanBytes(plan))
			}
		}
	}
	// The data-parallel layouts: padded ZeRO-1 shards, a second gradient buffer.
	cfg0 := parallelConfig
	for _, par := range []gpt.Parallel{{SeparateAccum: true}, {Shards: 2, Rank: 1}, {Shards: 3, SeparateAccum: true}} {
		be := &counting{Backend: cpu.New(1)}
		if _, err := gpt.NewParallel(be, cfg0, 2, 5, gpt.Precision{}, par); err != nil {
			t.Fatal(err)
		}
		plan := cfg0.ParallelMemoryPlan(2, 5, gpt.Precision{}, par)
		if got := gpt.PlanBytes(plan); got != be.bytes || gpt.PlanBytes(be.checked) != got {
			t.Errorf("%+v: plan says %d bytes, New allocated %d and checked %d", par, got, be.bytes, gpt.PlanBytes(be.checked))
		}
	}
	be := &counting{Backend: cpu.New(1), refuse: true}
	cfg := gpt.Config{BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 16}
	if _, err := gpt.New(be, cfg, 2, 16); err == nil || be.bytes != 0 {
		t.Errorf("a refused plan must stop New before it allocates (err %v, %d bytes allocated)", err, be.bytes)
	}
}

// NewInference's plan is what it allocates, and for GPT-2 124M evaluated at B=8 T=1024 it is
// under 30% of a trainable model's: no gradients, moments or backward scratch, and one layer's
// activations (the logits, 1.6 GB, are most of what is left).
func TestInferenceMemoryPlan(t *testing.T) {
	cfg := gpt.Config{BlockSize: 64, VocabSize: 101, PaddedVocabSize: 128, NumLayers: 3, NumHeads: 3, Channels: 60}
	for _, bt := range [][2]int{{1, 1}, {3, 11}, {4, cfg.BlockSize}} {
		be := &counting{Backend: cpu.New(1)}
		if _, err := gpt.NewInference(be, cfg, bt[0], bt[1], gpt.Precision{}); err != nil {
			t.Fatal(err)
		}
		plan := cfg.InferenceMemoryPlan(bt[0], bt[1], gpt.Precision{})
		if got := gpt.PlanBytes(plan); got != be.bytes || gpt.PlanBytes(be.checked) != got {
			t.Errorf("B=%d T=%d: plan says %d bytes, NewInference allocated %d and checked %d", bt[0], bt[1], got, be.bytes, gpt.PlanBytes(be.checked))
		}
		for _, it := range plan {
			if strings.Contains(it.Name, "gradients") || strings.Contains(it.Name, "moments") {
				t.Errorf("the inference plan has %q", it.Name)
			}
		}
	}
	gpt2, err := gpt.Preset("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	inf, full := gpt.PlanBytes(gpt2.InferenceMemoryPlan(8, 1024, gpt.Precision{})), gpt.PlanBytes(gpt2.MemoryPlan(8, 1024))
	t.Logf("GPT-2 124M at B=8 T=1024: inference %.2f GB, trainable %.2f GB", float64(inf)/1e9, float64(full)/1e9)
	if inf*10 > full*3 {
		t.Errorf("inference plan %d bytes, more than 30%% of the trainable %d", inf, full)
	}
}

// NewInferenceInt8's plan is what it allocates (int8 rows padded to 64 bytes on the CPU, so C=60
// tests the padding), and for GPT-2 124M sampling (B=1 T=1) it is under 60% of NewInference's:
// the fp32 matmul weights are not kept beside their int8 copies.
func TestInt8InferenceMemoryPlan(t *testing.T) {
	cfg := gpt.Config{BlockSize: 64, VocabSize: 101, PaddedVocabSize: 128, NumLayers: 3, NumHeads: 3, Channels: 60}
	for _, bt := range [][2]int{{1, 1}, {3, 11}, {4, cfg.BlockSize}} {
		be := &counting{Backend: cpu.New(1)}
		if _, _, err := gpt.NewInferenceInt8(be, cfg, bt[0], bt[1], gpt.Precision{}, gpt.HostParams(make([]float32, cfg.NumParams()))); err != nil {
			t.Fatal(err)
		}
		plan := cfg.Int8InferenceMemoryPlan(bt[0], bt[1], gpt.Precision{})
		if got := gpt.PlanBytes(plan); got != be.bytes || gpt.PlanBytes(be.checked) != got {
			t.Errorf("B=%d T=%d: plan says %d bytes, NewInferenceInt8 allocated %d and checked %d", bt[0], bt[1], got, be.bytes, gpt.PlanBytes(be.checked))
		}
	}
	be := &counting{Backend: cpu.New(1), refuse: true}
	if _, _, err := gpt.NewInferenceInt8(be, cfg, 2, 16, gpt.Precision{}, gpt.HostParams(make([]float32, cfg.NumParams()))); err == nil || be.bytes != 0 {
		t.Errorf("a refused plan must stop NewInferenceInt8 before it allocates (err %v, %d bytes allocated)", err, be.bytes)
	}
	gpt2, err := gpt.Preset("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	q, f := gpt.PlanBytes(gpt2.Int8InferenceMemoryPlan(1, 1, gpt.Precision{})), gpt.PlanBytes(gpt2.InferenceMemoryPlan(1, 1, gpt.Precision{}))
	t.Logf("GPT-2 124M at B=1 T=1: int8 %.1f MB, fp32 %.1f MB", float64(q)/1e6, float64(f)/1e6)
	if q*10 > f*6 {
		t.Errorf("int8 plan %d bytes, more than 60%% of fp32's %d", q, f)
	}
}
