package viz

import (
	"fmt"
	"image/color"
	"math"
	"strings"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// AttentionPanel is one head's attention over T tokens: Probs[query*T+key].
type AttentionPanel struct {
	Title string
	Probs []float64
}

// AttentionOptions lay out attention heatmaps: Panels fill a grid of Cols columns row by row,
// every panel over the same Tokens, with one colour bar for probabilities 0..1. A lone panel
// goes without its title (the figure's says it all).
type AttentionOptions struct {
	Title     string
	Tokens    []string // axis labels, one per position (see TokenLabel)
	Panels    []AttentionPanel
	Cols      int       // panels per row (default: all in one row)
	PanelSize vg.Length // side of one panel including its axes (default 3 inches)
	// Bidirectional draws every key of every row (an encoder's attention); by default the keys
	// after the query are the causal mask's, drawn grey.
	Bidirectional bool
}

// TokenLabel makes a decoded token readable as an axis label: spaces become "·", newlines,
// tabs and other control characters are escaped, and long tokens are cut to max runes.
func TokenLabel(tok string, max int) string {
	var b strings.Builder
	for _, r := range tok {
		switch {
		case r == ' ':
			b.WriteRune('·')
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteRune('?')
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	s := b.String()
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max-1]) + "…"
	}
	if s == "" {
		s = "∅"
	}
	return s
}

// attentionColors runs from near-white (probability 0) to dark blue (1), with luminance
// proportional to the value (ColorBrewer's YlGnBu controls, interpolated by moreland).
func attentionColors() palette.ColorMap {
	controls := []color.Color{
		color.RGBA{8, 29, 88, 255}, color.RGBA{37, 52, 148, 255}, color.RGBA{34, 94, 168, 255},
		color.RGBA{29, 145, 192, 255}, color.RGBA{65, 182, 196, 255}, color.RGBA{127, 205, 187, 255},
		color.RGBA{199, 233, 180, 255}, color.RGBA{237, 248, 177, 255}, color.RGBA{255, 255, 217, 255},
	}
	cmap, err := moreland.NewLuminance(controls)
	if err != nil {
		panic(err) // the controls above are fixed and ordered by luminance
	}
	cmap.SetMin(0)
	cmap.SetMax(1)
	return palette.Reverse(cmap)
}

// maskedColor fills the entries the causal mask hides (keys after the query).
var maskedColor = color.Gray{Y: 232}

// attnGrid adapts a (T,T) map to plotter.GridXYZ with query 0 at the top row.
type attnGrid struct {
	probs  []float64
	T      int
	causal bool
}

func (g attnGrid) Dims() (c, r int) { return g.T, g.T }
func (g attnGrid) X(c int) float64  { return float64(c) }
func (g attnGrid) Y(r int) float64  { return float64(r) }
func (g attnGrid) query(r int) int  { return g.T - 1 - r }
func (g attnGrid) Z(c, r int) float64 {
	if g.causal && c > g.query(r) {
		return math.NaN()
	}
	return g.probs[g.query(r)*g.T+c]
}

