package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium finds a headless-capable Chromium, or skips the test saying how to get one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("GPT2GO_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("GPT2GO_REQUIRE_CHROMIUM") != "" {
		t.Fatal("GPT2GO_REQUIRE_CHROMIUM is set but no Chromium was found")
	}
	t.Skip("no Chromium found (apt-get install chromium, or set GPT2GO_CHROMIUM): the report's browser test did not run")
	return ""
}

// headless runs Chromium on a local file with the flags that keep it off the network.
func headless(t *testing.T, browser string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000", "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", browser, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func TestReportRendersInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model and starts a browser")
	}
	browser := chromium(t)
	dataDir := prepared(t)
	runDir := filepath.Join(t.TempDir(), "run")
	mustRun(t, trainArgs(dataDir, runDir, "--steps", "30", "--ckpt-every", "15", "--sample-every", "10")...)
	page := filepath.Join(t.TempDir(), "report.html")
	mustRun(t, "report", runDir, "--out", page)

	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"http://", "https://"} {
		// The page must not fetch anything: no external scripts, styles or images.
		if m := regexp.MustCompile(`(src|href)="` + bad).Find(html); m != nil {
			t.Errorf("report refers to the network: %s", m)
		}
	}

	// The DOM after load, from a copy of the page with one more script, which records where each
	// chart and picture landed and the stroke colours of each chart's SVG. It appends them as a
	// script element, which is not rendered, so the copy lays out as the page does. Both browser
	// runs are 1280 CSS pixels wide at scale 1 and nothing on the page depends on the window's
	// height, so the boxes hold in the full-height screenshot below.
	const layoutWindow = "--window-size=1280,1600"
	probe := filepath.Join(t.TempDir(), "probe.html")
	if err := os.WriteFile(probe, bytes.Replace(html, []byte("</body>"), []byte(layoutProbe+"</body>"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := headless(t, browser, "--dump-dom", layoutWindow, "--force-device-scale-factor=1", "file://"+probe)
	m := regexp.MustCompile(`data-ready="charts=(\d+) images=(\d+)/(\d+)"`).FindSubmatch(dom)
	if m == nil {
		t.Fatalf("the page did not finish loading in Chromium; title: %s", regexp.MustCompile(`<title>.*</title>`).Find(dom))
	}
	if string(m[1]) != "3" {
		t.Errorf("Chromium rendered %s charts, want 3 (loss, lr, throughput)", m[1])
	}
	if string(m[2]) != string(m[3]) {
		t.Errorf("only %s of %s images decoded", m[2], m[3])
	}
	for _, id := range []string{`id="chart-loss"`, `id="chart-lr"`, `id="chart-throughput"`, `id="samples"`, `id="config"`} {
		if !bytes.Contains(dom, []byte(id)) {
			t.Errorf("rendered page lacks %s", id)
		}
	}
	lm := regexp.MustCompile(`<script type="application/json" id="gpt2go-layout">(.*?)</script>`).FindSubmatch(dom)
	if lm == nil {
		t.Fatal("the layout probe left no record in the DOM")
	}
	var layout pageLayout
	if err := json.Unmarshal(lm[1], &layout); err != nil {
		t.Fatalf("layout probe: %v: %s", err, lm[1])
	}
	if len(layout.Charts) != 3 || len(layout.Images) == 0 {
		t.Fatalf("layout probe found %d charts and %d pictures, want 3 and at least 1", len(layout.Charts), len(layout.Images))
	}

	// A screenshot of the whole page: each chart's own box must show each of its curve colours,
	// and each picture's box must not be blank, so one chart or picture cannot stand in for another.
	shot := filepath.Join(t.TempDir(), "shot.png")
	headless(t, browser, "--screenshot="+shot, fmt.Sprintf("--window-size=1280,%d", layout.Height), "--force-device-scale-factor=1", "file://"+page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if dir := os.Getenv("GPT2GO_KEEP_SCREENSHOT"); dir != "" {
		b, _ := os.ReadFile(shot)
		os.WriteFile(filepath.Join(dir, "report-screenshot.png"), b, 0o644)
	}
	for _, c := range layout.Charts {
		r := c.rect()
		if !r.In(img.Bounds()) {
			t.Errorf("%s at %v lies outside the %v screenshot", c.ID, r, img.Bounds())
			continue
		}
		var curves []color.RGBA
		for _, rgb := range c.Strokes {
			if col := (color.RGBA{uint8(rgb[0]), uint8(rgb[1]), uint8(rgb[2]), 255}); saturated(col) {
				curves = append(curves, col)
			}
		}
		if len(curves) == 0 {
			t.Errorf("%s: its SVG strokes nothing in colour (strokes %v); the curves are missing", c.ID, c.Strokes)
		}
		for _, col := range curves {
			n := pixelsNear(img, r, col)
			if n < minCurvePixels {
				t.Errorf("%s: %d pixels of its curve colour %v in its box %v, want at least %d; the curve is not drawn", c.ID, n, col, r, minCurvePixels)
			}
			t.Logf("%s: %d pixels of curve colour %v in %v", c.ID, n, col, r)
		}
	}
	for i, p := range layout.Images {
		r := p.rect()
		if !r.In(img.Bounds()) || r.Empty() {
			t.Errorf("picture %d at %v lies outside the %v screenshot or is empty", i, r, img.Bounds())
			continue
		}
		n, area := nonWhitePixels(img, r), r.Dx()*r.Dy()
		if n < area/10 {
			t.Errorf("picture %d: %d of the %d pixels in its box %v differ from the white background; it is blank", i, n, area, r)
		}
		t.Logf("picture %d: %d of %d pixels not white in %v", i, n, area, r)
	}
}

// layoutProbe runs after the page's own script and records, in CSS pixels of the whole page, the
// box of each chart's SVG with the stroke colours its elements compute to, and each picture's box.
const layoutProbe = `<script>
window.addEventListener("load", function () {
  function box(el) {
    var r = el.getBoundingClientRect();
    return {x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height};
  }
  var out = {height: Math.ceil(document.documentElement.scrollHeight), charts: [], images: []};
  document.querySelectorAll(".chart").forEach(function (c) {
    var svg = c.querySelector("svg");
    if (!svg) return;
    var b = box(svg), seen = {};
    b.id = c.id; b.strokes = [];
    svg.querySelectorAll("*").forEach(function (e) {
      var m = /^rgba?\((\d+), (\d+), (\d+)/.exec(getComputedStyle(e).stroke);
      if (m && !seen[m[0]]) { seen[m[0]] = true; b.strokes.push([+m[1], +m[2], +m[3]]); }
    });
    out.charts.push(b);
  });
  document.querySelectorAll("img").forEach(function (i) { out.images.push(box(i)); });
  var s = document.createElement("script");
  s.type = "application/json"; s.id = "gpt2go-layout"; s.textContent = JSON.stringify(out);
  document.body.appendChild(s);
});
</script>
`

// pageLayout is what layoutProbe records.
type pageLayout struct {
	Height int `json:"height"`
	Charts []struct {
		ID string `json:"id"`
		pageBox
		Strokes [][3]int `json:"strokes"`
	} `json:"charts"`
	Images []pageBox `json:"images"`
}

type pageBox struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
	W float64 `json:"w"`
	H float64 `json:"h"`
}

// rect is the box in screenshot pixels (one per CSS pixel), shrunk to the pixels wholly inside.
func (b pageBox) rect() image.Rectangle {
	return image.Rect(int(math.Ceil(b.X)), int(math.Ceil(b.Y)), int(math.Floor(b.X+b.W)), int(math.Floor(b.Y+b.H)))
}

// minCurvePixels is how many pixels of each curve colour a chart must show. The sparsest chart
// here (learning rate and gradient norm, 1-pixel lines) shows ~650; the legends' sample lines
// alone show 20-60.
const minCurvePixels = 200

// saturated tells curve colours from the greys of grids, axes and text.
func saturated(c color.RGBA) bool {
	return max(c.R, c.G, c.B)-min(c.R, c.G, c.B) >= 48
}

// pixelsNear counts the pixels in r within 24 levels of col in each channel: a line's core, not
// its anti-aliased edge.
func pixelsNear(img image.Image, r image.Rectangle, col color.RGBA) int {
	near := func(a uint32, b uint8) bool { return max(int(a>>8)-int(b), int(b)-int(a>>8)) <= 24 }
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(pr, col.R) && near(pg, col.G) && near(pb, col.B) {
				n++
			}
		}
	}
	return n
}

