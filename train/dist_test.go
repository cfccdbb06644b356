package train

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/dist"
)

// besideComm is a one-rank communicator that runs all-reduces "beside" the ops (dist.Overlapper)
// the way the CPU can. It takes each handed-over buffer's values and leaves NaN in their place,
// as a buffer NCCL is summing on a second stream holds nothing an op may use: an op that reads a
// piece before JoinBeside (the grad norm, AdamW) then ends the run on a non-finite gradient, and
// one that writes it is caught at JoinBeside, which puts the values back and sums them (over one
// rank: as they are).
type besideComm struct {
	*dist.Single
	be              backend.Backend
	pending         []backend.Buf
	kept            [][]float32
	elems, pieces   int
	joins, reduces  int
	overwritten     string
	perStepElements []int
}

func (c *besideComm) AllReduce(buf backend.Buf, scale float32) error {
	c.reduces++
	return c.Single.AllReduce(buf, scale)
}

// inFlight is what a handed-over buffer holds until JoinBeside.
var inFlight = float32(math.NaN())

func (c *besideComm) AllReduceBeside(bufs []backend.Buf) error {
	c.pieces++
	for _, b := range bufs {
		host := make([]float32, b.Len())
		c.be.Download(host, b)
		c.pending, c.kept = append(c.pending, b), append(c.kept, host)
		c.elems += b.Len()
		nan := make([]float32, b.Len())
		for i := range nan {
			nan[i] = inFlight
		}
		c.be.Upload(b, nan)
	}
	return nil
}

func (c *besideComm) JoinBeside() error {
	c.joins++
	for i, b := range c.pending {
		now := make([]float32, b.Len())
		c.be.Download(now, b)
		for j := range now {
			if math.Float32bits(now[j]) != math.Float32bits(inFlight) && c.overwritten == "" {
				c.overwritten = "a handed-over gradient was written before JoinBeside"
			}
		}
		c.be.Upload(b, c.kept[i])
		if err := c.Single.AllReduce(b, 1); err != nil {
			return err
		}
	}
	c.perStepElements = append(c.perStepElements, c.elems)
	c.pending, c.kept, c.elems = nil, nil, 0
	return nil
}

// With a communicator that all-reduces beside the ops (NCCL's second stream; here a CPU stand-in
// that checks the contract), DDP hands every gradient element over exactly once per step, from
// the last micro-batch's backward, layer by layer, joins once, never all-reduces the whole
// gradient, and trains to the same bits as the whole-gradient all-reduce after backward.
func TestGradsReducedBesideBackward(t *testing.T) {
	cfg := smallConfig(writeDataset(t, 50))
	cfg.GradAccum, cfg.Steps = 2, 4
	be := cpu.New(2)
	dirs := map[bool]string{}
	var beside *besideComm
	for _, overlap := range []bool{false, true} {
		dirs[overlap] = filepath.Join(t.TempDir(), "run")
		var comm dist.Comm = dist.NewSingle(be)
		if overlap {
			beside = &besideComm{Single: dist.NewSingle(be), be: be}
			comm = beside
		}
		var out bytes.Buffer
		if _, err := runTrain(t, Options{Config: cfg, RunDir: dirs[overlap], Backend: be, Comm: comm, OverlapGrads: overlap, Out: &out}); err != nil {
			t.Fatal(err)
		}
		if on := strings.Contains(out.String(), "all-reduce per layer during backward"); on != overlap {
			t.Errorf("overlap %v: the log says per-layer all-reduce is on: %v\n%s", overlap, on, out.String())
		}
	}
	n := cfg.Model.NumParams()
	if beside.joins != cfg.Steps || beside.reduces != 0 || beside.overwritten != "" {
		t.Errorf("%d joins (want %d), %d whole all-reduces (want 0), %s", beside.joins, cfg.Steps, beside.reduces, beside.overwritten)
	}
	if want := cfg.Steps * (cfg.Model.NumLayers + 1); beside.pieces != want {
		t.Errorf("%d pieces handed over, want %d (each layer, then the rest, once per step)", beside.pieces, want)
	}
	for step, e := range beside.perStepElements {
		if e != n {
			t.Errorf("step %d: %d gradient elements handed over, want %d", step+1, e, n)
		}
	}
	want, got := logEntries(t, dirs[false]), logEntries(t, dirs[true])
	for step, w := range want {
		for k, v := range w {
			if k != "ms" && k != "tok_s" && !strings.HasPrefix(k, "comm") && !strings.HasPrefix(k, "mfu") && got[step][k] != v {
				t.Errorf("step %d: %s = %v beside backward, %v after it", step, k, got[step][k], v)
			}
		}
	}
}