// Attention draws the panels as heatmaps, queries down the side and keys along the bottom, each
// labelled with its token.
func Attention(opt AttentionOptions) (*Figure, error) {
	T := len(opt.Tokens)
	if T == 0 || len(opt.Panels) == 0 {
		return nil, fmt.Errorf("attention figure needs tokens and at least one panel")
	}
	for _, p := range opt.Panels {
		if len(p.Probs) != T*T {
			return nil, fmt.Errorf("panel %q holds %d values, want %d for %d tokens", p.Title, len(p.Probs), T*T, T)
		}
	}
	cols := opt.Cols
	if cols <= 0 || cols > len(opt.Panels) {
		cols = len(opt.Panels)
	}
	rows := (len(opt.Panels) + cols - 1) / cols
	size := opt.PanelSize
	if size == 0 {
		size = 3 * vg.Inch
	}
	// One token's cell is roughly size*0.8/T; the labels take 80% of it, from 4 to 9 points,
	// and when even 4 points does not fit only every n-th token is labelled.
	cell := size * 0.8 / vg.Length(T)
	fontSize := min(max(cell*0.8, 4), 9)
	every := max(1, int(math.Ceil(float64(4/cell))))
	cmap := attentionColors()
	pal := cmap.Palette(256)

	plots := make([]*plot.Plot, len(opt.Panels))
	for i, panel := range opt.Panels {
		p := newPlot(max(fontSize+1, 8))
		if len(opt.Panels) > 1 {
			p.Title.Text = panel.Title
		}
		p.Title.TextStyle.Font.Size = 9
		grid := attnGrid{probs: panel.Probs, T: T, causal: !opt.Bidirectional}
		hm := plotter.NewHeatMap(grid, pal)
		hm.Min, hm.Max, hm.NaN = 0, 1, maskedColor
		p.Add(hm)
		var xt, yt plot.ConstantTicks
		for pos := 0; pos < T; pos += every {
			xt = append(xt, plot.Tick{Value: float64(pos), Label: opt.Tokens[pos]})
			yt = append(yt, plot.Tick{Value: float64(grid.query(pos)), Label: opt.Tokens[pos]})
		}
		p.X.Tick.Marker, p.Y.Tick.Marker = xt, yt
		for _, ax := range []*plot.Axis{&p.X, &p.Y} {
			ax.Tick.Label.Font.Size = fontSize
			ax.Tick.Length = 2
			ax.Label.TextStyle.Font.Size = 9
		}
		// Rotate the key labels when they are wider than a cell. gonum anchors them a font
		// descent too high, so longer tick marks keep them off the axis line.
		widest := vg.Length(0)
		for _, tk := range xt {
			widest = max(widest, p.X.Tick.Label.Width(tk.Label))
		}
		if widest > cell*vg.Length(every)*0.9 {
			p.X.Tick.Label.Rotation = math.Pi / 2
			p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
			p.X.Tick.Length = p.X.Tick.Label.FontExtents().Descent + 2
		}
		if i%cols == 0 {
			p.Y.Label.Text = "query (attends from)"
		}
		if i/cols == rows-1 || i+cols >= len(opt.Panels) {
			p.X.Label.Text = "key (attended to)"
		}
		plots[i] = p
	}

	bar := newPlot(9)
	bar.Add(&plotter.ColorBar{ColorMap: cmap, Vertical: true})
	bar.HideX()
	bar.Y.Label.Text = "attention probability"
	bar.Y.Tick.Marker = NiceTicks{Major: 5}
	barWidth := 0.85 * vg.Inch

	// Size the tiles so that each panel's data area is a square of side size minus the x axis
	// and title: measure the axes on a probe canvas. Columns differ in width by their y axes.
	probe := draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: size, Y: size}}}
	var axisH vg.Length
	axisW := make([]vg.Length, cols)
	for i, p := range plots {
		dc := p.DataCanvas(probe)
		axisW[i%cols] = max(axisW[i%cols], size-(dc.Max.X-dc.Min.X))
		axisH = max(axisH, size-(dc.Max.Y-dc.Min.Y))
	}
	pad := vg.Length(6)
	colX := make([]vg.Length, cols+1) // left edge of each column, then of the colour bar
	for col := range cols {
		colX[col+1] = colX[col] + size - axisH + axisW[col] + pad
	}
	titleHeight := vg.Length(0)
	if opt.Title != "" {
		titleHeight = 24
	}
	width := colX[cols] + barWidth + 8
	height := (size+pad)*vg.Length(rows) + titleHeight + 6
	return &Figure{Width: width, Height: height, draw: func(c draw.Canvas) {
		c = draw.Crop(c, 4, -4, 2, -4)
		if opt.Title != "" {
			c = label(c, opt.Title, 12)
		}
		for i, p := range plots {
			col, row := i%cols, i/cols
			tile := c
			tile.Min.X, tile.Max.X = c.Min.X+colX[col], c.Min.X+colX[col+1]-pad
			tile.Max.Y = c.Max.Y - vg.Length(row)*(size+pad)
			tile.Min.Y = tile.Max.Y - size
			// Keep every data area square whatever the rounding of the measurement.
			dc := p.DataCanvas(tile)
			if w, h := dc.Max.X-dc.Min.X, dc.Max.Y-dc.Min.Y; w > h {
				tile.Max.X -= w - h
			} else {
				tile.Min.Y += h - w
			}
			p.Draw(tile)
		}
		barC := c
		barC.Min.X = c.Min.X + colX[cols]
		barC.Max.X = barC.Min.X + barWidth
		barC = draw.Crop(barC, 12, -6, size*0.1, -size*0.1)
		bar.Draw(barC)
	}}, nil
}
