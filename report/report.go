// Package report turns a run directory into one self-contained HTML page: the run's config, its
// loss, learning-rate and throughput curves, samples over time, attention maps of the first and the
// last checkpoint, the op profile and the evaluation results. Charts are inline SVG and pictures are
// embedded PNG, so the page needs no network and no other file to be viewed.
package report

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpt2go/gpt2go/checkpoint"
	"github.com/gpt2go/gpt2go/internal/atomicfile"
	"github.com/gpt2go/gpt2go/train"
	"github.com/gpt2go/gpt2go/viz"
	"gonum.org/v1/plot/vg"
)

// Options choose what goes into a report.
type Options struct {
	RunDir  string
	Version string // gpt2go version, shown in the footer
	// Attention, when set, renders attention maps of two checkpoints (the first and the last of the
	// run) over text as a PNG; the report leaves the section out when it is nil or fails, saying why.
	Attention func(first, last, text string) (png []byte, caption string, err error)
	// AttentionText is the text for the attention maps (default: the start of the newest sample,
	// else a fixed sentence).
	AttentionText string
	// Now is the time printed in the header (default time.Now).
	Now func() time.Time
}

// Page is everything the HTML template shows.
type Page struct {
	Title     string
	RunDir    string
	Generated string
	Version   string
	Summary   []KV
	Config    []KV
	Charts    []Chart
	Samples   []Sample
	Attention *Picture
	Notes     []string // sections left out, and why
	Profile   *Profile
	Evals     []KV
	Ckpts     []KV
}

// KV is one row of a two-column table.
type KV struct{ Key, Value string }

// Chart is an inline SVG chart with an id the browser test looks for.
type Chart struct {
	ID, Title string
	SVG       template.HTML
}

// Picture is an embedded PNG.
type Picture struct {
	Caption string
	DataURI template.URL
}

// Sample is the text generated at one step.
type Sample struct {
	Step int
	Text string
}

// Build reads opts.RunDir and returns the report page.
func Build(opts Options) (*Page, error) {
	dir := opts.RunDir
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	p := &Page{
		Title:     filepath.Base(filepath.Clean(dir)),
		RunDir:    dir,
		Generated: now().UTC().Format("2006-01-02 15:04 UTC"),
		Version:   opts.Version,
	}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	p.Config = flatten("", cfg)
	log, err := viz.ReadLog(dir, p.Title)
	if err != nil {
		return nil, err
	}
	p.Summary = summarize(cfg, log)
	if err := p.addCharts(log); err != nil {
		return nil, err
	}
	if p.Samples, err = readSamples(filepath.Join(dir, "samples.txt")); err != nil {
		return nil, err
	}
	p.Evals = evals(log)

	ckpts, err := checkpoint.List(dir)
	if err != nil {
		return nil, err
	}
	// The attention maps use the oldest and newest checkpoints that verify, passing over damaged
	// ones as sample, eval and attn do for a run folder; those the table marks.
	damaged := map[string]string{}
	first, last := -1, -1
	if opts.Attention != nil && len(ckpts) >= 2 {
		last = usable(ckpts, len(ckpts)-1, 0, -1, damaged)
		if last > 0 {
			first = usable(ckpts, 0, last-1, 1, damaged)
		}
	}
	for _, c := range ckpts {
		size := "?"
		if st, err := os.Stat(c.Path); err == nil {
			size = fmt.Sprintf("%.1f MB", float64(st.Size())/1e6)
		}
		v := filepath.Base(c.Path) + " (" + size + ")"
		if problem, ok := damaged[c.Path]; ok {
			v += ": " + problem + "; passed over"
		}
		p.Ckpts = append(p.Ckpts, KV{fmt.Sprintf("step %d", c.Step), v})
	}
	switch {
	case opts.Attention == nil:
	case len(ckpts) < 2:
		p.Notes = append(p.Notes, "Attention maps need two checkpoints (the initial one and a trained one); this run has "+strconv.Itoa(len(ckpts))+".")
	case first < 0:
		p.Notes = append(p.Notes, fmt.Sprintf("Attention maps need two usable checkpoints; %d of this run's %d are damaged (see Checkpoints).", len(damaged), len(ckpts)))
	default:
		if len(damaged) > 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("%d damaged checkpoint(s) passed over (see Checkpoints): the attention maps compare steps %d and %d.", len(damaged), ckpts[first].Step, ckpts[last].Step))
		}
		text := opts.AttentionText
		if text == "" {
			text = defaultAttentionText(p.Samples)
		}
		png, caption, err := opts.Attention(ckpts[first].Path, ckpts[last].Path, text)
		if err != nil {
			p.Notes = append(p.Notes, "Attention maps left out: "+err.Error())
		} else {
			p.Attention = &Picture{Caption: caption, DataURI: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png))}
		}
	}

	prof, err := readProfile(filepath.Join(dir, train.ProfileFile))
	switch {
	case err == nil:
		p.Profile = prof
	case os.IsNotExist(err):
		p.Notes = append(p.Notes, "No op profile: run `gpt2go profile --run "+dir+"` to add one.")
	default:
		return nil, err
	}
	return p, nil
}

