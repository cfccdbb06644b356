package bert_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/bert"
	"github.com/gpt2go/gpt2go/gpt"
)

func TestPresets(t *testing.T) {
	for name, want := range map[string][3]int{
		"bert-tiny": {2, 128, 2}, "bert-mini": {4, 256, 4}, "bert-small": {4, 512, 8}, "bert-base": {12, 768, 12},
	} {
		c, err := bert.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := [3]int{c.NumLayers, c.Channels, c.NumHeads}; got != want {
			t.Errorf("%s: (L, C, NH) = %v, want %v", name, got, want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// bert-base with the unpadded vocabulary has Hugging Face BertForMaskedLM's 109,514,298
	// parameters (no pooler): the same tensors, counted independently.
	c, _ := bert.Preset("bert-base")
	c.PaddedVocabSize = c.VocabSize
	if n := c.NumParams(); n != 109514298 {
		t.Errorf("bert-base has %d parameters, want 109514298", n)
	}
	if _, err := bert.Preset("bert-huge"); err == nil || !strings.Contains(err.Error(), "bert-tiny") {
		t.Errorf("unknown preset: error %v should list the presets", err)
	}
}

func TestParamSpecsFollowTheOptions(t *testing.T) {
	names := func(c bert.Config) []string {
		var out []string
		for _, s := range c.ParamSpecs() {
			out = append(out, s.Name)
		}
		return out
	}
	c := bert.Config{BlockSize: 8, VocabSize: 10, PaddedVocabSize: 16, NumLayers: 1, NumHeads: 1, Channels: 4, TypeVocabSize: 2}
	if n := names(c); !slices.Contains(n, "wtype") || slices.Contains(n, "lnfw") {
		t.Errorf("post-LN with token types: %v", n)
	}
	c.TypeVocabSize, c.PreLN = 0, true
	if n := names(c); slices.Contains(n, "wtype") || !slices.Contains(n, "lnfw") {
		t.Errorf("PreLN without token types: %v", n)
	}
	weights := []string{"wte", "wpe", "wtype", "qkvw", "attprojw", "fcw", "fcprojw", "headw"}
	for _, s := range c.ParamSpecs() {
		if s.Decay != slices.Contains(weights, s.Name) {
			t.Errorf("%s %v: decay %v; weight decay belongs to the 2-D weights only", s.Name, s.Shape, s.Decay)
		}
	}
}

// Init is BERT's: weights N(0, 0.02), LayerNorm weights 1, biases 0, padded vocabulary rows 0.
func TestInit(t *testing.T) {
	cfg := bert.Config{BlockSize: 64, VocabSize: 1000, PaddedVocabSize: 1024, NumLayers: 2, NumHeads: 4, Channels: 64, TypeVocabSize: 2, PreLN: true}
	be := cpu.New(1)
	m, err := bert.New(be, cfg, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(5)
	params := download(be, m.Params)
	for i, s := range m.Specs() {
		x := params[m.Offsets()[i] : m.Offsets()[i]+s.Size()]
		if s.Name == "wte" {
			if slices.ContainsFunc(x[cfg.VocabSize*cfg.Channels:], func(v float32) bool { return v != 0 }) {
				t.Error("padded wte rows are not zero")
			}
			x = x[:cfg.VocabSize*cfg.Channels]
		}
		var sum, sq float64
		for _, v := range x {
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		mean, std := sum/float64(len(x)), math.Sqrt(sq/float64(len(x)))
		switch {
		case s.Decay:
			if math.Abs(mean) > 0.002 || math.Abs(std-0.02) > 0.002 {
				t.Errorf("%s: mean %.4f, std %.4f, want N(0, 0.02)", s.Name, mean, std)
			}
		case strings.HasPrefix(s.Name, "ln") && strings.HasSuffix(s.Name, "w") || s.Name == "embedlnw" || s.Name == "headlnw":
			if mean != 1 || std != 1 {
				t.Errorf("%s: mean %g, rms %g, want all ones", s.Name, mean, std)
			}
		default:
			if sq != 0 {
				t.Errorf("%s: not zero", s.Name)
			}
		}
	}
	m2, _ := bert.New(be, cfg, 1, 8)
	m2.Init(5)
	if !slices.Equal(download(be, m2.Params), params) {
		t.Error("Init with the same seed gave different parameters")
	}
}

// Bad batches are refused with one-line errors; a batch with nothing masked has no loss and adds
// no gradient.
func TestBatchErrors(t *testing.T) {
	cfg := bert.Config{BlockSize: 8, VocabSize: 20, PaddedVocabSize: 32, NumLayers: 1, NumHeads: 2, Channels: 8, TypeVocabSize: 2}
	be := cpu.New(1)
	m, err := bert.New(be, cfg, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(1)
	ok := func() bert.Batch {
		return bert.Batch{B: 2, T: 4, Inputs: []int32{1, 2, 3, 4, 5, 6, 7, 8}, Targets: []int32{-1, 9, -1, -1, -1, -1, 7, -1}}
	}
	for name, change := range map[string]func(b *bert.Batch){
		"token outside the vocabulary": func(b *bert.Batch) { b.Inputs[3] = 20 },
		"target below -1":              func(b *bert.Batch) { b.Targets[0] = -2 },
		"short inputs":                 func(b *bert.Batch) { b.Inputs = b.Inputs[:7] },
		"over capacity":                func(b *bert.Batch) { b.B, b.T = 1, 8 },
		"token type 2":                 func(b *bert.Batch) { b.TokenTypes = []int32{0, 0, 0, 0, 1, 1, 2, 1} },
		"length 0":                     func(b *bert.Batch) { b.Lengths = []int32{4, 0} },
		"length past T":                func(b *bert.Batch) { b.Lengths = []int32{5, 4} },
		"target at a padded position":  func(b *bert.Batch) { b.Lengths = []int32{4, 2} },
	} {
		b := ok()
		change(&b)
		_, err := m.ForwardBatch(b)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", name, err)
		}
	}
	if err := m.Backward(1); err == nil {
		t.Error("Backward after a refused Forward was accepted")
	}
	none := ok()
	none.Targets = []int32{-1, -1, -1, -1, -1, -1, -1, -1}
	if loss, err := m.ForwardBatch(none); err != nil || loss != 0 {
		t.Errorf("nothing masked: loss %v, error %v; want 0, nil", loss, err)
	}
	m.ZeroGrad()
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	if n := m.GradNorm(); n != 0 {
		t.Errorf("nothing masked: gradient norm %g, want 0", n)
	}
	if _, err := m.ForwardBatch(ok()); err != nil {
		t.Fatal(err)
	}
	if err := m.LogitsRow(make([]float32, 20), 0, 0); err == nil {
		t.Error("LogitsRow after a Forward with targets (masked rows only) was accepted")
	}
	if c, n := m.MaskedAccuracy(); n != 2 || c < 0 || c > 2 {
		t.Errorf("MaskedAccuracy = %d of %d, want of 2", c, n)
	}
}

// counting records what a model allocates.
type counting struct {
	backend.Backend
	bytes int64
}

func (c *counting) Alloc(n int) backend.Buf { c.bytes += 4 * int64(n); return c.Backend.Alloc(n) }
func (c *counting) AllocInt32(n int) backend.Buf {
	c.bytes += 4 * int64(n)
	return c.Backend.AllocInt32(n)
}

func TestMemoryPlanMatchesAllocations(t *testing.T) {
	for _, cfg := range []bert.Config{
		{BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64, NumLayers: 2, NumHeads: 2, Channels: 16},
		{BlockSize: 32, VocabSize: 67, PaddedVocabSize: 80, NumLayers: 3, NumHeads: 3, Channels: 24, TypeVocabSize: 2, PreLN: true},
	} {
		for _, bt := range [][2]int{{1, 1}, {3, 11}} {
			be := &counting{Backend: cpu.New(1)}
			if _, err := bert.New(be, cfg, bt[0], bt[1]); err != nil {
				t.Fatal(err)
			}
			if got := gpt.PlanBytes(cfg.MemoryPlan(bt[0], bt[1])); got != be.bytes {
				t.Errorf("%+v B=%d T=%d: plan says %d bytes, New allocated %d", cfg, bt[0], bt[1], got, be.bytes)
			}
			be = &counting{Backend: cpu.New(1)}
			if _, err := bert.NewInference(be, cfg, bt[0], bt[1], gpt.Precision{}); err != nil {
				t.Fatal(err)
			}
			if got := gpt.PlanBytes(cfg.InferenceMemoryPlan(bt[0], bt[1], gpt.Precision{})); got != be.bytes {
				t.Errorf("%+v B=%d T=%d: inference plan says %d bytes, NewInference allocated %d", cfg, bt[0], bt[1], got, be.bytes)
			}
		}
	}
}

// stepGrads zeroes m's gradients, runs b forward with its targets and backward, and returns the
// loss: the first half of the trainer's step.
func stepGrads(t *testing.T, m *bert.Model, b bert.Batch) float32 {
	t.Helper()
	m.ZeroGrad()
	loss, err := m.ForwardBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(1); err != nil {
		t.Fatal(err)
	}
	return loss
}

// trainSteps runs n steps of the trainer's loop (forward, backward, clipped AdamW) on the
// fixture's batches and returns the losses and the final parameters.
func trainSteps(t *testing.T, be backend.Backend, r *reference, n int) ([]float32, []float32) {
	m := r.newModel(t, be)
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	var losses []float32
	for i := range n {
		loss := stepGrads(t, m, r.batch(t, i%10))
		m.Update(opt, 3e-3, i+1, min(1, 1/(m.GradNorm()+1e-6)))
		losses = append(losses, loss)
	}
	return losses, download(be, m.Params)
}

// A model from NewMasked, its MLM head planned for the most positions the fixture's batches mask,
// gives the bits New's gives over three training steps; it refuses a batch with more masked
// positions than planned, and one without targets, with one-line errors.
func TestNewMasked(t *testing.T) {
	for _, name := range variants {
		r := loadReference(t, name)
		countMasked := func(b bert.Batch) int {
			n := 0
			for _, tgt := range b.Targets {
				if tgt >= 0 {
					n++
				}
			}
			return n
		}
		most := 0
		for i := range 3 {
			most = max(most, countMasked(r.batch(t, i)))
		}
		if 2*most > r.B*r.T {
			t.Fatalf("%s: %d of %d positions masked; the test needs a head smaller than B*T", name, most, r.B*r.T)
		}
		be := cpu.New(2)
		full := r.newModel(t, be)
		m, err := bert.NewMasked(be, r.cfg, r.B, r.T, most, gpt.Precision{}, gpt.Parallel{})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetParams(r.params(t)); err != nil {
			t.Fatal(err)
		}
		opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
		for i := range 3 {
			var losses [2]float32
			var grads [2][]float32
			for j, mm := range []*bert.Model{full, m} {
				losses[j] = stepGrads(t, mm, r.batch(t, i))
				grads[j] = download(be, mm.Grads)
				mm.Update(opt, 3e-3, i+1, min(1, 1/(mm.GradNorm()+1e-6)))
			}
			if losses[0] != losses[1] || !slices.Equal(grads[0], grads[1]) {
				t.Fatalf("%s step %d: NewMasked's loss %v and gradients differ from New's (loss %v)", name, i, losses[1], losses[0])
			}
		}
		b := r.batch(t, 0)
		small, err := bert.NewMasked(be, r.cfg, r.B, r.T, countMasked(b)-1, gpt.Precision{}, gpt.Parallel{})
		if err != nil {
			t.Fatal(err)
		}
		noTargets := b
		noTargets.Targets = nil
		for what, run := range map[string]func() error{
			"one masked position too many": func() error { _, err := small.ForwardBatch(b); return err },
			"a batch without targets":      func() error { _, err := m.ForwardBatch(noTargets); return err },
		} {
			if err := run(); err == nil || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %s gave error %v, want one line", name, what, err)
			}
		}
		if _, err := bert.NewMasked(be, r.cfg, r.B, r.T, r.B*r.T+1, gpt.Precision{}, gpt.Parallel{}); err == nil {
			t.Errorf("%s: NewMasked accepted more masked positions than B*T", name)
		}
		be.Close()
	}
}

// The CPU backend's results do not depend on the thread count, so a resumed run gives the same
// bits on any number of threads.
func TestStepsIndependentOfThreads(t *testing.T) {
	for _, name := range variants {
		r := loadReference(t, name)
		l1, p1 := trainSteps(t, cpu.New(1), r, 3)
		l3, p3 := trainSteps(t, cpu.New(3), r, 3)
		if !slices.Equal(l1, l3) || !slices.Equal(p1, p3) {
			t.Errorf("%s: 1 and 3 threads give different bits", name)
		}
	}
}

// A training step, once warm, allocates nothing (as gpt.Model's), masked-row gather included.
func TestTrainingStepDoesNotAllocate(t *testing.T) {
	r := loadReference(t, "postln")
	be := cpu.New(2)
	defer be.Close()
	m := r.newModel(t, be)
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	b := r.batch(t, 0)
	step := 0
	trainStep := func() {
		step++
		stepGrads(t, m, b)
		m.Update(opt, 1e-3, step, min(1, 1/(m.GradNorm()+1e-6)))
	}
	trainStep()
	if allocs := testing.AllocsPerRun(5, trainStep); allocs != 0 {
		t.Errorf("a training step allocates %v times; want 0", allocs)
	}
}

// The model learns, end to end with the masking: each window repeats one letter, so a masked
// position is predictable from any unmasked one, but only through bidirectional attention (a
// model that learnt the letters' frequencies alone would stay at ln 26 = 3.26 nats). 200 steps
// of a tiny post-LN model take it from ~5.3 to ~0.3 and all masked letters right. (Letters in
// alphabetical order need ~2000 steps here before attention finds the neighbours.)
func TestLearnsMaskedPattern(t *testing.T) { learnMaskedPattern(t, gpt.Precision{}) }

// learnMaskedPattern trains TestLearnsMaskedPattern's model with the storage plan prec.
func learnMaskedPattern(t *testing.T, prec gpt.Precision) {
	const B, T = 8, 18
	const steps, lr = 200, 3e-3
	cfg := bert.Config{BlockSize: T, VocabSize: byteVocab, PaddedVocabSize: 320, NumLayers: 2, NumHeads: 2, Channels: 32}
	be := cpu.New(0)
	defer be.Close()
	m, err := bert.NewWithPrecision(be, cfg, B, T, prec)
	if err != nil {
		t.Fatal(err)
	}
	m.Init(3)
	mk, err := bert.NewMasker(byteSpecials, byteVocab, 9)
	if err != nil {
		t.Fatal(err)
	}
	text := []byte("abcdefghijklmnopqrstuvwxyz")
	tokens, inputs, targets := make([]int32, B*T), make([]int32, B*T), make([]int32, B*T)
	stream := make([]int32, T-2)
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.01}
	var first, last float64
	var correct, masked int
	for step := 1; step <= steps; step++ {
		for b := range B {
			letter := text[(step*B+b*5)%len(text)]
			for i := range stream {
				stream[i] = int32(letter)
			}
			mk.Window(tokens[b*T:(b+1)*T], stream)
		}
		if err := mk.Mask(inputs, targets, tokens, B, T, step, 0); err != nil {
			t.Fatal(err)
		}
		m.ZeroGrad()
		loss, err := m.Forward(inputs, targets, B, T)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(1); err != nil {
			t.Fatal(err)
		}
		m.Update(opt, lr, step, 1)
		if step <= 10 {
			first += float64(loss) / 10
		}
		if step > steps-10 {
			last += float64(loss) / 10
			c, n := m.MaskedAccuracy()
			correct, masked = correct+c, masked+n
		}
	}
	acc := float64(correct) / float64(masked)
	t.Logf("mean loss %.3f over the first 10 steps, %.3f over the last 10; masked accuracy %.2f", first, last, acc)
	if last > 1.5 || acc < 0.9 {
		t.Errorf("did not learn: loss %.3f -> %.3f, accuracy %.2f", first, last, acc)
	}
}

// A batch smaller than the planned capacity uses the first rows of the activation buffers: the
// loss and gradients are bit-identical to those of a model planned for exactly that batch.
func TestSmallerBatchThanPlanned(t *testing.T) {
	r := loadReference(t, "postln")
	const B, T = 2, 9
	b := bert.Batch{B: B, T: T, Inputs: make([]int32, B*T), Targets: make([]int32, B*T),
		TokenTypes: make([]int32, B*T), Lengths: []int32{9, 6}}
	for i := range b.Inputs {
		b.Inputs[i] = int32(4 + i*7%60)
		b.Targets[i] = -1
		if i%3 == 1 && i%T < int(b.Lengths[i/T]) {
			b.Targets[i] = int32(4 + i*5%60)
		}
		b.TokenTypes[i] = int32(i % T / 5)
	}
	run := func(maxB, maxT int) (float32, []float32) {
		be := cpu.New(1)
		m, err := bert.New(be, r.cfg, maxB, maxT)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetParams(r.params(t)); err != nil {
			t.Fatal(err)
		}
		loss, err := m.ForwardBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		m.ZeroGrad()
		if err := m.Backward(1); err != nil {
			t.Fatal(err)
		}
		return loss, download(be, m.Grads)
	}
	l1, g1 := run(B, T)
	l2, g2 := run(3, 13)
	if l1 != l2 || !slices.Equal(g1, g2) {
		t.Errorf("a (2,9) batch in a (3,13) plan: loss %v, want %v; gradients equal: %v", l2, l1, slices.Equal(g1, g2))
	}
}

// MaskedAccuracy counts the same whether the logits are read in place (the CPU's host memory)
// or downloaded (a backend without HostMemory, as a GPU is), and it is the argmax's count. The
// model first fits batch 0 for 10 steps, after which it predicts most of its masked tokens but
// not all (10 of 13), so that a count of all or none would show.
func TestMaskedAccuracyWithoutHostMemory(t *testing.T) {
	r := loadReference(t, "preln")
	b := r.batch(t, 0)
	opt := gpt.AdamWConfig{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	var counts [3][2]int
	var models [3]*bert.Model
	for k, be := range []backend.Backend{cpu.New(1), &counting{Backend: cpu.New(1)}, &matching{Backend: cpu.New(1)}} {
		if _, ok := be.(backend.HostMemory); ok != (k == 0) {
			t.Fatalf("backend %d: HostMemory %v", k, ok)
		}
		m := r.newModel(t, be)
		for step := 1; step <= 10; step++ {
			stepGrads(t, m, b)
			m.Update(opt, 1e-2, step, 1)
		}
		if _, err := m.ForwardBatch(b); err != nil {
			t.Fatal(err)
		}
		counts[k][0], counts[k][1] = m.MaskedAccuracy()
		models[k] = m
	}
	if counts[0] != counts[1] || counts[0] != counts[2] {
		t.Errorf("in place %v, downloaded %v, matched on the device %v (correct, masked)", counts[0], counts[1], counts[2])
	}
	// The argmax of the logits of every position (a Forward without targets) at the masked ones.
	nt := b
	nt.Targets = nil
	if _, err := models[0].ForwardBatch(nt); err != nil {
		t.Fatal(err)
	}
	want, V := 0, r.cfg.VocabSize
	row := make([]float32, V)
	for i, tgt := range b.Targets {
		if tgt >= 0 {
			if err := models[0].LogitsRow(row, i/r.T, i%r.T); err != nil {
				t.Fatal(err)
			}
			if int32(slices.Index(row, slices.Max(row))) == tgt {
				want++
			}
		}
	}
	if counts[0][0] != want || want == 0 || want == counts[0][1] {
		t.Errorf("%d of %d correct; the argmax of every position's logits gives %d", counts[0][0], counts[0][1], want)
	}
	t.Logf("%d of %d masked tokens right after fitting batch 0", counts[0][0], counts[0][1])
}

// matching is a backend without host memory that matches targets as the GPU's match_targets
// kernel does (crossentropy.cu), transcribed: 512 threads each scan columns j = thread +
// 512*i keeping the first largest, then a butterfly over each warp's 32 lanes and a pass over
// the 16 warps keep the larger value or, on a tie, the earlier column.
type matching struct{ backend.Backend }

func (m *matching) MatchTargets(hits, logits, targets backend.Buf, N, V, Vp int) {
	const threads, warp = 512, 32
	x, tg := cpu.Floats(logits), cpu.Int32s(targets)
	out := make([]float32, N)
	better := func(v float32, i int, best float32, bi int) bool {
		return i >= 0 && (bi < 0 || v > best || (v == best && i < bi))
	}
	for row := range N {
		var best [threads]float32
		var bi [threads]int
		for th := range threads {
			bi[th] = -1
			for j := th; j < V; j += threads {
				if v := x[row*Vp+j]; bi[th] < 0 || v > best[th] {
					best[th], bi[th] = v, j
				}
			}
		}
		for o := warp / 2; o > 0; o >>= 1 { // __shfl_xor_sync: every lane reads lane^o's old value
			nb, ni := best, bi
			for th := range threads {
				peer := th&^(warp-1) | (th % warp) ^ o
				if better(best[peer], bi[peer], best[th], bi[th]) {
					nb[th], ni[th] = best[peer], bi[peer]
				}
			}
			best, bi = nb, ni
		}
		b, i := best[0], bi[0]
		for w := 1; w < threads/warp; w++ {
			if better(best[w*warp], bi[w*warp], b, i) {
				b, i = best[w*warp], bi[w*warp]
			}
		}
		if int32(i) == tg[row] {
			out[row] = 1
		}
	}
	m.Upload(hits, out)
}

// The transcribed kernel picks the CPU's column: the first of equal maxima, across threads and
// warps, and among -Inf.
func TestMatchTargetsKernelTranscription(t *testing.T) {
	be := &matching{Backend: cpu.New(1)}
	const N, V, Vp = 6, 1100, 1104
	x := make([]float32, N*Vp)
	for i := range x {
		x[i] = float32(i%97) * 0.01
	}
	targets := []int32{0, 1099, 600, 513, 5, 0}
	// Row 0: a tie between columns 3 (thread 3) and 515 (thread 3, later): the first wins.
	x[0*Vp+3], x[0*Vp+515] = 5, 5
	// Row 1: the maximum at the last real column; the padding (larger) is ignored.
	x[1*Vp+1099], x[1*Vp+1100] = 9, 99
	// Row 2: a tie between columns 600 (thread 88) and 601 (thread 89, another warp's lane).
	x[2*Vp+600], x[2*Vp+601] = 7, 7
	// Row 3: a tie between 513 (thread 1, warp 0) and 1000 (thread 488, warp 15): 513.
	x[3*Vp+513], x[3*Vp+1000] = 8, 8
	// Row 4: every logit -Inf: column 0, not the target 5.
	for j := range V {
		x[4*Vp+j] = float32(math.Inf(-1))
	}
	// Row 5: a tie between 40 (warp 1) and 10 (warp 0): 10, not the target 0.
	x[5*Vp+40], x[5*Vp+10] = 3, 3
	logits, tg, hits := be.Alloc(N*Vp), be.AllocInt32(N), be.Alloc(N)
	be.Upload(logits, x)
	be.UploadInt32(tg, targets)
	be.MatchTargets(hits, logits, tg, N, V, Vp)
	got := make([]float32, N)
	be.Download(got, hits)
	if want := []float32{0, 1, 1, 1, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("hits %v, want %v", got, want)
	}
	// Row 0's target is column 3, the first of its tie.
	targets[0] = 3
	be.UploadInt32(tg, targets)
	be.MatchTargets(hits, logits, tg, N, V, Vp)
	be.Download(got, hits)
	if got[0] != 1 {
		t.Errorf("row 0: the first of two equal maxima (column 3) was not chosen")
	}
}
