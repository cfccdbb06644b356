package train

import (
	"fmt"
	"hash/crc32"
	"math"
	"time"
	"unsafe"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/dist"
	"github.com/gpt2go/gpt2go/gpt"
)

// Data-parallel training. The global batch of a step is W ranks x A micro-batches (GradAccum)
// of B x T tokens: micro-batch k of the step's W*A is the loader's k-th batch, and rank r takes
// k = r*A .. r*A+A-1, skipping the others' (data.Loader.Skip), so every rank's loader stays at the
// same global position and a checkpoint's loader state means the same thing for any W.
//
// The gradients are summed in rank order by package dist, and each micro-batch's gradient is
// computed apart and added (gpt.Parallel.SeparateAccum), with the loss scaled by 1/(W*A): W ranks
// with A = 1 give the bits of one process with A = W. With ZeRO-1 the gradient is
// reduce-scattered, each rank updates its shard of the weights with its shard of the moments,
// and the weights are all-gathered; the gradient norm is the in-order sum of block sums that
// the ranks exchange (gpt.GradBlockSums), the same bits again.
//
// Rank 0 alone writes the run directory (the lock, log, TensorBoard events, samples,
// checkpoints); validation is split over the ranks and its per-batch losses gathered.

// soloTimeout bounds how long ranks wait for rank 0 to write a checkpoint, a sample or a
// HellaSwag score alone (longer than a collective may take, still not forever).
const soloTimeout = 30 * time.Minute

// CheckGradExchange refuses 16-bit parameter gradients (--grad-precision bf16|fp16) in a run
// whose ranks exchange them: ranks > 1, or ZeRO-1 (whose collectives run even on one rank). The
// collectives sum fp32 buffers only, in rank order, which is what gives W ranks the bits of one
// process accumulating W micro-batches; see docs/data-parallel.md for why fp32 goes on the wire.
func CheckGradExchange(gradPrecision string, ranks int, zero bool) error {
	if gradPrecision == "" || gradPrecision == "fp32" {
		return nil
	}
	mode := "DDP"
	if zero {
		mode = "ZeRO-1"
	}
	plural := "s"
	if ranks == 1 {
		plural = ""
	}
	return fmt.Errorf("--grad-precision %s: data-parallel training (%d rank%s, %s) exchanges gradients in fp32 only, summed in rank order to keep the bits of one process; pass --grad-precision fp32 (the default; compute stays %s)",
		gradPrecision, ranks, plural, mode, gradPrecision)
}

// distributed says whether the trainer runs collectives: a job started by a launcher (even of
// one rank: its communicator is then exercised as with more), or ZeRO-1 (whose path is the same
// with one rank).
func (t *Trainer) distributed() bool { return t.opts.Comm != nil || t.opts.Zero }

// zeroStage is the run's --zero: 1 with ZeRO-1, else 0.
func (t *Trainer) zeroStage() int {
	if t.opts.Zero {
		return 1
	}
	return 0
}

// worldChange is the line a resume prints when the world size changes from oldW ranks (0:
// unknown, a checkpoint from before it was recorded) to newW, with oldA and newA micro-batches
// of batchTokens (B x T) per rank: the global batch before and after, and the --grad-accum that
// keeps it, when one does. "" when the world size is the same or unknown.
func worldChange(batchTokens, oldA, oldW, newA, newW int) string {
	if oldW == 0 || oldW == newW {
		return ""
	}
	before, after := batchTokens*oldA*oldW, batchTokens*newA*newW
	line := fmt.Sprintf("world size %d -> %d: global batch %d -> %d tokens (B x T x grad-accum x ranks)", oldW, newW, before, after)
	switch per := batchTokens * newW; {
	case before == after:
		return fmt.Sprintf("world size %d -> %d: global batch %d tokens as before (B x T x grad-accum x ranks)", oldW, newW, before)
	case before%per == 0:
		return fmt.Sprintf("%s; pass --grad-accum %d to keep it", line, before/per)
	}
	return fmt.Sprintf("%s; no --grad-accum keeps it on %d ranks", line, newW)
}

// rank0 says whether this process writes the run directory and the console.
func (t *Trainer) rank0() bool { return t.comm.Rank() == 0 }

// parallelLayout is the model's buffer layout for this run. ZeRO-1 in a mixed precision keeps
// each rank's shard of the fp32 master only, where the backend can all-gather the 16-bit compute
// copy as fp32 words (backend.WordViewer: the CPU and CUDA backends).
func (t *Trainer) parallelLayout() gpt.Parallel {
	par := gpt.Parallel{SeparateAccum: t.cfg.GradAccum > 1}
	if t.opts.Zero {
		_, words := t.be.(backend.WordViewer)
		par.Shards, par.Rank, par.ShardMaster = t.comm.Size(), t.comm.Rank(), words
	}
	return par
}

