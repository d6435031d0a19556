package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// Charts are drawn here as inline SVG, by hand: a page that needs no
// script, no font and no network to show them.

const (
	chartW, chartH = 640, 260
	padL, padR     = 56, 16
	padT, padB     = 30, 52
)

// palette is for series; blues and warms for ordered categories, the
// trained staleness values and the masked ones.
var (
	palette = []string{"#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b7791f", "#c53030"}
	blues   = []string{"#1a365d", "#2a4e86", "#2b6cb0", "#3182ce", "#4299e1", "#63b3ed", "#90cdf4", "#bee3f8"}
	warms   = []string{"#f6ad55", "#ed8936", "#dd6b20", "#c05621", "#9c4221", "#7b341e"}
)

// stalenessColor colors staleness v: blues up to maxStaleness (trained),
// warms past it (masked), grey below 0.
func stalenessColor(v int64, maxStaleness int) string {
	switch {
	case v < 0:
		return "#718096"
	case v <= int64(maxStaleness):
		return blues[min(int(v), len(blues)-1)]
	}
	return warms[min(int(v)-maxStaleness-1, len(warms)-1)]
}

// series is one line of a line chart.
type series struct {
	Name   string
	Color  string
	Y      []float64 // one per x; NaN for none
	Dashed bool
}

// reference is a horizontal line, or a band when High > Low, for a
// recipe figure.
type reference struct {
	Label     string
	Low, High float64
	Color     string
}

type lineChart struct {
	Title, YLabel string
	X             []string // category labels (steps)
	Series        []series
	Refs          []reference
	Percent       bool
	// YMax, when set, is at least the top of the y axis.
	YMax float64
}

type svgBuf struct{ strings.Builder }

func (b *svgBuf) f(format string, args ...any) { fmt.Fprintf(&b.Builder, format, args...) }

func esc(s string) string { return html.EscapeString(s) }

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// fmtTick writes an axis value in at most four significant digits, so
// that 3 × 0.025 prints as 0.075.
func fmtTick(v float64, percent bool) string {
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) }
	switch {
	case percent:
		return g(100*v) + "%"
	case v >= 10000:
		return g(v/1000) + "k"
	}
	return g(v)
}

// frame draws the title, axes, y grid and x labels, and returns the
// scales.
func frame(b *svgBuf, title, ylabel string, xs []string, ymax float64, percent bool) (func(i int) float64, func(y float64) float64) {
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	n := max(len(xs), 1)
	x := func(i int) float64 { return padL + plotW*(float64(i)+0.5)/float64(n) }
	y := func(v float64) float64 { return padT + plotH*(1-v/ymax) }
	b.f(`<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`, chartW, chartH, chartW, chartH, esc(title))
	b.f(`<text x="%d" y="18" class="title">%s</text>`, padL, esc(title))
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		b.f(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" class="grid"/>`, padL, chartW-padR, y(v), y(v))
		b.f(`<text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>`, padL-6, y(v)+4, esc(fmtTick(v, percent)))
	}
	step := max(1, (n+19)/20)
	for i, l := range xs {
		if i%step == 0 || i == n-1 {
			b.f(`<text x="%.1f" y="%d" class="tick" text-anchor="middle">%s</text>`, x(i), chartH-padB+16, esc(l))
		}
	}
	b.f(`<line x1="%d" x2="%d" y1="%d" y2="%d" class="axis"/>`, padL, chartW-padR, chartH-padB, chartH-padB)
	b.f(`<text x="%d" y="%d" class="tick" text-anchor="middle">step</text>`, padL+int(plotW/2), chartH-padB+32)
	b.f(`<text transform="translate(14 %d) rotate(-90)" class="tick" text-anchor="middle">%s</text>`, padT+int(plotH/2), esc(ylabel))
	return x, y
}

func legend(b *svgBuf, items [][2]string) {
	xPos := float64(padL)
	for _, it := range items {
		b.f(`<rect x="%.1f" y="%d" width="10" height="10" fill="%s"/>`, xPos, chartH-14, it[1])
		b.f(`<text x="%.1f" y="%d" class="tick">%s</text>`, xPos+14, chartH-5, esc(it[0]))
		xPos += 24 + 6.5*float64(len(it[0]))
	}
}

