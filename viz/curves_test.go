package viz

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"reflect"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// syntheticLog is a run of n steps with a decaying loss, an evaluation every 10 steps and a
// warmup-then-decay learning rate.
func syntheticLog(n int, scale float64) string {
	var b strings.Builder
	for s := 1; s <= n; s++ {
		loss := scale * (1.5 + 3*math.Exp(-float64(s)/30) + 0.1*math.Sin(float64(s)))
		lr := 1e-3 * math.Min(1, float64(s)/20) * (1 - 0.9*float64(s)/float64(n))
		fmt.Fprintf(&b, `{"step":%d,"loss":%g,"lr":%g,"grad_norm":%g,"ms":12.5,"tok_s":4000}`+"\n", s, loss, lr, 1/float64(s))
		if s%10 == 0 {
			fmt.Fprintf(&b, `{"step":%d,"val_loss":%g}`+"\n", s, loss+0.2)
		}
	}
	return b.String()
}

func TestParseLog(t *testing.T) {
	text := `{"step":1,"loss":5,"lr":0.1}
{"step":2,"loss":4,"lr":0.2}
{"step":2,"val_loss":4.5}
{"step":3,"loss":3.5,"lr":0.3,"note":"x"}
{"step":3,"loss":"NaN"}

{"step":2,"loss":3.9,"lr":0.25}
{"step":3,"loss":3.4,"lr":0.3}
{"step":4,"loss":3.`
	l, err := ParseLog(strings.NewReader(text), "run")
	if err != nil {
		t.Fatal(err)
	}
	// The resume from step 2 replaced steps 2 and 3; the torn last line is ignored; non-numbers
	// are skipped.
	want := map[string]*Series{
		"loss":     {Steps: []float64{1, 2, 3}, Values: []float64{5, 3.9, 3.4}},
		"lr":       {Steps: []float64{1, 2, 3}, Values: []float64{0.1, 0.25, 0.3}},
		"val_loss": {Steps: []float64{2}, Values: []float64{4.5}},
	}
	if !reflect.DeepEqual(l.Metrics, want) {
		for k, s := range l.Metrics {
			t.Logf("%s: %v %v", k, s.Steps, s.Values)
		}
		t.Fatal("parsed log differs")
	}
	if got := MetricNames([]*Log{l}); !reflect.DeepEqual(got, []string{"loss", "lr", "val_loss"}) {
		t.Errorf("MetricNames = %v", got)
	}
}

func TestParseLogErrors(t *testing.T) {
	for _, text := range []string{
		"{\"step\":1,\"loss\":5}\nnot json\n{\"step\":2,\"loss\":4}\n",
		"{\"loss\":5}\n{\"step\":2,\"loss\":4}\n",
	} {
		if _, err := ParseLog(strings.NewReader(text), "run"); err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("ParseLog(%q): error %v, want one naming the line", text, err)
		}
	}
}

// renderPNG returns a function that renders a figure (straight from Curves or Attention) to
// PNG, decodes it and checks its size at DPI.
func renderPNG(t *testing.T) func(*Figure, error) image.Image {
	return func(f *Figure, err error) image.Image {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		b, err := f.PNG()
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		w, h := int(math.Round(float64(f.Width/vg.Inch)*DPI)), int(math.Round(float64(f.Height/vg.Inch)*DPI))
		if got := img.Bounds().Size(); math.Abs(float64(got.X-w)) > 1 || math.Abs(float64(got.Y-h)) > 1 {
			t.Fatalf("PNG is %v, want %dx%d", got, w, h)
		}
		return img
	}
}

// countColor counts the pixels within r that are within tol (per 8-bit channel) of c.
func countColor(img image.Image, r image.Rectangle, c color.Color, tol int) int {
	cr, cg, cb, _ := c.RGBA()
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			d := max(abs(int(pr>>8)-int(cr>>8)), abs(int(pg>>8)-int(cg>>8)), abs(int(pb>>8)-int(cb>>8)))
			if d <= tol {
				n++
			}
		}
	}
	return n
}

func abs(x int) int { return max(x, -x) }

// inner is the middle of an image, inside any axes and titles.
func inner(img image.Image, frac float64) image.Rectangle {
	b := img.Bounds()
	dx, dy := int(float64(b.Dx())*frac), int(float64(b.Dy())*frac)
	return image.Rect(b.Min.X+dx, b.Min.Y+dy, b.Max.X-dx, b.Max.Y-dy)
}

