package gpt

import (
	"fmt"

	"github.com/gpt2go/gpt2go/backend"
)

// NormBlock is the block size of the gradient norm's partial sums (backend.BlockSumSquarer) and
// the unit that ZeRO-1 shards are rounded up to, so that every block lies in one rank's shard.
const NormBlock = 1 << 12

// Parallel is the model's buffer layout for data-parallel training over ranks whose gradients
// must sum to the bits one process gets with gradient accumulation (package dist sums in rank
// order, as micro-batches are accumulated).
type Parallel struct {
	// SeparateAccum makes BackwardAccumulate available: a micro-batch's gradient is computed
	// into a zeroed scratch buffer and then added to Grads (acc = acc + g), rather than
	// accumulated into Grads op by op. k micro-batches in one process then give the bits of k
	// ranks' sum of one micro-batch each. It costs one more gradient-sized buffer.
	SeparateAccum bool
	// Shards > 0 lays the buffers out for ZeRO-1 over Shards ranks, this being rank Rank: Params
	// and Grads are views of flat buffers padded to Shards equal shards of ShardLen elements (a
	// multiple of NormBlock; the padding stays zero), and M and V hold only this rank's shard,
	// which UpdateShard updates.
	Shards, Rank int
	// ShardMaster, with Shards in a mixed plan, keeps only this rank's shard of the fp32 master
	// weights too (MasterSharded): Params is that shard (ShardLen elements, not a view of all
	// parameters), the compute copy is padded like Grads (PaddedCompute), and UpdateShard,
	// SetParams and ParamsUpdatedAt write this rank's shard of both; the caller all-gathers
	// PaddedCompute to give every rank the whole compute copy. In fp32, whose Params is the
	// compute copy, it changes nothing.
	ShardMaster bool
}

func (p Parallel) validate() error {
	if p.Shards < 0 || (p.Shards > 0 && (p.Rank < 0 || p.Rank >= p.Shards)) || (p.Shards == 0 && p.Rank != 0) {
		return fmt.Errorf("parallel layout: rank %d of %d shards", p.Rank, p.Shards)
	}
	if p.ShardMaster && p.Shards == 0 {
		return fmt.Errorf("parallel layout: a sharded master needs ZeRO-1 shards")
	}
	return nil
}

// ShardLen is the length of each ZeRO-1 shard of n parameters over shards ranks: ceil(n/shards)
// rounded up to a multiple of NormBlock.
func ShardLen(n, shards int) int {
	s := (n + shards - 1) / shards
	return (s + NormBlock - 1) / NormBlock * NormBlock
}

// allocFlat allocates the parameters (the fp32 master and, in a mixed plan, the compute copy),
// gradients and moments for n parameters in m.par's layout.
func (m *Trainable) allocFlat(n int) {
	be, par := m.be, m.par
	if par.Shards == 0 {
		m.Params, m.Grads, m.M, m.V = be.Alloc(n), m.alloc(n, m.prec.Grads), be.Alloc(n), be.Alloc(n)
		m.paramsFlat, m.gradsFlat = m.Params, m.Grads
		m.compute = m.Params
		if m.prec.Mixed() {
			m.compute = be.AllocDType(n, m.prec.Compute)
		}
		return
	}
	s := ShardLen(n, par.Shards)
	m.gradsFlat = m.alloc(s*par.Shards, m.prec.Grads)
	m.Grads = be.View(m.gradsFlat, 0, n)
	m.M, m.V = be.Alloc(s), be.Alloc(s)
	switch {
	case m.MasterSharded():
		m.Params = be.Alloc(s)
		m.computeFlat = be.AllocDType(s*par.Shards, m.prec.Compute)
		m.compute = be.View(m.computeFlat, 0, n)
	default:
		m.paramsFlat = be.Alloc(s * par.Shards)
		m.Params = be.View(m.paramsFlat, 0, n)
		m.compute = m.Params
		if m.prec.Mixed() {
			m.compute = be.AllocDType(n, m.prec.Compute)
		}
	}
}

// MasterSharded says whether this rank keeps only its shard of the fp32 master weights
// (Parallel.ShardMaster in a mixed plan).
func (m *Trainable) MasterSharded() bool {
	return m.par.ShardMaster && m.par.Shards > 0 && m.prec.Mixed() && !m.frozen
}

// Parallel is the model's data-parallel layout.
func (m *Trainable) Parallel() Parallel { return m.par }

// PaddedParams and PaddedGrads are the whole flat buffers behind Params and Grads, padded (with
// ZeRO-1 shards) to a length that splits into equal shards; the padding is zero. With a sharded
// master there is no PaddedParams (nil): PaddedCompute is what the ranks all-gather.
func (m *Trainable) PaddedParams() backend.Buf { return m.paramsFlat }
func (m *Trainable) PaddedGrads() backend.Buf  { return m.gradsFlat }

// PaddedCompute is the whole compute copy behind Compute with a sharded master (MasterSharded),
// padded like PaddedGrads; nil otherwise.
func (m *Trainable) PaddedCompute() backend.Buf { return m.computeFlat }

