package report

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/respmeter/respmeter/metrics/hdrlog"
)

// Plot size; vgimg renders 96 dots per inch, so a PNG is 960×600 pixels.
const (
	plotWidth  = 10 * vg.Inch
	plotHeight = 6.25 * vg.Inch
)

// plotFont is the plot's typeface: Liberation Sans, metric-compatible with
// Arial and Helvetica, which the SVG names as its fallbacks
// (svgFontFamily) so that a viewer without Liberation still draws the
// labels at the widths the layout measured.
var plotFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

// svgFontFamily is the CSS font-family list the SVG gives its text:
// the measured face, its metric twins, then the generic family (CSS Fonts
// Level 3 §3.1: a list should end in a generic family).
const svgFontFamily = `font-family:'Liberation Sans',Arial,Helvetica,sans-serif;`

// fallbackWidth is how much wider than Liberation Sans a fallback face may
// draw a label before it leaves the plot: DejaVu Sans, the usual Linux
// sans-serif, is about 1.15× as wide for digits, DejaVu Sans Mono about
// 1.1×. The right margin holds the last x tick label at this width.
const fallbackWidth = 1.5

// ticksPerHalfDistance is the percentile resolution of the plotted lines,
// as HdrHistogram's outputPercentileDistribution (and so its plotter) uses.
const ticksPerHalfDistance = 5

// PlotOptions change how Plot draws.
type PlotOptions struct {
	// Linear draws the latency axis on a linear scale from 0 instead of
	// the default log scale, which keeps the percentiles below p99 from
	// being flattened by the tail.
	Linear bool
}

// Plot writes to path a percentile-distribution plot of logs, keyed by log
// name, as HdrHistogram's plotter (plotFiles.html) draws them: the x axis is
// the percentile on a log scale of 1/(1-p), ticked 0%, 90%, 99%, 99.9%, ...,
// the y axis the latency in milliseconds (the logs' microseconds / 1000) on
// a log scale by decades (values below the 1 µs floor drawn at it), or a
// linear one with opts.Linear, one line per tag with a non-empty histogram.
// Lines are named by tag, or by "name: tag" when there is more than one
// log; a tag has one colour and a log one dash pattern, and with more than
// one log each log's points also carry a marker shape of their own, so
// that identical lines of two logs stay apart. The 100th percentile (the max), which has no finite
// x, is drawn at the right end of the axis. The format follows path's
// extension, .svg or .png; any other fails, as does a plot with no line.
// Plot creates or truncates path, and removes it if it fails after that.
func Plot(path string, logs map[string]*hdrlog.Log, opts PlotOptions) (err error) {
	var render func(p *plot.Plot, w io.Writer) error
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png":
		render = func(p *plot.Plot, w io.Writer) error {
			c := vgimg.PngCanvas{Canvas: vgimg.New(plotWidth, plotHeight)}
			drawPlot(p, c)
			_, err := c.WriteTo(w)
			return err
		}
	case ".svg":
		render = func(p *plot.Plot, w io.Writer) error {
			c := vgsvg.New(plotWidth, plotHeight)
			drawPlot(p, c)
			// vgsvg names only the face it measured; give the
			// browser fallbacks (svgFontFamily).
			var buf bytes.Buffer
			if _, err := c.WriteTo(&buf); err != nil {
				return err
			}
			_, err := w.Write(bytes.ReplaceAll(buf.Bytes(),
				[]byte("font-family:Liberation Sans;"), []byte(svgFontFamily)))
			return err
		}
	default:
		return fmt.Errorf("report: plot %s: unknown format %q (want .svg or .png)", path, ext)
	}
	p, err := newPlot(logs, opts)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: plot: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("report: plot: %w", cerr)
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	if err := render(p, f); err != nil {
		return fmt.Errorf("report: plot %s: %w", path, err)
	}
	return nil
}

// plotBorder is the blank border around a plot: a browser's text box (the
// font's ascent and descent) is taller than the extents gonum lays out, by
// about a pixel at the edges.
const plotBorder = 2 * vg.Millimeter

// drawPlot draws p on c inside plotBorder, and with a right margin that
// keeps the last x tick label, centred on the axis end, inside c when a
// fallback face draws it fallbackWidth times as wide as measured: gonum
// lays the axis out so that half the measured width fits, the margin adds
// the rest.
func drawPlot(p *plot.Plot, c vg.CanvasSizer) {
	var w vg.Length
	if ticks := p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max); len(ticks) > 0 {
		w = p.X.Tick.Label.Width(ticks[len(ticks)-1].Label)
	}
	p.Draw(draw.Crop(draw.New(c), plotBorder, -plotBorder-(fallbackWidth-1)*w, plotBorder, -plotBorder))
}

