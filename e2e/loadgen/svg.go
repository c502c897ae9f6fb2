package loadgen

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"time"
)

// SweepPoint is one open-loop run of a latency-against-load sweep.
type SweepPoint struct {
	// Offered and Achieved are requests per second.
	Offered, Achieved float64
	Latency           Summary
	// Unsent requests fell due but were never sent: the server could not
	// keep up with the offered load.
	Unsent uint64
}

// PointFrom makes a sweep point from an open-loop result.
func PointFrom(r *Result) SweepPoint {
	return SweepPoint{Offered: r.Rate, Achieved: r.Throughput, Latency: r.Latency, Unsent: r.Unsent}
}

// Chart geometry, in SVG user units.
const (
	svgW, svgH                     = 760, 460
	padL, padR, padT, padB float64 = 72, 150, 48, 56
)

type series struct {
	name  string
	color string
	dash  string
	value func(Summary) time.Duration
}

var plotSeries = []series{
	{"p50", "#1b9e77", "", func(s Summary) time.Duration { return s.P50 }},
	{"p90", "#7570b3", "", func(s Summary) time.Duration { return s.P90 }},
	{"p99", "#d95f02", "", func(s Summary) time.Duration { return s.P99 }},
	{"p99.9", "#e7298a", "6 4", func(s Summary) time.Duration { return s.P999 }},
}

// PlotSVG draws latency percentiles (log scale) against offered load as a
// self-contained SVG line chart.
func PlotSVG(title, subtitle string, points []SweepPoint) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%g" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%g" y="37" fill="#555">%s</text>`+"\n", padL, html.EscapeString(subtitle))
	plotW, plotH := svgW-padL-padR, svgH-padT-padB
	if len(points) == 0 {
		fmt.Fprintf(&b, `<text x="%g" y="%g">no data</text></svg>`+"\n", padL+plotW/2, padT+plotH/2)
		return b.Bytes()
	}

	// X: offered load, linear from 0.
	xMax := 0.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range points {
		xMax = max(xMax, p.Offered)
		for _, s := range plotSeries {
			if v := ms(s.value(p.Latency)); v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	xStep := niceStep(xMax / 6)
	xTop := math.Ceil(xMax*1.02/xStep) * xStep
	x := func(v float64) float64 { return padL + v/xTop*plotW }
	// Y: latency in ms, log10, whole decades.
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 1
	}
	yLo := math.Pow(10, math.Floor(math.Log10(lo)))
	yHi := math.Pow(10, math.Ceil(math.Log10(hi)))
	if yHi <= yLo {
		yHi = yLo * 10
	}
	y := func(v float64) float64 {
		v = max(v, yLo)
		return padT + plotH - (math.Log10(v)-math.Log10(yLo))/(math.Log10(yHi)-math.Log10(yLo))*plotH
	}

	// Grid and axes.
	for d := yLo; d <= yHi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > yHi*1.0001 {
				break
			}
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", padL, y(v), padL+plotW, y(v), stroke)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", padL-6, y(v), fmtMS(v))
		}
	}
	for v := 0.0; v <= xTop*1.0001; v += xStep {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x(v), padT, x(v), padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(v), padT+plotH+18, fmtCount(v))
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", padL, padT, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">offered load (requests/s)</text>`+"\n", padL+plotW/2, svgH-14.0)
	fmt.Fprintf(&b, `<text transform="translate(18 %g) rotate(-90)" text-anchor="middle">latency (ms, log scale)</text>`+"\n", padT+plotH/2)

	// Lines, markers, legend.
	for i, s := range plotSeries {
		var path bytes.Buffer
		for j, p := range points {
			cmd := "L"
			if j == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x(p.Offered), y(ms(s.value(p.Latency))))
		}
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", bytes.TrimSpace(path.Bytes()), s.color, dash)
		for _, p := range points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s at %s req/s offered</title></circle>`+"\n",
				x(p.Offered), y(ms(s.value(p.Latency))), s.color, s.name, fmtMS(ms(s.value(p.Latency)))+" ms", fmtCount(p.Offered))
		}
		ly := padT + 14 + float64(i)*20
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/>`+"\n", padL+plotW+14, ly, padL+plotW+40, ly, s.color, dash)
		fmt.Fprintf(&b, `<text x="%g" y="%g" dominant-baseline="middle">%s</text>`+"\n", padL+plotW+46, ly, s.name)
	}
	// Where the server fell behind: achieved below offered, or unsent.
	ly := padT + 14 + float64(len(plotSeries))*20 + 10
	fmt.Fprintf(&b, `<text x="%g" y="%g" fill="#555">achieved req/s:</text>`+"\n", padL+plotW+14, ly)
	for i, p := range points {
		mark := ""
		if p.Unsent > 0 || p.Achieved < 0.97*p.Offered {
			mark = " (behind)"
		}
		fmt.Fprintf(&b, `<text x="%g" y="%g" fill="#555">%s → %s%s</text>`+"\n", padL+plotW+14, ly+16*float64(i+1), fmtCount(p.Offered), fmtCount(p.Achieved), mark)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtMS(v float64) string {
	switch {
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.3g", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}

func fmtCount(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.3gk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}