func TestCurvesPNG(t *testing.T) {
	a, err := ParseLog(strings.NewReader(syntheticLog(200, 1)), "run-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseLog(strings.NewReader(syntheticLog(150, 1.2)), "run-b")
	if err != nil {
		t.Fatal(err)
	}
	for _, logY := range []bool{false, true} {
		img := renderPNG(t)(Curves([]*Log{a, b}, CurvesOptions{LogY: logY, Smooth: 0.8}))
		area := inner(img, 0.15)
		white := countColor(img, area, color.White, 0)
		if white == area.Dx()*area.Dy() {
			t.Fatalf("log-y %v: the plot area is blank", logY)
		}
		// Both runs' colours are drawn, in the plot area and not only in the legend.
		for i := range 2 {
			if n := countColor(img, area, runColor(i), 30); n < 100 {
				t.Errorf("log-y %v: run %d's colour covers %d pixels of the plot area, want >= 100", logY, i, n)
			}
		}
	}
}

func TestCurvesSVG(t *testing.T) {
	l, err := ParseLog(strings.NewReader(syntheticLog(50, 1)), "my-run")
	if err != nil {
		t.Fatal(err)
	}
	fig, err := Curves([]*Log{l}, CurvesOptions{Panels: []string{"loss", "grad_norm"}})
	if err != nil {
		t.Fatal(err)
	}
	svg, err := fig.SVG()
	if err != nil {
		t.Fatal(err)
	}
	s := string(svg)
	for _, want := range []string{"<svg", "my-run", "gradient norm", "step", "train", "val", "</svg>"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

// BERT's masked-token accuracy is drawn as the loss is: train and val in one panel, under
// its own label.
func TestCurvesBERTAccuracy(t *testing.T) {
	var log strings.Builder
	for s := 1; s <= 40; s++ {
		fmt.Fprintf(&log, `{"step":%d,"loss":%g,"acc":%g}`+"\n", s, 4/float64(s), 0.5-0.4/float64(s))
		if s%10 == 0 {
			fmt.Fprintf(&log, `{"step":%d,"val_loss":%g,"val_acc":%g}`+"\n", s, 4.2/float64(s), 0.45-0.4/float64(s))
		}
	}
	l, err := ParseLog(strings.NewReader(log.String()), "bert-run")
	if err != nil {
		t.Fatal(err)
	}
	fig, err := Curves([]*Log{l}, CurvesOptions{Panels: []string{"acc"}})
	if err != nil {
		t.Fatal(err)
	}
	svg, err := fig.SVG()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{">masked-token accuracy<", ">train<", ">val<"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("the accuracy panel's SVG lacks %q", want)
		}
	}
}

func TestCurvesErrors(t *testing.T) {
	l, err := ParseLog(strings.NewReader(syntheticLog(20, 1)), "run")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Curves([]*Log{l}, CurvesOptions{Panels: []string{"perplexity"}}); err == nil || !strings.Contains(err.Error(), "grad_norm") {
		t.Errorf("unknown metric: error %v, want one listing the logged metrics", err)
	}
	empty, err := ParseLog(strings.NewReader(""), "empty")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Curves([]*Log{empty}, CurvesOptions{}); err == nil || !strings.Contains(err.Error(), "no entries") {
		t.Errorf("empty log: error %v, want one saying it has no entries", err)
	}
	if _, err := Curves(nil, CurvesOptions{}); err == nil {
		t.Error("no runs: no error")
	}
	for _, s := range []float64{1, -0.5, math.NaN()} {
		if _, err := Curves([]*Log{l}, CurvesOptions{Smooth: s}); err == nil {
			t.Errorf("smoothing %g: no error", s)
		}
	}
	// A constant quantity and a log axis over values that include 0 still draw.
	flat, err := ParseLog(strings.NewReader("{\"step\":1,\"lr\":0}\n{\"step\":2,\"lr\":0.001}\n{\"step\":3,\"lr\":0.001}\n"), "flat")
	if err != nil {
		t.Fatal(err)
	}
	for _, logY := range []bool{false, true} {
		fig, err := Curves([]*Log{flat}, CurvesOptions{Panels: []string{"lr"}, LogY: logY})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fig.PNG(); err != nil {
			t.Fatal(err)
		}
	}
}

// A log that ends in an error entry (a non-finite loss stopped the run) says so, and a resume
// that went on past it clears it.
func TestLogError(t *testing.T) {
	stopped, err := ParseLog(strings.NewReader("{\"step\":1,\"loss\":2}\n{\"error\":\"non-finite\",\"loss\":\"NaN\",\"step\":2}\n"), "x")
	if err != nil || stopped.Error != "non-finite at step 2" {
		t.Errorf("stopped run: %q, %v", stopped.Error, err)
	}
	resumed, err := ParseLog(strings.NewReader("{\"step\":1,\"loss\":2}\n{\"error\":\"non-finite\",\"loss\":\"NaN\",\"step\":2}\n{\"step\":2,\"loss\":1.5}\n"), "x")
	if err != nil || resumed.Error != "" {
		t.Errorf("resumed run: %q, %v", resumed.Error, err)
	}
}

// A long series is drawn with at most maxDrawn points that keep each stretch's lowest and
// highest value in order; a short one as it is.
func TestThin(t *testing.T) {
	var pts plotter.XYs
	for i := range 100_000 {
		pts = append(pts, plotter.XY{X: float64(i), Y: math.Sin(float64(i) / 50)})
	}
	pts[77_777].Y = 5 // a spike survives
	got := thin(pts)
	if len(got) > maxDrawn || len(got) < maxDrawn/2 {
		t.Fatalf("%d points, want at most %d", len(got), maxDrawn)
	}
	spike := false
	for i, pt := range got {
		if i > 0 && pt.X <= got[i-1].X {
			t.Fatalf("points out of order at %d", i)
		}
		spike = spike || pt.Y == 5
	}
	if !spike {
		t.Error("the spike was thinned away")
	}
	if short := pts[:500]; len(thin(short)) != 500 {
		t.Error("a short series was thinned")
	}
}