// Shard returns the first element of this rank's ZeRO-1 shard in the padded buffers, its
// length, and how many of its elements are parameters (the rest is padding). Without shards it is
// all parameters.
func (m *Trainable) Shard() (off, length, real int) {
	n := m.Grads.Len()
	if m.par.Shards == 0 {
		return 0, n, n
	}
	s := ShardLen(n, m.par.Shards)
	off = m.par.Rank * s
	return off, s, max(0, min(s, n-off))
}

// BackwardAccumulate adds to Grads the gradient of lossScale * (mean loss of the last Forward),
// computed on its own into zeroed scratch first (Parallel.SeparateAccum). Call Backward for a
// step's first micro-batch (into zeroed Grads) and this for the others.
func (m *Model) BackwardAccumulate(lossScale float32) error {
	return m.Accumulate(func() error { return m.backward(lossScale, &m.scratch) })
}

func (m *Trainable) numBlocks(n int) int { return (n + NormBlock - 1) / NormBlock }

// GradBlockSums writes into dst the sums of squares of the gradient's blocks of NormBlock
// elements that cover [off, off+count) of the padded gradient buffer (off a multiple of
// NormBlock, len(dst) = ceil(count/NormBlock)): one call on a backend.BlockSumSquarer, one
// SumSquares per block elsewhere.
func (m *Trainable) GradBlockSums(dst []float64, off, count int) {
	if off%NormBlock != 0 || len(dst) != m.numBlocks(count) {
		panic(fmt.Sprintf("gpt.GradBlockSums: %d sums for [%d, %d)", len(dst), off, off+count))
	}
	if count == 0 {
		return
	}
	x := m.Grads // GradNorm's case, without making a view each step
	if off != 0 || count != m.Grads.Len() {
		x = m.be.View(m.gradsFlat, off, count)
	}
	if bs := backend.BlockSums(m.be); bs != nil {
		bs.SumSquaresBlocks(dst, x, count, NormBlock)
		return
	}
	for i := range dst {
		lo := i * NormBlock
		dst[i] = m.be.SumSquares(m.be.View(x, lo, min(NormBlock, count-lo)), min(NormBlock, count-lo))
	}
}

// UpdateShard is Update for ZeRO-1: AdamW on this rank's shard of the parameters only, from the
// shard's summed gradients and the rank's moments (each element updated exactly as Update
// would). The other ranks' parts of Params are stale until the caller all-gathers PaddedParams
// and calls ParamsUpdatedAt(step); with a sharded master, the caller calls ParamsUpdatedAt(step)
// (this rank's shard of the compute copy) and all-gathers PaddedCompute.
func (m *Trainable) UpdateShard(opt AdamWConfig, lr float64, step int, gradScale float64) {
	defer backend.Scope(m.be, "optimizer")()
	off, _, real := m.Shard()
	end := off + real
	master := 0 // where Params starts in the flat layout
	if m.MasterSharded() {
		master = off
	}
	for i, s := range m.specs {
		lo, hi := max(off, m.offsets[i]), min(end, m.offsets[i]+s.Size())
		if lo >= hi {
			continue
		}
		be, n := m.be, hi-lo
		be.AdamW(be.View(m.Params, lo-master, n), be.View(m.Grads, lo, n), be.View(m.M, lo-off, n), be.View(m.V, lo-off, n), n,
			m.adamWParams(opt, s, lr, step, gradScale))
	}
}

// SetMoments uploads both AdamW moments from host arrays over all parameters (a checkpoint's),
// keeping this rank's shard only with ZeRO-1.
func (m *Trainable) SetMoments(m1, m2 []float32) error {
	n := m.Grads.Len()
	if len(m1) != n || len(m2) != n {
		return fmt.Errorf("moment count mismatch: have %d and %d, model needs %d", len(m1), len(m2), n)
	}
	return m.SetMomentsFrom(func(s1, s2 func(int, []float32) error) error {
		if err := HostParams(m1)(s1); err != nil {
			return err
		}
		return HostParams(m2)(s2)
	})
}

// SetMomentsFrom is SetMoments for moments that read hands over a chunk at a time: all of the
// first moment to its first sink, then all of the second to the other (as a checkpoint's
// ReadMoments does), each in consecutive chunks over all parameters; with ZeRO-1 this rank
// keeps the parts in its shard. On an error the moments are partly written.
func (m *Trainable) SetMomentsFrom(read func(m1, m2 func(off int, chunk []float32) error) error) error {
	n := m.Grads.Len()
	off, _, real := m.Shard()
	orders := [2]ChunkOrder{{What: "moment", N: n}, {What: "moment", N: n}}
	sink := func(k int, dst backend.Buf) func(int, []float32) error {
		return func(at int, chunk []float32) error {
			if err := orders[k].Take(at, len(chunk)); err != nil {
				return err
			}
			if lo, hi := max(at, off), min(at+len(chunk), off+real); lo < hi {
				m.be.Upload(m.be.View(dst, lo-off, hi-lo), chunk[lo-at:hi-at])
			}
			return nil
		}
	}
	if err := read(sink(0, m.M), sink(1, m.V)); err != nil {
		return err
	}
	if err := orders[0].Done(); err != nil {
		return err
	}
	return orders[1].Done()
}
