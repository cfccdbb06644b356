package viz

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/gpt2go/gpt2go/checkpoint"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one logged quantity against the training step.
type Series struct {
	Steps, Values []float64
}

// Log holds every numeric quantity of one run's log.jsonl, keyed by its JSON name (loss, val_loss,
// lr, grad_norm, ms, tok_s, ...).
type Log struct {
	Name    string
	Metrics map[string]*Series
	// Error is the last entry's "error" with its step ("non-finite at step 21": the run stopped
	// there), or "" when the log has none after its last resume point.
	Error string
}

// ReadLog reads path, a run directory (its log.jsonl, or the --log file its run.json names) or a
// log.jsonl file, naming the run name.
func ReadLog(path, name string) (*Log, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if path, err = checkpoint.RunLog(path); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("no training log at %s; pass a run directory (holding log.jsonl) or a log.jsonl file", path)
	}
	if err != nil {
		return nil, fmt.Errorf("read training log: %w", err)
	}
	defer f.Close()
	l, err := ParseLog(f, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// ParseLog reads JSON lines with a "step" field. A resumed run may log steps again from an earlier
// checkpoint; the later entries replace the earlier ones from that step on. A torn last line (a
// run still writing) is ignored; a bad line elsewhere is an error.
func ParseLog(r io.Reader, name string) (*Log, error) {
	l := &Log{Name: name, Metrics: map[string]*Series{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var pending error
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if pending != nil {
			return nil, pending
		}
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			pending = fmt.Errorf("line %d is not JSON: %v", n, err)
			continue
		}
		step, ok := entry["step"].(float64)
		if !ok {
			pending = fmt.Errorf("line %d has no numeric \"step\"", n)
			continue
		}
		if e, isErr := entry["error"].(string); isErr {
			l.Error = fmt.Sprintf("%s at step %.0f", e, step)
		} else if l.Error != "" && entry["loss"] != nil {
			l.Error = "" // a resumed run went on past it
		}
		for key, v := range entry {
			value, ok := v.(float64)
			if key == "step" || !ok {
				continue
			}
			s := l.Metrics[key]
			if s == nil {
				s = &Series{}
				l.Metrics[key] = s
			}
			// Drop what a resume from an earlier step superseded.
			keep := sort.SearchFloat64s(s.Steps, step)
			s.Steps, s.Values = append(s.Steps[:keep], step), append(s.Values[:keep], value)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return l, nil
}

// MetricNames lists the quantities the logs hold, sorted.
func MetricNames(logs []*Log) []string {
	seen := map[string]bool{}
	for _, l := range logs {
		for k := range l.Metrics {
			seen[k] = true
		}
	}
	names := make([]string, 0, len(seen))
	for k := range seen {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// CurvesOptions choose what Curves draws.
type CurvesOptions struct {
	// Panels are stacked top to bottom, one per entry: "loss" draws the training loss and the
	// validation loss together; any other name draws that logged quantity. Default: loss, lr.
	Panels []string
	LogY   bool    // logarithmic y axes
	Smooth float64 // 0 <= Smooth < 1: draw noisy quantities (all but lr and val_loss) as exponential moving averages with this decay over their faded raw curves
	Title  string  // default: the run's name, or "training curves" for several runs
	Width  vg.Length
	Height vg.Length // per panel, the first (main) panel is twice as tall
}

// yLabels name the common quantities on their axes.
var yLabels = map[string]string{
	"loss": "loss", "val_loss": "validation loss", "lr": "learning rate", "grad_norm": "gradient norm",
	"ms": "step time (ms)", "tok_s": "tokens/s", "acc": "masked-token accuracy", "val_acc": "val masked-token accuracy",
}

// pairedPanels draw a training quantity with its validation counterpart: the loss, and BERT's
// masked-token accuracy.
var pairedPanels = map[string]string{"loss": "val_loss", "acc": "val_acc"}

// isValKey says whether key is a validation quantity (drawn dashed with dots, never smoothed).
func isValKey(key string) bool { return key == "val_loss" || key == "val_acc" }

// Curves draws the logged quantities of one or more runs against the step, one panel per
// CurvesOptions.Panels entry, runs overlaid in distinct colours with a legend naming them.
func Curves(logs []*Log, opt CurvesOptions) (*Figure, error) {
	if len(logs) == 0 {
		return nil, fmt.Errorf("no runs to plot")
	}
	if len(opt.Panels) == 0 {
		opt.Panels = []string{"loss", "lr"}
	}
	if !(opt.Smooth >= 0 && opt.Smooth < 1) {
		return nil, fmt.Errorf("smoothing %g is outside [0, 1)", opt.Smooth)
	}
	if opt.Width == 0 {
		opt.Width = 8 * vg.Inch
	}
	if opt.Height == 0 {
		opt.Height = 2.4 * vg.Inch
	}
	if opt.Title == "" {
		opt.Title = "training curves"
		if len(logs) == 1 {
			opt.Title = logs[0].Name
		}
	}
	var plots []*plot.Plot
	for i, panel := range opt.Panels {
		p, err := curvePanel(logs, panel, opt)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			p.Title.Text = opt.Title
		}
		if i == len(opt.Panels)-1 {
			p.X.Label.Text = "step"
		}
		plots = append(plots, p)
	}
	// The panels share the step range so that their x axes line up.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, p := range plots {
		xmin, xmax = math.Min(xmin, p.X.Min), math.Max(xmax, p.X.Max)
	}
	for _, p := range plots {
		p.X.Min, p.X.Max = xmin, xmax
	}
	weights := make([]float64, len(plots))
	var total float64
	for i := range plots {
		weights[i] = 1
		if i == 0 && len(plots) > 1 {
			weights[i] = 2
		}
		total += weights[i]
	}
	height := opt.Height * vg.Length(total)
	return &Figure{Width: opt.Width, Height: height, draw: func(c draw.Canvas) {
		c = draw.Crop(c, 6, -12, 4, -6)
		// Crop each panel's strip so that all y axes take the same width and the plot areas align.
		var yWidth vg.Length
		for _, p := range plots {
			yWidth = max(yWidth, p.DataCanvas(c).Min.X-c.Min.X)
		}
		top := c.Max.Y
		for i, p := range plots {
			h := (c.Max.Y - c.Min.Y) * vg.Length(weights[i]/total)
			strip := c
			strip.Max.Y, strip.Min.Y = top, top-h
			top -= h
			strip.Min.X += yWidth - (p.DataCanvas(strip).Min.X - strip.Min.X)
			p.Draw(strip)
		}
	}}, nil
}

// curvePanel draws one quantity (or, for "loss", train and validation loss) for every run.
func curvePanel(logs []*Log, panel string, opt CurvesOptions) (*plot.Plot, error) {
	keys := []string{panel}
	if val, ok := pairedPanels[panel]; ok {
		keys = []string{panel, val}
	}
	p := newPlot(10)
	p.Y.Label.Text = yLabels[panel]
	if p.Y.Label.Text == "" {
		p.Y.Label.Text = panel
	}
	p.X.Tick.Marker = NiceTicks{Major: 8}
	p.Y.Tick.Marker = NiceTicks{Major: 5}
	if opt.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = LogTicks{}
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = color.Gray{Y: 220}, color.Gray{Y: 220}
	grid.Vertical.Width, grid.Horizontal.Width = vg.Points(0.5), vg.Points(0.5)
	p.Add(grid)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	xmin, xmax := math.Inf(1), math.Inf(-1)
	drawn := 0
	for i, l := range logs {
		col := runColor(i)
		for _, key := range keys {
			s := l.Metrics[key]
			if s == nil {
				continue
			}
			pts := points(s, opt.LogY)
			if len(pts) == 0 {
				continue
			}
			for _, pt := range pts {
				ymin, ymax = math.Min(ymin, pt.Y), math.Max(ymax, pt.Y)
				xmin, xmax = math.Min(xmin, pt.X), math.Max(xmax, pt.X)
			}
			name := curveName(l.Name, key, len(logs), len(keys))
			switch {
			case isValKey(key):
				line, dots, err := plotter.NewLinePoints(thin(pts))
				if err != nil {
					return nil, err
				}
				line.Color, line.Width, line.Dashes = col, vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(2)}
				dots.Color, dots.Shape, dots.Radius = col, draw.CircleGlyph{}, vg.Points(2.5)
				p.Add(line, dots)
				p.Legend.Add(name, line, dots)
			case opt.Smooth > 0 && key != "lr":
				raw, err := plotter.NewLine(thin(pts))
				if err != nil {
					return nil, err
				}
				raw.Color, raw.Width = faded(col, 0.3), vg.Points(0.75)
				smooth, err := plotter.NewLine(thin(ema(pts, opt.Smooth))) // averaged over every point
				if err != nil {
					return nil, err
				}
				smooth.Color, smooth.Width = col, vg.Points(1.5)
				p.Add(raw, smooth)
				p.Legend.Add(fmt.Sprintf("%s (EMA %g)", name, opt.Smooth), smooth)
			default:
				line, err := plotter.NewLine(thin(pts))
				if err != nil {
					return nil, err
				}
				line.Color, line.Width = col, vg.Points(1)
				p.Add(line)
				p.Legend.Add(name, line)
			}
			drawn++
		}
	}
	if drawn == 0 && len(MetricNames(logs)) == 0 {
		return nil, fmt.Errorf("the training logs hold no entries yet")
	}
	if drawn == 0 {
		return nil, fmt.Errorf("no run logged %q (positive values only with a log axis); logged: %s",
			strings.Join(keys, " or "), strings.Join(MetricNames(logs), ", "))
	}
	p.X.Min, p.X.Max = math.Min(0, xmin), xmax
	p.Y.Min, p.Y.Max = padRange(ymin, ymax, opt.LogY)
	p.Legend.Top = true
	return p, nil
}

// curveName labels a curve in the legend: the run (when several), and train/val (for "loss").
func curveName(run, key string, runs, keys int) string {
	part := ""
	if keys > 1 {
		part = map[string]string{"loss": "train", "val_loss": "val", "acc": "train", "val_acc": "val"}[key]
	}
	switch {
	case runs > 1 && part != "":
		return run + " " + part
	case runs > 1:
		return run
	case part != "":
		return part
	default:
		return key
	}
}

// points are the finite (and, on a log axis, positive) values of s.
func points(s *Series, logY bool) plotter.XYs {
	pts := make(plotter.XYs, 0, len(s.Steps))
	for i, y := range s.Values {
		if math.IsNaN(y) || math.IsInf(y, 0) || (logY && y <= 0) {
			continue
		}
		pts = append(pts, plotter.XY{X: s.Steps[i], Y: y})
	}
	return pts
}

// maxDrawn is the most points a curve is drawn with: a few per pixel column of a wide figure.
const maxDrawn = 2000

// thin returns pts, or when they are more than maxDrawn, the lowest and the highest point of
// each of maxDrawn/2 runs of consecutive points, in step order: the curve's envelope as a line
// of that width shows it, without a 100k-step run's every point in an SVG or report.
func thin(pts plotter.XYs) plotter.XYs {
	if len(pts) <= maxDrawn {
		return pts
	}
	buckets := maxDrawn / 2
	out := make(plotter.XYs, 0, maxDrawn)
	for b := range buckets {
		run := pts[b*len(pts)/buckets : (b+1)*len(pts)/buckets]
		lo, hi := 0, 0
		for i, pt := range run {
			if pt.Y < run[lo].Y {
				lo = i
			}
			if pt.Y > run[hi].Y {
				hi = i
			}
		}
		out = append(out, run[min(lo, hi)])
		if lo != hi {
			out = append(out, run[max(lo, hi)])
		}
	}
	return out
}

// ema is the bias-corrected exponential moving average of pts' values with the given decay.
func ema(pts plotter.XYs, decay float64) plotter.XYs {
	out := make(plotter.XYs, len(pts))
	var avg, weight float64
	for i, pt := range pts {
		avg = decay*avg + (1-decay)*pt.Y
		weight = decay*weight + (1 - decay)
		out[i] = plotter.XY{X: pt.X, Y: avg / weight}
	}
	return out
}

// padRange widens [lo, hi] by a margin (multiplicative on a log axis) and keeps it non-empty.
func padRange(lo, hi float64, logY bool) (float64, float64) {
	if logY {
		if lo == hi {
			return lo / 1.5, hi * 1.5
		}
		r := math.Pow(hi/lo, 0.04)
		return lo / r, hi * r
	}
	if lo == hi {
		d := math.Abs(lo) * 0.1
		if d == 0 { // an all-zero series: a unit axis, not one of ±1e-12
			d = 1
		}
		return lo - d, hi + d
	}
	d := (hi - lo) * 0.04
	if lo >= 0 && lo-d < 0 {
		return 0, hi + d // keep quantities that cannot be negative off negative ticks
	}
	return lo - d, hi + d
}
