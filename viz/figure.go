// Package viz draws what happens inside training: loss and learning-rate curves from a run's
// log.jsonl, and attention maps as heatmaps over the tokens of a text. Every picture is a Figure
// that renders to PNG or SVG bytes, so the same drawing serves the CLI's files and an HTML report.
// It uses gonum.org/v1/plot for canvases, axes, text and colour maps.
package viz

import (
	"bytes"
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/gpt2go/gpt2go/internal/atomicfile"
)

// DPI is the resolution of PNG output.
const DPI = 110

// Figure is a drawing of a fixed size, rendered on demand to PNG or SVG.
type Figure struct {
	Width, Height vg.Length
	draw          func(c draw.Canvas)
}

// PNG renders the figure at DPI dots per inch on a white background.
func (f *Figure) PNG() ([]byte, error) {
	c := vgimg.NewWith(vgimg.UseWH(f.Width, f.Height), vgimg.UseDPI(DPI), vgimg.UseBackgroundColor(color.White))
	f.draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode png: %w", err)
	}
	return buf.Bytes(), nil
}

// SVG renders the figure as a standalone SVG document (fonts referenced by name, not embedded).
func (f *Figure) SVG() ([]byte, error) {
	c := vgsvg.NewWith(vgsvg.UseWH(f.Width, f.Height), vgsvg.EmbedFonts(false))
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	f.draw(dc)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode svg: %w", err)
	}
	return buf.Bytes(), nil
}

// Save writes the figure to path as PNG or SVG, chosen by the file's extension.
func (f *Figure) Save(path string) error {
	var b []byte
	var err error
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		b, err = f.PNG()
	case ".svg":
		b, err = f.SVG()
	default:
		return fmt.Errorf("cannot write %s: unknown image type %q; use .png or .svg", path, ext)
	}
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, b)
}

// sans is the typeface of every label: gonum's default is a serif.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// newPlot makes a plot with sans-serif text: title at size+2 points, axis labels at size,
// tick labels and legend at size-1.
func newPlot(size vg.Length) *plot.Plot {
	p := plot.New()
	p.Title.TextStyle.Font = font.From(sans, size+2)
	p.Title.Padding = size / 2
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = font.From(sans, size)
		ax.Tick.Label.Font = font.From(sans, size-1)
		ax.Tick.Length = size / 2
		ax.Padding = 0
	}
	p.Legend.TextStyle.Font = font.From(sans, size-1)
	return p
}

// label draws one line of text centred at the top of c and returns c without that strip.
func label(c draw.Canvas, s string, size vg.Length) draw.Canvas {
	sty := text.Style{
		Color: color.Black, Font: font.From(sans, size), XAlign: draw.XCenter, YAlign: draw.YTop,
		Handler: plot.DefaultTextHandler,
	}
	c.FillText(sty, vg.Point{X: c.Center().X, Y: c.Max.Y}, s)
	c.Max.Y -= sty.Height(s) + size/2
	return c
}

// runColors are distinguishable line colours (Tableau 10), one per run.
var runColors = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
	color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255}, color.RGBA{188, 189, 34, 255},
	color.RGBA{23, 190, 207, 255},
}

func runColor(i int) color.Color { return runColors[i%len(runColors)] }

// faded mixes c with white, keeping share of the colour.
func faded(c color.Color, share float64) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8(float64(v>>8)*share + 255*(1-share)) }
	return color.RGBA{mix(r), mix(g), mix(b), 255}
}