// gatherCompute all-gathers the compute copy of a sharded master (gpt.Trainable.MasterSharded),
// each rank's shard of which ParamsUpdatedAt wrote: 16-bit values moved as fp32 words, half the
// bytes of the fp32 weights on a GPU.
func (t *Trainer) gatherCompute() error {
	words := t.be.(backend.WordViewer).Words(t.w.PaddedCompute())
	return t.timed(func() error { return t.comm.AllGather(words) })
}

// gatherBuf is a small buffer for all-gathers of W equal parts, and its host copy.
type gatherBuf struct {
	buf  backend.Buf
	host []float32
}

// gatherFloats all-gathers one float32 value list per rank (each len(mine) long) and returns
// them concatenated in rank order; the values travel as they are (an all-gather copies).
func (t *Trainer) gatherFloats(mine []float32) ([]float32, error) {
	W, n := t.comm.Size(), len(mine)
	g, ok := t.gathers[n]
	if !ok {
		if t.gathers == nil {
			t.gathers = map[int]gatherBuf{}
		}
		g = gatherBuf{t.be.Alloc(W * n), make([]float32, W*n)}
		t.gathers[n] = g
	}
	t.be.Upload(t.be.View(g.buf, t.comm.Rank()*n, n), mine)
	if err := t.timed(func() error { return t.comm.AllGather(g.buf) }); err != nil {
		return nil, err
	}
	t.be.Download(g.host, g.buf)
	return g.host, nil
}

// stopRequested says whether any rank's ctx is done, so that all ranks stop at the same step.
func (t *Trainer) stopRequested(local bool) (bool, error) {
	if !t.distributed() {
		return local, nil
	}
	flag := float32(0)
	if local {
		flag = 1
	}
	all, err := t.gatherFloats([]float32{flag})
	if err != nil {
		return false, err
	}
	for _, f := range all {
		if f != 0 {
			return true, nil
		}
	}
	return false, nil
}

// sameParams checks that every rank holds the same parameters: the copy forward reads, and the
// fp32 master where it is another buffer. Each rank hashes its own (CRC-32C of the float32
// values) and the ranks compare the hashes, so that a rank that drifted (a collective that lost
// data, an op that is not deterministic) stops the job instead of training another model beside
// the others. It returns the hash. A collective: every rank calls it.
func (t *Trainer) sameParams() (uint32, error) {
	bufs := []backend.Buf{t.w.Compute()}
	if t.w.Params != t.w.Compute() && !t.w.MasterSharded() {
		bufs = append(bufs, t.w.Params)
	}
	crc := uint32(0)
	table := crc32.MakeTable(crc32.Castagnoli)
	for _, b := range bufs {
		t.eachChunk(b, func(chunk []float32) { crc = crc32.Update(crc, table, floatBytes(chunk)) })
	}
	if err := t.be.Sync(); err != nil {
		return 0, err
	}
	all, err := t.gatherFloats([]float32{float32(crc >> 16), float32(crc & 0xffff)}) // exact in float32
	if err != nil {
		return 0, err
	}
	for r := 0; r+1 < len(all); r += 2 {
		if other := uint32(all[r])<<16 | uint32(all[r+1]); other != crc {
			return 0, fmt.Errorf("after step %d rank %d holds other parameters than rank %d (CRC-32C %08x, %08x): the ranks no longer train one model; stopped before the checkpoint",
				t.state.Step, r/2, t.comm.Rank(), other, crc)
		}
	}
	return crc, nil
}

// eachChunk hands b's values to f in order: at once from host memory, else downloaded a chunk
// at a time into saveChunk.
func (t *Trainer) eachChunk(b backend.Buf, f func([]float32)) {
	if hm, ok := t.be.(backend.HostMemory); ok {
		f(hm.HostFloats(b))
		return
	}
	n := b.Len()
	if t.saveChunk == nil {
		t.saveChunk = make([]float32, min(n, saveChunkLen))
	}
	for off := 0; off < n; off += len(t.saveChunk) {
		part := t.saveChunk[:min(len(t.saveChunk), n-off)]
		t.be.Download(part, t.be.View(b, off, len(part)))
		f(part)
	}
}

