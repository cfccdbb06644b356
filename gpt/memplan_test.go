package gpt_test

import (
	"fmt"
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