func (c lineChart) SVG() template.HTML {
	ymax := c.YMax
	for _, s := range c.Series {
		for _, v := range s.Y {
			if !math.IsNaN(v) {
				ymax = max(ymax, v)
			}
		}
	}
	for _, r := range c.Refs {
		ymax = max(ymax, r.Low, r.High)
	}
	ymax = niceMax(ymax * 1.05)
	var b svgBuf
	x, y := frame(&b, c.Title, c.YLabel, c.X, ymax, c.Percent)
	for _, r := range c.Refs {
		if r.High > r.Low {
			b.f(`<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s" opacity="0.15"><title>%s</title></rect>`,
				padL, y(r.High), chartW-padL-padR, y(r.Low)-y(r.High), r.Color, esc(r.Label))
		} else {
			b.f(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" class="ref"><title>%s</title></line>`, padL, chartW-padR, y(r.Low), y(r.Low), r.Color, esc(r.Label))
		}
		b.f(`<text x="%d" y="%.1f" class="reflabel" text-anchor="end" fill="%s">%s</text>`, chartW-padR-2, y(max(r.Low, r.High))-3, r.Color, esc(r.Label))
	}
	var items [][2]string
	for _, s := range c.Series {
		var pts []string
		for i, v := range s.Y {
			if math.IsNaN(v) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
			b.f(`<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s, step %s: %s</title></circle>`, x(i), y(v), s.Color, esc(s.Name), esc(c.X[i]), esc(fmtValue(v, c.Percent)))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="4 3"`
		}
		if len(pts) > 1 {
			b.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, strings.Join(pts, " "), s.Color, dash)
		}
		items = append(items, [2]string{s.Name, s.Color})
	}
	legend(&b, items)
	b.f(`</svg>`)
	return template.HTML(b.String())
}

func fmtValue(v float64, percent bool) string {
	if percent {
		return strconv.FormatFloat(100*v, 'f', 2, 64) + "%"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// stackedChart draws one bar per x, stacked from the segments.
type stackedChart struct {
	Title, YLabel string
	X             []string
	// Segments are the stack's layers, bottom first: a name, a color and
	// one value per x.
	Segments []series
	Percent  bool
}

func (c stackedChart) SVG() template.HTML {
	ymax := 0.0
	for i := range c.X {
		sum := 0.0
		for _, s := range c.Segments {
			sum += s.Y[i]
		}
		ymax = max(ymax, sum)
	}
	ymax = niceMax(ymax)
	var b svgBuf
	x, y := frame(&b, c.Title, c.YLabel, c.X, ymax, c.Percent)
	bw := 0.7 * float64(chartW-padL-padR) / float64(max(len(c.X), 1))
	for i := range c.X {
		base := 0.0
		for _, s := range c.Segments {
			v := s.Y[i]
			if v <= 0 {
				continue
			}
			b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>step %s, %s: %s</title></rect>`,
				x(i)-bw/2, y(base+v), bw, y(base)-y(base+v), s.Color, esc(c.X[i]), esc(s.Name), esc(fmtValue(v, c.Percent)))
			base += v
		}
	}
	var items [][2]string
	for _, s := range c.Segments {
		items = append(items, [2]string{s.Name, s.Color})
	}
	legend(&b, items)
	b.f(`</svg>`)
	return template.HTML(b.String())
}

// barChart draws one bar per category, with optional reference marks.
type barChart struct {
	Title, YLabel, XLabel string
	X                     []string
	Y                     []float64
	Color                 string
	// Refs mark a reference value at some categories.
	Refs map[string]float64
	// RefLabel names the reference marks.
	RefLabel string
}

func (c barChart) SVG() template.HTML {
	ymax := 0.0
	for _, v := range c.Y {
		ymax = max(ymax, v)
	}
	for _, v := range c.Refs {
		ymax = max(ymax, v)
	}
	ymax = niceMax(ymax * 1.05)
	var b svgBuf
	x, y := frame(&b, c.Title, c.YLabel, c.X, ymax, false)
	bw := 0.6 * float64(chartW-padL-padR) / float64(max(len(c.X), 1))
	for i, v := range c.Y {
		b.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`,
			x(i)-bw/2, y(v), bw, y(0)-y(v), c.Color, esc(c.XLabel), esc(c.X[i]), esc(fmtValue(v, false)))
		if r, ok := c.Refs[c.X[i]]; ok {
			b.f(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#c53030" stroke-width="3"><title>%s: %s</title></line>`,
				x(i)-bw/2-4, x(i)+bw/2+4, y(r), y(r), esc(c.RefLabel), esc(fmtValue(r, false)))
		}
	}
	// The x axis of this chart is a category, not a step.
	b.f(`<rect x="%d" y="%d" width="200" height="14" fill="#fff"/>`, padL+int(float64(chartW-padL-padR)/2)-100, chartH-padB+21)
	b.f(`<text x="%d" y="%d" class="tick" text-anchor="middle">%s</text>`, padL+(chartW-padL-padR)/2, chartH-padB+32, esc(c.XLabel))
	items := [][2]string{{c.YLabel, c.Color}}
	if len(c.Refs) > 0 {
		items = append(items, [2]string{c.RefLabel, "#c53030"})
	}
	legend(&b, items)
	b.f(`</svg>`)
	return template.HTML(b.String())
}