// floatBytes is x's memory as bytes (little-endian float32s on every platform gpt2go runs on).
func floatBytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// reduceGrads sums the ranks' gradients (DDP: all of them everywhere; ZeRO-1: each rank's shard)
// and returns the global sum of their squares (gpt.Trainable.GradSquares' definition).
func (t *Trainer) reduceGrads() (float64, error) {
	m := t.w
	if !t.opts.Zero {
		if t.distributed() && !t.gradsReduced {
			if err := t.timed(func() error { return t.comm.AllReduce(m.Grads, 1) }); err != nil {
				return 0, err
			}
		}
		return m.GradSquares(), nil
	}
	if err := t.timed(func() error { return t.comm.ReduceScatter(m.PaddedGrads(), 1) }); err != nil {
		return 0, err
	}
	off, length, _ := m.Shard()
	if t.normSums == nil {
		t.normSums, t.normEnc = make([]float64, length/gpt.NormBlock), make([]float32, 3*length/gpt.NormBlock)
	}
	sums, enc := t.normSums, t.normEnc
	m.GradBlockSums(sums, off, length)
	// The float64 sums travel as three 21- or 22-bit integers each, which float32 holds exactly.
	for i, s := range sums {
		b := math.Float64bits(s)
		enc[3*i], enc[3*i+1], enc[3*i+2] = float32(b>>42), float32(b>>21&(1<<21-1)), float32(b&(1<<21-1))
	}
	all, err := t.gatherFloats(enc)
	if err != nil {
		return 0, err
	}
	if len(t.normAll) != len(all)/3 {
		t.normAll = make([]float64, len(all)/3)
	}
	for i := range t.normAll {
		t.normAll[i] = math.Float64frombits(uint64(all[3*i])<<42 | uint64(all[3*i+1])<<21 | uint64(all[3*i+2]))
	}
	return backend.SumBlockSums(t.normAll), nil
}

// overlapGrads says whether DDP all-reduces the gradient layer by layer during backward
// (Options.OverlapGrads): with a communicator that runs collectives beside the backend's ops
// (dist.Overlapper: NCCL on a second stream), or with a host-memory backend, where a goroutine
// of its own waits in each collective (MPI) while backward computes. ZeRO-1's reduce-scatter
// splits the flat gradient into shards that layers do not follow.
func (t *Trainer) overlapGrads() bool {
	if !t.opts.OverlapGrads || !t.distributed() || t.opts.Zero {
		return false
	}
	_, host := t.be.(backend.HostMemory)
	_, beside := t.comm.(dist.Overlapper)
	return host || beside
}

// backward runs this rank's backward pass of a micro-batch (first: the step's first, into zeroed
// gradients; last: the step's last). With overlapGrads, the last one streams the gradient to a
// goroutine that all-reduces each piece as backward hands it over, in the order backward makes
// them; the step then waits for the last piece. Each element is summed over the ranks in rank
// order as in the one all-reduce after backward, so the bits are the same.
func (t *Trainer) backward(lossScale float32, first, last bool) error {
	if !last || !t.overlapGrads() {
		return t.task.backward(lossScale, first)
	}
	if ov, ok := t.comm.(dist.Overlapper); ok {
		return t.backwardBeside(ov, lossScale, first)
	}
	queue, done := make(chan []backend.Buf, 256), make(chan error, 1)
	var busy time.Duration
	go func() {
		var err error
		for views := range queue {
			start := time.Now()
			for _, v := range views {
				if err == nil {
					err = t.comm.AllReduce(v, 1)
				}
			}
			busy += time.Since(start)
		}
		done <- err
	}()
	t.w.StreamGrads(func(views []backend.Buf) { queue <- views })
	err := t.task.backward(lossScale, first)
	close(queue)
	start := time.Now()
	cerr := <-done
	t.commWait += time.Since(start)
	t.commTime += busy
	t.gradsReduced = true
	if err != nil {
		return err
	}
	return cerr
}

// backwardBeside is backward with each piece of the gradient all-reduced beside the ops that
// follow it (dist.Overlapper): queued at once, on the GPU while backward goes on, and joined
// before the ops after backward. The step's communication time is the host's in those calls;
// the GPU's time in them is not the host's to measure.
func (t *Trainer) backwardBeside(ov dist.Overlapper, lossScale float32, first bool) error {
	var cerr error
	t.w.StreamGrads(func(views []backend.Buf) {
		if cerr == nil {
			cerr = t.timed(func() error { return ov.AllReduceBeside(views) })
		}
	})
	err := t.task.backward(lossScale, first)
	if jerr := t.timed(ov.JoinBeside); cerr == nil {
		cerr = jerr
	}
	t.gradsReduced = true
	if err != nil {
		return err
	}
	return cerr
}

// update applies AdamW: the whole model, or (ZeRO-1) this rank's shard, then all ranks' shards
// gathered.
func (t *Trainer) update(opt gpt.AdamWConfig, lr float64, step int, gradScale float64) error {
	m := t.w
	if !t.opts.Zero {
		m.Update(opt, lr, step, gradScale)
		return nil
	}
	m.UpdateShard(opt, lr, step, gradScale)
	if m.MasterSharded() {
		m.ParamsUpdatedAt(step) // this rank's shard of the compute copy
		return t.gatherCompute()
	}
	if err := t.timed(func() error { return t.comm.AllGather(m.PaddedParams()) }); err != nil {
		return err
	}
	m.ParamsUpdatedAt(step)
	return nil
}

