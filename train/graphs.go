package train

import (
	"errors"

	"github.com/gpt2go/gpt2go/backend"
)

// A training step's backend work can be recorded as graphs (backend.Grapher: CUDA graphs) and
// replayed, one launch for hundreds of kernels. The step is cut where the host takes part:
// each micro-batch is read and uploaded by the host, then its forward and backward (one
// graph per kind of micro-batch: the first, the middle ones, the last), its losses copied
// back; the learning rate's terms are uploaded, then the gradient statistics, the AdamW update
// and the 16-bit copy of the weights (one graph). The first run of each graph's work is direct:
// it tunes the matmuls, allocates scratch memory and uploads the tables that a recording may
// not; the second is recorded and launched; later ones launch the recording.
//
// Graphs need everything that changes between steps to reach the ops through backend memory
// (the tokens, the learning rate: see backend.Ops.AdamWAll), so they are used only where that
// holds: one process (data parallel runs exchange gradients on the host) and a GPT model.
// Stochastic rounding's seed is uploaded with the learning rate (gpt.Trainable.SetUpdateStep).
// fp16's loss scale is a kernel argument (of the loss gradient and the gradient statistics),
// so the graphs are recorded per scale: a new scale drops them (useScale), which costs a
// direct step and a recording each time the scale changes, once per overflow or growth. A recording that fails (the
// backend names what it refused) turns graphs off for the rest of the run, with a line in the
// log, and the step runs without them: same bits. A graph whose memory has moved since
// (backend.ErrGraphStale) is dropped and recorded again.

// stepGraphs records and replays the parts of a step.
type stepGraphs struct {
	g      backend.Grapher
	warm   map[string]bool
	graphs map[string]backend.Graph
	scale  float64 // the loss scale the graphs hold (useScale)
	off    bool
	logf   func(format string, args ...any)
}

// useScale starts a step at loss scale scale: graphs recorded at another one hold that scale in
// their kernels' arguments, so they are dropped and the parts are run directly, then recorded
// again, as at the start of the run.
func (s *stepGraphs) useScale(scale float64) {
	if s == nil || s.scale == scale {
		return
	}
	s.scale = scale
	s.close()
	clear(s.warm)
}

func newStepGraphs(g backend.Grapher, logf func(string, ...any)) *stepGraphs {
	return &stepGraphs{g: g, warm: map[string]bool{}, graphs: map[string]backend.Graph{}, logf: logf}
}

// run does work, the part of a step named key: directly, as a recording, or as the launch of
// its recording. work must queue backend ops only and do the same each time for a key.
func (s *stepGraphs) run(key string, work func() error) error {
	if s == nil || s.off {
		return work()
	}
	if gr := s.graphs[key]; gr != nil {
		err := gr.Launch()
		if !errors.Is(err, backend.ErrGraphStale) {
			return err
		}
		// Memory it used has moved (scratch regrown): run the work directly, record it again
		// at its next use.
		gr.Close()
		delete(s.graphs, key)
		s.logf("cuda graphs: %q is recorded again: %v", key, err)
		return work()
	}
	if !s.warm[key] {
		s.warm[key] = true
		return work()
	}
	if err := s.g.BeginCapture(); err != nil {
		s.stop(key, err)
		return work()
	}
	werr := work()
	gr, err := s.g.EndCapture()
	if werr != nil || err != nil {
		if gr != nil {
			gr.Close()
		}
		if err == nil {
			err = werr
		}
		s.stop(key, err)
		return work() // nothing recorded ran
	}
	s.graphs[key] = gr
	return gr.Launch()
}

// stop turns graphs off for the rest of the run.
func (s *stepGraphs) stop(key string, err error) {
	s.off = true
	s.logf("cuda graphs: off for the rest of the run, recording %q failed: %v", key, err)
	s.close()
}

// recorded is the number of graphs recorded.
func (s *stepGraphs) recorded() int {
	if s == nil {
		return 0
	}
	return len(s.graphs)
}

// close frees the graphs.
func (s *stepGraphs) close() {
	if s == nil {
		return
	}
	for k, gr := range s.graphs {
		gr.Close()
		delete(s.graphs, k)
	}
}

// graphsOff says why no graphs are recorded, "" when they may be: turned off by the flag
// (--cuda-graphs=false) or GPT2GO_CUDA_GRAPHS=0.
func graphsOff(noGraphs bool) string {
	if noGraphs || GraphsOff() {
		return "off (--cuda-graphs=false or GPT2GO_CUDA_GRAPHS=0)"
	}
	return ""
}

// graphsFor returns the step graphs of a run, or nil and why there are none (empty when the
// backend records no graphs at all).
func (t *Trainer) graphsFor() (*stepGraphs, string) {
	g := backend.GrapherOf(t.be)
	if g == nil {
		return nil, ""
	}
	if why := graphsOff(t.opts.NoGraphs); why != "" {
		return nil, why
	}
	switch {
	case t.distributed():
		return nil, "off: data-parallel steps exchange gradients on the host"
	case t.cfg.IsBERT():
		return nil, "off: BERT's masking reads its batch on the host"
	}
	return newStepGraphs(g, t.bar.Println), "on: each part of a step recorded once and replayed"
}