// nonWhitePixels counts the pixels in r that are not (nearly) white.
func nonWhitePixels(img image.Image, r image.Rectangle) int {
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if min(pr, pg, pb)>>8 < 245 {
				n++
			}
		}
	}
	return n
}

// report and plot read a run's --log file when it is elsewhere (they read only RUN/log.jsonl),
// and report takes the run directory after its flags too.
func TestReportReadsCustomLog(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	logFile := filepath.Join(t.TempDir(), "elsewhere.jsonl")
	mustRun(t, trainArgs(prepared(t), run, "--steps", "4", "--log", logFile)...)
	html := filepath.Join(t.TempDir(), "r.html")
	mustRun(t, "report", "--out", html, run)
	if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), `id="chart-loss"`) {
		t.Errorf("report of a run logging to --log: %v", err)
	}
	mustRun(t, "plot", run, "--out", filepath.Join(t.TempDir(), "c.png"))
}

// An output file named by a folder is refused up front (it failed at the end with a rename
// error, and profile's only after profiling).
func TestOutputFolderRefused(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"report", "runs/x", "--out", dir},
		{"plot", "runs/x", "--out", dir},
		{"attn", "--ckpt", "runs/x", "--text", "a", "--out", dir},
		{"profile", "--trace", dir},
		{"profile", "--json", dir},
	} {
		mustFail(t, "is a folder; name the file to write, e.g. "+args[len(args)-2]+" "+filepath.Join(dir, ""), args...)
	}
}

// The report names its own flag when the --attn-text cannot be encoded (it said --text, attn's).
func TestReportAttnTextNamed(t *testing.T) {
	html := filepath.Join(t.TempDir(), "r.html")
	mustRun(t, "report", charRun(t), "--attn-text", "é", "--out", html)
	b, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(b), "Attention maps left out: --attn-text: ") {
		t.Errorf("report with an --attn-text outside the alphabet: %v; the page does not say --attn-text", err)
	}
}

// With a damaged newest checkpoint the report does as sample, eval and attn do with a run
// folder: its attention maps use the newest good checkpoint, and the Checkpoints table marks the
// damaged one (it listed it as fine and left the maps out).
func TestReportPassesOverDamagedCheckpoint(t *testing.T) {
	run := trainedRun(t) // checkpoints at 0, 5 and 10
	newest := filepath.Join(run, "checkpoints", "step_00000010.safetensors")
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0x40 // a bit flip in the data
	if err := os.WriteFile(newest, b, 0o644); err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(t.TempDir(), "r.html")
	mustRun(t, "report", run, "--out", html)
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"data:image/png;base64,",
		"step_00000010.safetensors (",
		"is corrupt (checksum mismatch); passed over",
		"the attention maps compare steps 0 and 5",
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the report of a run whose newest checkpoint is corrupt lacks %q", want)
		}
	}
	if strings.Contains(string(page), "Attention maps left out") {
		t.Error("the attention maps are left out")
	}
}