// A resume on another world size says how the global batch changes and which --grad-accum
// keeps it; nothing when the world size is the same or was not recorded (older checkpoints).
func TestWorldChange(t *testing.T) {
	for _, tc := range []struct {
		oldA, oldW, newA, newW int
		want                   string
	}{
		{2, 2, 2, 1, "world size 2 -> 1: global batch 2048 -> 1024 tokens (B x T x grad-accum x ranks); pass --grad-accum 4 to keep it"},
		{2, 1, 2, 2, "world size 1 -> 2: global batch 1024 -> 2048 tokens (B x T x grad-accum x ranks); pass --grad-accum 1 to keep it"},
		{1, 2, 2, 1, "world size 2 -> 1: global batch 1024 tokens as before (B x T x grad-accum x ranks)"},
		{1, 2, 1, 3, "world size 2 -> 3: global batch 1024 -> 1536 tokens (B x T x grad-accum x ranks); no --grad-accum keeps it on 3 ranks"},
		{1, 1, 2, 4, "world size 1 -> 4: global batch 512 -> 4096 tokens (B x T x grad-accum x ranks); no --grad-accum keeps it on 4 ranks"},
		{2, 2, 4, 2, ""},
		{2, 0, 2, 2, ""}, // a checkpoint from before the world size was recorded
	} {
		if got := worldChange(8*64, tc.oldA, tc.oldW, tc.newA, tc.newW); got != tc.want {
			t.Errorf("A %d, W %d -> A %d, W %d: %q, want %q", tc.oldA, tc.oldW, tc.newA, tc.newW, got, tc.want)
		}
	}
}

// deviceWords is deviceLike (no host memory: checkpoints stream) that can all-gather a 16-bit
// buffer as fp32 words, as the CUDA backend can (backend.WordViewer), and sums the gradient norm
// in blocks as GradStats does (backend.BlockSumSquarer), so that ZeRO-1's norm is the plain run's.
type deviceWords struct{ deviceLike }

func (d deviceWords) Words(b backend.Buf) backend.Buf { return d.Backend.(*cpu.Backend).Words(b) }
func (d deviceWords) SumSquaresBlocks(dst []float64, x backend.Buf, N, block int) {
	d.Backend.(*cpu.Backend).SumSquaresBlocks(dst, x, N, block)
}

// ZeRO-1 on one rank runs the sharded layout, in bf16 with stochastic rounding a sharded fp32
// master whose compute copy is all-gathered, and checkpoints gathered from the shards 1000 values
// at a time (in host memory, and streamed from a backend without it): stopped and resumed, it
// gives the bits of a plain run in the log and in every weight and moment of the checkpoint.
func TestZeroOneRankMatchesPlainRun(t *testing.T) {
	defer func(n int) { saveChunkLen = n }(saveChunkLen)
	saveChunkLen = 1000
	cfg := smallConfig(writeDataset(t, 50))
	cfg.Precision, cfg.StochasticRounding, cfg.Steps = "bf16", true, 8
	for name, be := range map[string]backend.Backend{"host memory": cpu.New(2), "streamed": deviceWords{deviceLike{cpu.New(2)}}} {
		t.Run(name, func(t *testing.T) {
			plain, zero := filepath.Join(t.TempDir(), "plain"), filepath.Join(t.TempDir(), "zero")
			if _, err := runTrain(t, Options{Config: cfg, RunDir: plain, Backend: be}); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if _, err := runTrain(t, Options{Config: cfg, RunDir: zero, Backend: be, Zero: true, StopAt: 5, Out: &out}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "data parallel: 1 ranks (ZeRO-1)") {
				t.Fatalf("not a ZeRO-1 run:\n%s", out.String())
			}
			if _, err := runTrain(t, Options{Config: cfg, RunDir: zero, Backend: be, Zero: true, Resume: true}); err != nil {
				t.Fatal(err)
			}
			want, got := logEntries(t, plain), logEntries(t, zero)
			for step, w := range want {
				for _, k := range []string{"loss", "val_loss", "grad_norm"} {
					if v, ok := w[k]; ok && got[step][k] != v { // (the stop at step 5 evaluated)
						t.Errorf("step %d: %s %v, plain %v", step, k, got[step][k], v)
					}
				}
			}
			a, err := checkpoint.Load(checkpoint.Path(plain, cfg.Steps))
			if err != nil {
				t.Fatal(err)
			}
			b, err := checkpoint.Load(checkpoint.Path(zero, cfg.Steps))
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range [][2][]float32{{a.Params, b.Params}, {a.M, b.M}, {a.V, b.V}} {
				if len(p[0]) != len(p[1]) {
					t.Fatalf("array %d: %d values, plain %d", i, len(p[1]), len(p[0]))
				}
				for j := range p[0] {
					if math.Float32bits(p[0][j]) != math.Float32bits(p[1][j]) {
						t.Fatalf("array %d element %d: %v, plain %v", i, j, p[1][j], p[0][j])
					}
				}
			}
		})
	}
}
