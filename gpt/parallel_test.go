package gpt_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/gpt"
)

// parallelConfig has enough parameters (about 28K) for several NormBlocks and shards.
var parallelConfig = gpt.Config{BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 32}

func microBatch(k, B, T, V int) (inputs, targets []int32) {
	inputs, targets = make([]int32, B*T), make([]int32, B*T)
	for i := range inputs {
		inputs[i], targets[i] = int32((i*7+k*13)%V), int32((i*11+k*5+3)%V)
	}
	return inputs, targets
}

// Data-parallel ranks that each run one micro-batch and sum their gradients in rank order (what
// package dist does), with the whole update (DDP) or each rank updating its ZeRO-1 shard, must
// give the bits of one process accumulating the same micro-batches with BackwardAccumulate: the
// same losses, gradient norms, parameters and moments. The collectives are simulated here; the
// trainer's tests run them under mpirun. In bf16 with stochastic rounding, ZeRO-1 ranks that keep
// only their shard of the fp32 master (Parallel.ShardMaster) and all-gather the bf16 copy give
// the same master, copy and moments.
func TestRanksMatchGradientAccumulation(t *testing.T) {
	const B, T, steps = 2, 16, 3
	cfg := parallelConfig
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	bf16 := gpt.Precision{Compute: backend.BF16, StochasticRounding: true}
	for _, tc := range []struct {
		name        string
		world, zero int
		prec        gpt.Precision
	}{{"ddp 2 ranks", 2, 0, gpt.Precision{}}, {"zero-1 2 ranks", 2, 1, gpt.Precision{}}, {"ddp 3 ranks", 3, 0, gpt.Precision{}},
		{"zero-1 3 ranks", 3, 1, gpt.Precision{}}, {"ddp 2 ranks bf16", 2, 0, bf16}, {"zero-1 3 ranks bf16 sharded master", 3, 1, bf16},
		{"zero-1 5 ranks bf16 sharded master, the last shard all padding", 5, 1, bf16}} {
		t.Run(tc.name, func(t *testing.T) {
			be := cpu.New(2)
			defer be.Close()
			one, err := gpt.NewParallel(be, cfg, B, T, tc.prec, gpt.Parallel{SeparateAccum: true})
			if err != nil {
				t.Fatal(err)
			}
			one.InitGPT2(3)
			ranks := make([]*gpt.Model, tc.world)
			for r := range ranks {
				par := gpt.Parallel{}
				if tc.zero == 1 {
					par = gpt.Parallel{Shards: tc.world, Rank: r, ShardMaster: true}
				}
				if ranks[r], err = gpt.NewParallel(be, cfg, B, T, tc.prec, par); err != nil {
					t.Fatal(err)
				}
				ranks[r].InitGPT2(3)
			}
			sharded := ranks[0].MasterSharded()
			if sharded != (tc.zero == 1 && tc.prec.Mixed()) {
				t.Fatalf("MasterSharded %v", sharded)
			}
			// The all-gather of the compute copy: each rank's shard into every rank's copy.
			gatherCompute := func() {
				for _, from := range ranks {
					off, _, real := from.Shard()
					if real == 0 {
						continue
					}
					for _, to := range ranks {
						copy(be.HostFloats(to.Compute())[off:off+real], be.HostFloats(from.Compute())[off:off+real])
					}
				}
			}
			if sharded {
				gatherCompute()
			}
			n := one.Params.Len()
			scale := float32(1) / float32(tc.world)
			for step := 1; step <= steps; step++ {
				// One process, tc.world micro-batches accumulated.
				one.ZeroGrad()
				var wantLoss float64
				for k := range tc.world {
					in, tg := microBatch(step*10+k, B, T, cfg.VocabSize)
					l, err := one.Forward(in, tg, B, T)
					if err != nil {
						t.Fatal(err)
					}
					wantLoss += float64(l)
					if k == 0 {
						err = one.Backward(scale)
					} else {
						err = one.BackwardAccumulate(scale)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				wantNorm := one.GradNorm()
				clip := min(1, 1/(wantNorm+1e-6))
				one.Update(opt, 1e-3, step, clip)

				// The ranks, one micro-batch each.
				var gotLoss float64
				for r, m := range ranks {
					m.ZeroGrad()
					in, tg := microBatch(step*10+r, B, T, cfg.VocabSize)
					l, err := m.Forward(in, tg, B, T)
					if err != nil {
						t.Fatal(err)
					}
					gotLoss += float64(l)
					if err := m.Backward(scale); err != nil {
						t.Fatal(err)
					}
				}
				if gotLoss != wantLoss {
					t.Fatalf("step %d: ranks' loss %v, one process %v", step, gotLoss, wantLoss)
				}
				sum := make([]float32, n) // the rank-order sum a collective makes
				copy(sum, be.HostFloats(ranks[0].Grads))
				for _, m := range ranks[1:] {
					for i, g := range be.HostFloats(m.Grads) {
						sum[i] = float32(sum[i] + g)
					}
				}
				var gotNorm float64
				if tc.zero == 0 {
					for _, m := range ranks {
						copy(be.HostFloats(m.Grads), sum)
						if norm := m.GradNorm(); norm != wantNorm {
							t.Fatalf("step %d: a rank's norm %v, one process %v", step, norm, wantNorm)
						}
						m.Update(opt, 1e-3, step, clip)
					}
					gotNorm = wantNorm
				} else {
					// Reduce-scatter: each rank holds the sum in its own shard only (the rest is
					// poisoned, so reading it would show); block sums go round in rank order.
					var blockSums []float64
					for _, m := range ranks {
						off, length, real := m.Shard()
						padded := be.HostFloats(m.PaddedGrads())
						for i := range padded {
							padded[i] = float32(math.NaN())
						}
						for i := off; i < off+length; i++ {
							padded[i] = 0
							if i < off+real {
								padded[i] = sum[i]
							}
						}
						part := make([]float64, length/gpt.NormBlock)
						m.GradBlockSums(part, off, length)
						blockSums = append(blockSums, part...)
					}
					gotNorm = math.Sqrt(backend.SumBlockSums(blockSums))
					if gotNorm != wantNorm {
						t.Fatalf("step %d: ZeRO-1 norm %v, one process %v", step, gotNorm, wantNorm)
					}
					// Each rank updates its shard, then all-gather: the fp32 weights, or with a
					// sharded master the rank's shard of the compute copy.
					whole := make([]float32, n)
					for _, m := range ranks {
						m.UpdateShard(opt, 1e-3, step, min(1, 1/(gotNorm+1e-6)))
						if sharded {
							m.ParamsUpdatedAt(step)
							continue
						}
						off, _, real := m.Shard()
						copy(whole[off:off+real], be.HostFloats(m.Params)[off:off+real])
					}
					if sharded {
						gatherCompute()
					} else {
						for _, m := range ranks {
							if err := m.SetParams(whole); err != nil {
								t.Fatal(err)
							}
							m.ParamsUpdatedAt(step)
						}
					}
				}
				want, wantCompute := be.HostFloats(one.Params), be.HostFloats(one.Compute())
				for r, m := range ranks {
					off, _, real := m.Shard()
					got, master := be.HostFloats(m.Params), 0
					if sharded { // this rank's shard only
						got, master = got[:real], off
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[master+i]) {
							t.Fatalf("step %d rank %d: parameter %d is %v, one process %v", step, r, master+i, got[i], want[master+i])
						}
					}
					for i, c := range be.HostFloats(m.Compute()) {
						if math.Float32bits(c) != math.Float32bits(wantCompute[i]) {
							t.Fatalf("step %d rank %d: compute copy %d is %v, one process %v", step, r, i, c, wantCompute[i])
						}
					}
					for i := range real {
						if be.HostFloats(m.M)[i] != be.HostFloats(one.M)[off+i] || be.HostFloats(m.V)[i] != be.HostFloats(one.V)[off+i] {
							t.Fatalf("step %d rank %d: moments of parameter %d differ", step, r, off+i)
						}
					}
				}
			}
		})
	}
}

// ZeRO-1 keeps 1/Shards of the moments: the memory plan and the allocation say so.
func TestZeroShardsMoments(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	cfg := parallelConfig
	n := cfg.NumParams()
	for _, shards := range []int{1, 2, 3, 7} {
		m, err := gpt.NewParallel(be, cfg, 1, 4, gpt.Precision{}, gpt.Parallel{Shards: shards, Rank: shards - 1})
		if err != nil {
			t.Fatal(err)
		}
		s := gpt.ShardLen(n, shards)
		if s%gpt.NormBlock != 0 || s*shards < n || (s-gpt.NormBlock)*shards >= n {
			t.Fatalf("%d shards of %d for %d parameters", shards, s, n)
		}
		if m.M.Len() != s || m.PaddedParams().Len() != s*shards || m.Params.Len() != n {
			t.Fatalf("%d shards: M %d, padded params %d, params %d", shards, m.M.Len(), m.PaddedParams().Len(), m.Params.Len())
		}
		off, length, real := m.Shard()
		if off != (shards-1)*s || length != s || real != max(0, min(s, n-off)) {
			t.Fatalf("%d shards: last shard (%d, %d, %d)", shards, off, length, real)
		}
	}
	if _, err := gpt.NewParallel(be, cfg, 1, 4, gpt.Precision{}, gpt.Parallel{Shards: 2, Rank: 2}); err == nil {
		t.Fatal("rank 2 of 2 shards was accepted")
	}
}

// SetMomentsFrom with chunks that cut across shard boundaries keeps each rank's part of both
// moments, as SetMoments does (whole, and 3 shards of which the last is padded); out-of-order
// chunks and wrong counts are refused.
func TestSetMomentsFrom(t *testing.T) {
	be := cpu.New(1)
	n := parallelConfig.NumParams()
	m1, m2 := make([]float32, n), make([]float32, n)
	for i := range m1 {
		m1[i], m2[i] = float32(i), -float32(i)/2
	}
	both := func(a, b gpt.ParamsReader) func(s1, s2 func(int, []float32) error) error {
		return func(s1, s2 func(int, []float32) error) error {
			if err := a(s1); err != nil {
				return err
			}
			return b(s2)
		}
	}
	for _, par := range []gpt.Parallel{{}, {Shards: 3, Rank: 0}, {Shards: 3, Rank: 2}} {
		want, err := gpt.NewParallel(be, parallelConfig, 1, 4, gpt.Precision{}, par)
		if err != nil {
			t.Fatal(err)
		}
		got, err := gpt.NewParallel(be, parallelConfig, 1, 4, gpt.Precision{}, par)
		if err != nil {
			t.Fatal(err)
		}
		if err := want.SetMoments(m1, m2); err != nil {
			t.Fatal(err)
		}
		if err := got.SetMomentsFrom(both(chunked(m1, 1001), chunked(m2, 777))); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(download(be, got.M), download(be, want.M)) || !slices.Equal(download(be, got.V), download(be, want.V)) {
			t.Errorf("%+v: SetMomentsFrom's moments differ from SetMoments'", par)
		}
		for _, c := range []struct {
			name string
			read func(s1, s2 func(int, []float32) error) error
			want string
		}{
			{"short", both(chunked(m1, 1001), chunked(m2[:n-1], 777)), "count mismatch"},
			{"long", both(chunked(append(slices.Clone(m1), 0), 1001), chunked(m2, 777)), "count mismatch"},
			{"out of order", func(s1, _ func(int, []float32) error) error { return s1(3, m1[3:]) }, "out of order"},
		} {
			if err := got.SetMomentsFrom(c.read); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v %s: %v, want an error with %q", par, c.name, err, c.want)
			}
		}
	}
}