// Write builds the report of opts.RunDir and writes it atomically to out.
func Write(opts Options, out string) error {
	p, err := Build(opts)
	if err != nil {
		return err
	}
	return atomicfile.Write(out, func(w io.Writer) error { return p.Render(w) })
}

// Render writes the page as HTML.
func (p *Page) Render(w io.Writer) error {
	return pageTemplate.Execute(w, p)
}

func readConfig(dir string) (map[string]any, error) {
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%s is not a run directory (no run.json); pass the --out directory of a `gpt2go train` run", dir)
		}
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s/run.json is not valid JSON: %v", dir, err)
	}
	return cfg, nil
}

// flatten lists nested JSON objects as dotted keys, sorted.
func flatten(prefix string, m map[string]any) []KV {
	var out []KV
	for k, v := range m {
		key := prefix + k
		switch v := v.(type) {
		case map[string]any:
			out = append(out, flatten(key+".", v)...)
		default:
			b, _ := json.Marshal(v)
			out = append(out, KV{key, string(b)})
		}
	}
	slices.SortFunc(out, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func last(s *viz.Series) (step, v float64, ok bool) {
	if s == nil || len(s.Values) == 0 {
		return 0, 0, false
	}
	n := len(s.Values) - 1
	return s.Steps[n], s.Values[n], true
}

func mean(s *viz.Series, skipFirst bool) (float64, bool) {
	if s == nil {
		return 0, false
	}
	vals := s.Values
	if skipFirst && len(vals) > 1 { // the first step includes warm-up costs
		vals = vals[1:]
	}
	if len(vals) == 0 {
		return 0, false
	}
	var sum float64
	for _, v := range vals {
		sum += v
	}
	return sum / float64(len(vals)), true
}

func summarize(cfg map[string]any, log *viz.Log) []KV {
	var out []KV
	if log.Error != "" { // first: the run stopped there (a non-finite loss, say)
		out = append(out, KV{"stopped", log.Error})
	}
	m := log.Metrics
	if step, v, ok := last(m["loss"]); ok {
		total := ""
		if steps, ok := cfg["steps"].(float64); ok {
			total = fmt.Sprintf(" of %.0f", steps)
		}
		out = append(out, KV{"steps done", fmt.Sprintf("%.0f%s", step, total)}, KV{"last train loss", fmt.Sprintf("%.4f", v)})
	}
	if s := m["val_loss"]; s != nil && len(s.Values) > 0 {
		best := slices.Min(s.Values)
		i := slices.Index(s.Values, best)
		_, v, _ := last(s)
		out = append(out, KV{"last val loss", fmt.Sprintf("%.4f", v)}, KV{"best val loss", fmt.Sprintf("%.4f (step %.0f)", best, s.Steps[i])})
	}
	if s := m["val_acc"]; s != nil && len(s.Values) > 0 { // BERT
		best := slices.Max(s.Values)
		i := slices.Index(s.Values, best)
		_, v, _ := last(s)
		out = append(out, KV{"last val masked-token accuracy", fmt.Sprintf("%.4f", v)}, KV{"best val masked-token accuracy", fmt.Sprintf("%.4f (step %.0f)", best, s.Steps[i])})
	}
	if v, ok := mean(m["tok_s"], true); ok {
		out = append(out, KV{"mean throughput", fmt.Sprintf("%.0f tok/s", v)})
	}
	if v, ok := mean(m["ms"], true); ok {
		out = append(out, KV{"mean step time", fmt.Sprintf("%.1f ms", v)})
	}
	if v, ok := mean(m["mfu"], true); ok {
		out = append(out, KV{"mean MFU", fmt.Sprintf("%.1f%%", 100*v)})
	}
	out = append(out, precisionSummary(cfg, m)...)
	if s := m["ms"]; s != nil {
		var sum float64
		for _, v := range s.Values {
			sum += v
		}
		d := time.Duration(sum * float64(time.Millisecond))
		switch {
		case d >= time.Minute:
			d = d.Round(time.Second)
		case d >= time.Second:
			d = d.Round(100 * time.Millisecond)
		default:
			d = d.Round(time.Millisecond)
		}
		out = append(out, KV{"training time", d.String()})
	}
	return out
}

// precisionSummary is the run's precision (fp32 for runs from before mixed precision) and, for
// fp16, its last loss scale and how many steps the scaler skipped.
func precisionSummary(cfg map[string]any, m map[string]*viz.Series) []KV {
	prec, _ := cfg["precision"].(string)
	if prec == "" {
		prec = "fp32"
	}
	if g, _ := cfg["grad_precision"].(string); g != "" && g != "fp32" {
		prec += ", " + g + " gradients"
	}
	if sr, _ := cfg["stochastic_rounding"].(bool); sr {
		prec += ", stochastic rounding"
	}
	out := []KV{{"precision", prec}}
	if _, scale, ok := last(m["loss_scale"]); ok {
		skipped := 0.0
		if s := m["skipped"]; s != nil {
			for _, v := range s.Values {
				skipped += v
			}
		}
		steps := "steps"
		if skipped == 1 {
			steps = "step"
		}
		out = append(out, KV{"loss scale", fmt.Sprintf("%g (%.0f %s skipped)", scale, skipped, steps)})
	}
	return out
}

// evals lists the latest value of every evaluation metric the log holds.
func evals(log *viz.Log) []KV {
	var out []KV
	for _, k := range viz.MetricNames([]*viz.Log{log}) {
		if !strings.HasPrefix(k, "hellaswag") {
			continue
		}
		if step, v, ok := last(log.Metrics[k]); ok {
			out = append(out, KV{k, fmt.Sprintf("%.4f (step %.0f)", v, step)})
		}
	}
	return out
}

// chartSpecs are the report's charts: id, title and the curve panels drawn.
var chartSpecs = []struct {
	id, title string
	panels    []string
	logY      bool
	optional  bool // drawn only when logged (no "nothing logged yet" note)
}{
	{"chart-loss", "Loss (train and validation)", []string{"loss"}, false, false},
	{"chart-acc", "Masked-token accuracy (train and validation)", []string{"acc"}, false, true},
	{"chart-lr", "Learning rate and gradient norm", []string{"lr", "grad_norm"}, false, false},
	{"chart-throughput", "Throughput", []string{"tok_s", "ms"}, false, false},
}

func (p *Page) addCharts(log *viz.Log) error {
	for _, spec := range chartSpecs {
		var panels []string
		for _, name := range spec.panels {
			key := name
			if key == "loss" && log.Metrics["loss"] == nil {
				continue
			}
			if log.Metrics[key] != nil {
				panels = append(panels, name)
			}
		}
		if len(panels) == 0 {
			if !spec.optional {
				p.Notes = append(p.Notes, spec.title+": nothing logged yet.")
			}
			continue
		}
		height := 1.45 * vg.Inch // per panel below the first, which is twice as tall
		if len(panels) == 1 {
			height = 3.3 * vg.Inch
		}
		fig, err := viz.Curves([]*viz.Log{log}, viz.CurvesOptions{Panels: panels, LogY: spec.logY, Title: spec.title,
			Smooth: smoothing(log), Width: 5.4 * vg.Inch, Height: height})
		if err != nil {
			return err
		}
		svg, err := fig.SVG()
		if err != nil {
			return err
		}
		p.Charts = append(p.Charts, Chart{ID: spec.id, Title: spec.title, SVG: template.HTML(stripXMLHeader(svg))})
	}
	return nil
}

// smoothing picks an EMA decay that suits the number of logged steps.
func smoothing(log *viz.Log) float64 {
	s := log.Metrics["loss"]
	if s == nil || len(s.Values) < 50 {
		return 0
	}
	return math.Min(0.9, 1-10/float64(len(s.Values)))
}

var xmlHeader = regexp.MustCompile(`^\s*<\?xml[^>]*\?>\s*(<!DOCTYPE[^>]*>\s*)?`)

// stripXMLHeader makes a standalone SVG document embeddable in HTML.
func stripXMLHeader(svg []byte) []byte { return xmlHeader.ReplaceAll(svg, nil) }

// defaultAttentionText is the first line of the newest sample that has some text, cut to 60
// bytes, or a fixed sentence.
func defaultAttentionText(samples []Sample) string {
	for i := len(samples) - 1; i >= 0; i-- {
		for _, line := range strings.Split(samples[i].Text, "\n") {
			if line = strings.TrimSpace(line); len(line) >= 8 {
				if len(line) > 60 {
					line = strings.ToValidUTF8(line[:60], "")
				}
				return line
			}
		}
	}
	return "The quick brown fox jumps over the lazy dog."
}

var sampleHeader = regexp.MustCompile(`^---- step (\d+) ----$`)

// readSamples parses RUNDIR/samples.txt ("---- step N ----" lines, each followed by the text).
// A resumed run may sample a step again; the later text wins.
func readSamples(path string) ([]Sample, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Sample
	var cur *Sample
	var text bytes.Buffer
	flush := func() {
		if cur != nil {
			cur.Text = strings.ToValidUTF8(strings.TrimSuffix(text.String(), "\n"), "\uFFFD") // (runs before 2026-11-25 wrote lone bytes)
			out = slices.DeleteFunc(out, func(s Sample) bool { return s.Step >= cur.Step })
			out = append(out, *cur)
		}
		text.Reset()
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if m := sampleHeader.FindStringSubmatch(sc.Text()); m != nil {
			flush()
			step, _ := strconv.Atoi(m[1])
			cur = &Sample{Step: step}
			continue
		}
		text.WriteString(sc.Text())
		text.WriteByte('\n')
	}
	flush()
	return out, sc.Err()
}

// usable returns the index of the first checkpoint from i to end (step +1 or -1) that verifies,
// or -1, and records in damaged each one passed over for being damaged, with its problem. A
// checkpoint that cannot be read for another reason (permissions) is not passed over: the
// attention maps then say why they are left out.
func usable(ckpts []checkpoint.Entry, i, end, step int, damaged map[string]string) int {
	for ; (step > 0 && i <= end) || (step < 0 && i >= end); i += step {
		c, err := checkpoint.Verify(ckpts[i].Path)
		if err == nil {
			c.Close()
			if c.Step == ckpts[i].Step {
				return i
			}
			damaged[ckpts[i].Path] = fmt.Sprintf("holds step %d, not the step its name says", c.Step)
			continue
		}
		if !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, checkpoint.ErrNotCheckpoint) {
			return i
		}
		damaged[ckpts[i].Path] = checkpoint.Problem(err)
	}
	return -1
}
