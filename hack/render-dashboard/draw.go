package main

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"strings"
	"time"
)

// Grafana's dark theme, roughly.
var (
	colBackground = rgb(0x11, 0x12, 0x17)
	colPanel      = rgb(0x18, 0x1b, 0x1f)
	colBorder     = rgb(0x2a, 0x2d, 0x33)
	colGrid       = rgb(0x26, 0x29, 0x2e)
	colText       = rgb(0xcc, 0xcc, 0xdc)
	colMuted      = rgb(0x8e, 0x8e, 0x9e)
	colNoData     = rgb(0x22, 0x25, 0x2b)

	colGreen     = rgb(0x73, 0xbf, 0x69)
	colYellow    = rgb(0xfa, 0xde, 0x2a)
	colOrange    = rgb(0xff, 0x98, 0x30)
	colRed       = rgb(0xf2, 0x49, 0x5c)
	colDarkRed   = rgb(0xc4, 0x16, 0x2a)
	colBlue      = rgb(0x57, 0x94, 0xf2)
	colPurple    = rgb(0xb8, 0x77, 0xd9)
	colGrey      = rgb(0x8e, 0x8e, 0x8e)
	colTeal      = rgb(0x6c, 0xcf, 0x8e)
	colPalette   = []color.RGBA{colGreen, colYellow, colBlue, colOrange, colRed, colPurple, colTeal, rgb(0xff, 0x78, 0xb4), colGrey}
	transparentC = color.RGBA{}
)

func rgb(r, g, b uint8) color.RGBA { return color.RGBA{r, g, b, 0xff} }

// canvas is an RGBA image with the few primitives the panels need.
type canvas struct{ img *image.RGBA }

func newCanvas(w, h int, bg color.RGBA) *canvas {
	c := &canvas{img: image.NewRGBA(image.Rect(0, 0, w, h))}
	c.fill(0, 0, w, h, bg)
	return c
}

func (c *canvas) set(x, y int, col color.RGBA) {
	if !(image.Point{x, y}.In(c.img.Rect)) || col.A == 0 {
		return
	}
	if col.A == 0xff {
		c.img.SetRGBA(x, y, col)
		return
	}
	old := c.img.RGBAAt(x, y)
	a := float64(col.A) / 255
	mix := func(o, n uint8) uint8 { return uint8(float64(o)*(1-a) + float64(n)*a) }
	c.img.SetRGBA(x, y, rgb(mix(old.R, col.R), mix(old.G, col.G), mix(old.B, col.B)))
}

// fill paints the rectangle [x0,x1) x [y0,y1).
func (c *canvas) fill(x0, y0, x1, y1 int, col color.RGBA) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			c.set(x, y, col)
		}
	}
}

func (c *canvas) border(x0, y0, x1, y1 int, col color.RGBA) {
	c.fill(x0, y0, x1, y0+1, col)
	c.fill(x0, y1-1, x1, y1, col)
	c.fill(x0, y0, x0+1, y1, col)
	c.fill(x1-1, y0, x1, y1, col)
}

// line draws a line w pixels wide (Bresenham with a square pen).
func (c *canvas) line(x0, y0, x1, y1 int, col color.RGBA, w int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		c.fill(x0-w/2, y0-w/2, x0-w/2+w, y0-w/2+w, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
			y0 += sy
		}
	}
}

// dashed draws a horizontal dashed line.
func (c *canvas) dashed(x0, x1, y int, col color.RGBA) {
	for x := x0; x < x1; x += 8 {
		c.fill(x, y, min(x+4, x1), y+1, col)
	}
}

// text draws s with the 5x7 font at the given scale, top-left at (x, y), and
// returns its width.
func (c *canvas) text(x, y int, s string, scale int, col color.RGBA) int {
	cx := x
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			r = '?'
		}
		g := font5x7[r-0x20]
		for gx := 0; gx < 5; gx++ {
			for gy := 0; gy < 7; gy++ {
				if g[gx]&(1<<gy) != 0 {
					c.fill(cx+gx*scale, y+gy*scale, cx+(gx+1)*scale, y+(gy+1)*scale, col)
				}
			}
		}
		cx += 6 * scale
	}
	return cx - x
}

func textWidth(s string, scale int) int { return len(s) * 6 * scale }

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// box is a panel's plot area in pixels and the time range it shows.
type box struct {
	x0, y0, x1, y1 int
	t0, t1         time.Time
}

func (b box) x(t time.Time) int {
	f := float64(t.Sub(b.t0)) / float64(b.t1.Sub(b.t0))
	return b.x0 + int(math.Round(f*float64(b.x1-b.x0)))
}

// timeAxis draws time ticks (HH:MM:SS UTC) under the plot area.
func (c *canvas) timeAxis(b box) {
	span := b.t1.Sub(b.t0)
	step := 10 * time.Second
	for _, s := range []time.Duration{10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		step = s
		if span/s <= 6 {
			break
		}
	}
	for t := b.t0.Truncate(step).Add(step); t.Before(b.t1); t = t.Add(step) {
		x := b.x(t)
		c.fill(x, b.y0, x+1, b.y1, colGrid)
		lbl := t.UTC().Format("15:04:05")
		c.text(x-textWidth(lbl, 1)/2, b.y1+5, lbl, 1, colMuted)
	}
}

// valueAxis draws horizontal grid lines and labels for [lo, hi] and returns
// the function mapping a value to a y pixel.
func (c *canvas) valueAxis(b box, lo, hi float64, format func(float64) string) func(float64) int {
	if hi <= lo {
		hi = lo + 1
	}
	y := func(v float64) int {
		return b.y1 - int(math.Round((v-lo)/(hi-lo)*float64(b.y1-b.y0)))
	}
	step := niceStep((hi - lo) / 4)
	for v := math.Ceil(lo/step) * step; v <= hi+step/1e6; v += step {
		py := y(v)
		c.fill(b.x0, py, b.x1, py+1, colGrid)
		lbl := format(v)
		c.text(b.x0-8-textWidth(lbl, 1), py-3, lbl, 1, colMuted)
	}
	return y
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func formatPlain(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

func formatBytesRate(v float64) string {
	units := []string{"B/s", "KiB/s", "MiB/s", "GiB/s"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return formatPlain(math.Round(v*10)/10) + " " + units[i]
}

func formatSeconds(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.0f ms", v*1000)
	case v < 60:
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.1f min", v/60)
}

// legend draws colored swatches with names in a row from (x, y); it wraps
// at maxX and returns the y below it.
func (c *canvas) legend(x, y, maxX int, items []legendItem) int {
	cx := x
	for _, it := range items {
		w := 14 + textWidth(it.name, 1) + 14
		if cx+w > maxX && cx > x {
			cx, y = x, y+14
		}
		c.fill(cx, y+1, cx+10, y+7, it.color)
		c.text(cx+14, y, it.name, 1, colText)
		cx += w
	}
	return y + 14
}

type legendItem struct {
	name  string
	color color.RGBA
}