// ckptArray is one of a checkpoint's three arrays over all parameters (the fp32 weights, both
// AdamW moments): a buffer of the model's, or values gathered from the ranks' shards into host
// memory.
type ckptArray struct {
	buf  backend.Buf
	host []float32
}

// checkpointArrays returns the three arrays of a checkpoint: the model's own buffers where
// every rank holds them whole, else (ZeRO-1's moments, a sharded master) the ranks' shards
// gathered a chunk at a time into host memory on rank 0 (nil elsewhere), so that no rank holds
// a whole moment or master on the backend, not even while a checkpoint is written. A collective:
// every rank calls it.
func (t *Trainer) checkpointArrays() ([3]ckptArray, error) {
	m := t.w
	arrays := [3]ckptArray{{buf: m.Params}, {buf: m.M}, {buf: m.V}}
	if !t.opts.Zero {
		return arrays, nil
	}
	for i := range arrays {
		if i == 0 && !m.MasterSharded() {
			continue // the whole fp32 weights, all-gathered at every step
		}
		host, err := t.gatherShard(arrays[i].buf)
		if err != nil {
			return arrays, err
		}
		arrays[i] = ckptArray{host: host}
	}
	return arrays, nil
}

// gatherShard returns on rank 0 the whole of a buffer sharded like the gradients (each rank's
// shard, ShardLen elements, in rank order; the first NumParams of them), gathered saveChunkLen
// values per rank at a time through a buffer of W times that; nil on the other ranks.
func (t *Trainer) gatherShard(shard backend.Buf) ([]float32, error) {
	W, r, s := t.comm.Size(), t.comm.Rank(), shard.Len()
	c := min(s, saveChunkLen)
	if t.shardChunks == nil || t.shardChunks.Len() != W*c {
		t.shardChunks = t.be.Alloc(W * c)
	}
	var whole []float32
	if r == 0 {
		whole = make([]float32, W*s)
	}
	for k := 0; k < s; k += c {
		n := min(c, s-k)
		t.be.Convert(t.be.View(t.shardChunks, r*c, n), t.be.View(shard, k, n), n, 0) // a copy
		if err := t.comm.AllGather(t.shardChunks); err != nil {
			return nil, err
		}
		if r == 0 {
			for q := range W {
				t.be.Download(whole[q*s+k:q*s+k+n], t.be.View(t.shardChunks, q*c, n))
			}
		}
	}
	if err := t.be.Sync(); err != nil {
		return nil, err
	}
	return whole[:min(len(whole), t.w.Grads.Len())], nil
}

// timed runs a collective, adding its time to the step's communication time (logged as
// comm_ms: the time this rank spends in collectives, waiting for slower ranks included).
func (t *Trainer) timed(f func() error) error {
	start := time.Now()
	err := f()
	t.commTime += time.Since(start)
	return err
}

// solo runs f on rank 0 while the other ranks wait (up to soloTimeout); f's error is rank 0's.
func (t *Trainer) solo(f func() error) error {
	var err error
	if t.rank0() {
		err = f()
	}
	if !t.distributed() {
		return err
	}
	if berr := dist.BarrierWithin(t.comm, soloTimeout); berr != nil && err == nil {
		err = berr
	}
	return err
}

// evalSplit evaluates the EvalBatches validation batches split over the ranks in contiguous
// parts and returns every batch's figures in batch order, as one process makes them.
func (t *Trainer) evalSplit() ([]float32, error) {
	W, r, n, k := t.comm.Size(), t.comm.Rank(), t.cfg.EvalBatches, t.task.figures()
	off, count := dist.Shard(n, W, r)
	t.val.Reset()
	for range off {
		if err := t.val.Skip(); err != nil {
			return nil, err
		}
	}
	mine := make([]float32, dist.ShardLen(n, W)*k)
	if err := evalFigures(t.task, t.val, off, mine[:count*k]); err != nil {
		return nil, err
	}
	all, err := t.gatherFloats(mine)
	if err != nil {
		return nil, err
	}
	return all[:n*k], nil // the padding of the last shards is past n
}

// worldLine is the training log's line on the ranks and the global batch.
func (t *Trainer) worldLine() string {
	cfg, W := t.cfg, t.comm.Size()
	mode := "DDP"
	if t.opts.Zero {
		mode = "ZeRO-1"
	} else if t.overlapGrads() {
		mode = "DDP, all-reduce per layer during backward"
	}
	return fmt.Sprintf("data parallel: %d ranks (%s); global batch %d x %d x %d accum x %d ranks = %d tokens",
		W, mode, cfg.BatchSize, cfg.SeqLen, cfg.GradAccum, W, cfg.BatchSize*cfg.SeqLen*cfg.GradAccum*W)
}