// series is one plotted line: percentiles as 1/(1-p), latencies in ms.
type series struct {
	name    string
	tag, lg int // colour and dash indexes
	xys     plotter.XYs
	hasMax  bool // the last point is the 100th percentile; its X is set last
}

func newPlot(logs map[string]*hdrlog.Log, opts PlotOptions) (*plot.Plot, error) {
	names := make([]string, 0, len(logs))
	var tags []string
	for name, l := range logs {
		names = append(names, name)
		tags = append(tags, l.Tags()...)
	}
	slices.Sort(names)
	slices.Sort(tags)
	tags = slices.Compact(tags)

	var lines []series
	maxX, maxY, minY := 1.0, 0.0, math.Inf(1) // largest finite x, largest and smallest latency
	for li, name := range names {
		l := logs[name]
		for _, tag := range l.Tags() {
			h := l.Histogram(tag)
			if h.TotalCount() == 0 {
				continue
			}
			s := series{name: tagName(tag), tag: slices.Index(tags, tag), lg: li}
			if len(logs) > 1 {
				s.name = name + ": " + s.name
			}
			for _, b := range h.CumulativeDistributionWithTicks(ticksPerHalfDistance) {
				x := 1 / (1 - b.Quantile/100)
				if b.Quantile >= 100 || math.IsInf(x, 0) {
					x, s.hasMax = math.Inf(1), true
				} else {
					maxX = max(maxX, x)
				}
				y := float64(b.ValueAt) / 1000
				if !opts.Linear {
					y = max(y, floorMicros/1000.0) // a log axis has no 0
				}
				maxY, minY = max(maxY, y), min(minY, y)
				s.xys = append(s.xys, plotter.XY{X: x, Y: y})
			}
			lines = append(lines, s)
		}
	}
	if len(lines) == 0 {
		return nil, errors.New("report: plot: no histogram with values to plot")
	}
	// The axis ends at the first power of 10 past every finite point (at
	// least 99%), where the maxima are drawn.
	xEnd := math.Pow(10, max(2, math.Floor(math.Log10(maxX))+1))

	p := plot.New()
	p.Title.TextStyle.Font = font.From(plotFont, p.Title.TextStyle.Font.Size)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(plotFont, a.Label.TextStyle.Font.Size)
		a.Tick.Label.Font = font.From(plotFont, a.Tick.Label.Font.Size)
	}
	p.Legend.TextStyle.Font = font.From(plotFont, p.Legend.TextStyle.Font.Size)
	p.Title.Text = "Latency by Percentile Distribution"
	p.X.Label.Text = "Percentile"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.TickerFunc(percentileTicks)
	p.Y.Label.Text = "Latency (ms)"
	if !opts.Linear {
		p.Y.Label.Text = "Latency (ms, log scale)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	for _, s := range lines {
		if s.hasMax {
			s.xys[len(s.xys)-1].X = xEnd
		}
		line, points, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return nil, fmt.Errorf("report: plot %s: %w", s.name, err)
		}
		line.Color = plotutil.Color(s.tag)
		line.Dashes = plotutil.Dashes(s.lg + s.tag/len(plotutil.DefaultColors))
		line.Width = vg.Points(1.5)
		if len(logs) > 1 {
			points.Color = line.Color
			points.Shape = plotutil.Shape(s.lg)
			points.Radius = vg.Points(2.5)
			p.Add(line, points)
			p.Legend.Add(s.name, line, points)
		} else {
			p.Add(line)
			p.Legend.Add(s.name, line)
		}
	}
	p.X.Min, p.X.Max = 1, xEnd
	if opts.Linear {
		p.Y.Min, p.Y.Max = 0, maxY*1.05 // headroom under the title
	} else {
		// Whole decades around the lines: the log ticks mark each.
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(minY)))
		p.Y.Max = math.Pow(10, math.Ceil(math.Log10(maxY*1.05)))
		if p.Y.Max <= p.Y.Min {
			p.Y.Max = p.Y.Min * 10
		}
	}
	return p, nil
}

// percentileTicks marks each power of 10 of x = 1/(1-p) between min and max
// with its percentile: 1 is 0%, 10 is 90%, 100 is 99%, 1000 is 99.9%...
func percentileTicks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for k := math.Ceil(math.Log10(min)); k <= math.Floor(math.Log10(max)+1e-9); k++ {
		pct := 100 - 100/math.Pow(10, k)
		label := strconv.FormatFloat(pct, 'f', int(math.Max(k-2, 0)), 64) + "%"
		ticks = append(ticks, plot.Tick{Value: math.Pow(10, k), Label: label})
	}
	return ticks
}
