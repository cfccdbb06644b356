package train

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/gpt2go/gpt2go/backend"
	"github.com/gpt2go/gpt2go/backend/cpu"
	"github.com/gpt2go/gpt2go/backend/profile"
	"github.com/gpt2go/gpt2go/gpt"
)

func profileConfig() Config {
	cfg := Defaults()
	cfg.Model = gpt.Config{NumLayers: 2, NumHeads: 2, Channels: 32, BlockSize: 16, VocabSize: 50, PaddedVocabSize: 64}
	cfg.BatchSize, cfg.SeqLen, cfg.GradAccum, cfg.Steps = 2, 12, 2, 4
	cfg.LR, cfg.Seed = 1e-2, 7
	return cfg
}

// Profiling must not change results: the losses of every step and the final weights of a
// profiled run equal, bit for bit, those of the same steps run on the bare backend.
func TestProfilingDoesNotChangeResults(t *testing.T) {
	cfg := profileConfig()
	for _, noSync := range []bool{false, true} {
		res, profiledTask, err := runProfile(context.Background(), cpu.New(2), ProfileOptions{
			Config: cfg, Warmup: 1, Steps: 3, Profile: profile.Options{NoSync: noSync},
		})
		if err != nil {
			t.Fatal(err)
		}

		be := cpu.New(2)
		bare, err := gpt.NewParallel(be, cfg.Model, cfg.BatchSize, cfg.SeqLen, gpt.Precision{}, gpt.Parallel{SeparateAccum: true})
		if err != nil {
			t.Fatal(err)
		}
		bare.InitGPT2(cfg.Seed)
		src, done, _ := batchSource(cfg)
		defer done()
		profiled, bareTask := profiledTask.(*gptTask).m, newGPTTask(bare, cfg.BatchSize, cfg.SeqLen)
		if len(res.Losses) != 4 {
			t.Fatalf("%d losses, want 4 (1 warm-up + 3 profiled)", len(res.Losses))
		}
		for step := 1; step <= 4; step++ {
			loss, _, err := taskStep(bareTask, be, cfg, src, step)
			if err != nil {
				t.Fatal(err)
			}
			if math.Float64bits(loss) != math.Float64bits(res.Losses[step-1]) {
				t.Errorf("no sync %v, step %d: profiled loss %v != bare %v", noSync, step, res.Losses[step-1], loss)
			}
		}
		fresh, _ := gpt.New(be, cfg.Model, cfg.BatchSize, cfg.SeqLen)
		fresh.InitGPT2(cfg.Seed)
		if init, final := download(fresh, fresh.Params), download(bare, bare.Params); init[0] == final[0] {
			t.Fatalf("the steps did not update the weights (%v)", init[0])
		}
		for name, bufs := range map[string][2]backend.Buf{
			"params": {profiled.Params, bare.Params}, "adam m": {profiled.M, bare.M}, "adam v": {profiled.V, bare.V},
		} {
			got, want := download(profiled, bufs[0]), download(bare, bufs[1])
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("no sync %v: %s[%d] is %v profiled, %v bare", noSync, name, i, got[i], want[i])
				}
			}
		}
	}
}

func TestProfileTable(t *testing.T) {
	cfg := profileConfig()
	const steps = 2
	res, err := Profile(context.Background(), cpu.New(2), ProfileOptions{Config: cfg, Warmup: 1, Steps: steps, ByShape: true})
	if err != nil {
		t.Fatal(err)
	}
	L, C, Vp, BT := cfg.Model.NumLayers, cfg.Model.Channels, cfg.Model.PaddedVocabSize, cfg.BatchSize*cfg.SeqLen
	micro := steps * cfg.GradAccum
	scopes := map[string]int{
		"step": steps, "step/forward": micro, "step/forward/layer": micro * L,
		"step/backward": micro, "step/backward/layer": micro * L, "step/grad_norm": steps, "step/optimizer": steps,
	}
	var selfPct float64
	calls := map[string]int{}
	lmHead := false
	for _, row := range res.Report.Rows {
		selfPct += row.SelfPct
		calls[row.Name] += row.Calls
		if want, ok := scopes[row.Name]; ok && (row.Kind != "scope" || row.Calls != want) {
			t.Errorf("scope row %+v: want %d calls", row, want)
		}
		if row.Name == "step" && math.Abs(row.TotalPct-100) > 1e-9 {
			t.Errorf("the step scope is %v%% of the recorded time, want 100", row.TotalPct)
		}
		if row.Name == "MatmulForward" && row.Shape == shapeOf("N", BT, "C", C, "OC", Vp) {
			lmHead = true
			if want := float64(micro) * 2 * float64(BT*C*Vp); row.Calls != micro || row.Flops != want {
				t.Errorf("LM head row %+v: want %d calls and %v FLOPs", row, micro, want)
			}
		}
	}
	if !lmHead {
		t.Errorf("no MatmulForward row with the LM head's shape; rows: %+v", res.Report.Rows)
	}
	if math.Abs(selfPct-100) > 1e-6 {
		t.Errorf("self %% sums to %v, want 100", selfPct)
	}
	for name, want := range map[string]int{
		"MatmulForward": micro * (3*L + 1), "MatmulBackward": micro * (3*L + 1), "AdamW": steps, // one AdamWAll per step
		"MatmulGeluForward": micro * L, "MatmulBackwardGelu": micro * L, "CrossEntropyFused": micro,
		"GeluForward": 0, "GeluBackward": 0, "CrossEntropyForward": 0, "CrossEntropyBackward": 0,
		"SumSquares": steps, "EncoderForward": micro, "EncoderBackward": micro,
	} {
		if calls[name] != want {
			t.Errorf("%s: %d calls, want %d", name, calls[name], want)
		}
	}
	if res.Report.PeakGFlops <= 0 {
		t.Errorf("the CPU backend is a backend.Peaker but the report has no peak")
	}
	if res.StepMs <= 0 || res.TokPerSec <= 0 || res.Trace == nil || len(res.Trace.TraceEvents) < 100 {
		t.Errorf("result: %v ms/step, %v tok/s, trace %v", res.StepMs, res.TokPerSec, res.Trace != nil)
	}
	// C=32 is not a multiple of 64 (the padded vocabulary, 64, is): the width's hint, with the
	// matmuls' measured time; the CPU counts no launches.
	hints := strings.Join(res.Hints, "\n")
	if !strings.Contains(hints, "--n-embd 32 is not a multiple of 64") || !strings.Contains(hints, "measured here: the matmuls took") ||
		strings.Contains(hints, "vocabulary") || res.Calls != nil {
		t.Errorf("hints (calls %v):\n%s", res.Calls, hints)
	}
}

func shapeOf(namesAndSizes ...any) string {
	var dims []profile.Dim
	for i := 0; i < len(namesAndSizes); i += 2 {
		dims = append(dims, profile.Dim{Name: namesAndSizes[i].(string), N: namesAndSizes[i+1].(int)})
	}
	return profile.Shape(dims)
}

func download(m *gpt.Model, buf backend.Buf) []float32 {
	out := make([]float32, buf.Len())
	m.Backend().Download(out, buf)
	return out
}
