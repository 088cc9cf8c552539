package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"strconv"
)

// dashboard is the part of the Grafana dashboard JSON the renderer reads:
// the variables, and each panel's title, type, place on Grafana's 24-column
// grid, queries and the field config that says how values are shown.
type dashboard struct {
	Title      string `json:"title"`
	Templating struct {
		List []dashboardVar `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type dashboardVar struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets     []target `json:"targets"`
	FieldConfig struct {
		Defaults  fieldDefaults `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

type target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Instant      bool   `json:"instant"`
	Hide         bool   `json:"hide"`
}

type fieldDefaults struct {
	Unit     string   `json:"unit"`
	Decimals *int     `json:"decimals"`
	Min      *float64 `json:"min"`
	Max      *float64 `json:"max"`
	Color    struct {
		Mode       string `json:"mode"`
		FixedColor string `json:"fixedColor"`
	} `json:"color"`
	Mappings []struct {
		Type    string `json:"type"`
		Options map[string]struct {
			Text  string `json:"text"`
			Color string `json:"color"`
			Index int    `json:"index"`
		} `json:"options"`
	} `json:"mappings"`
	Thresholds struct {
		Steps []struct {
			Color string   `json:"color"`
			Value *float64 `json:"value"`
		} `json:"steps"`
	} `json:"thresholds"`
	Custom struct {
		DrawStyle         string `json:"drawStyle"`
		LineInterpolation string `json:"lineInterpolation"`
		Stacking          struct {
			Mode string `json:"mode"`
		} `json:"stacking"`
		ThresholdsStyle struct {
			Mode string `json:"mode"`
		} `json:"thresholdsStyle"`
	} `json:"custom"`
}

func readDashboard(path string) (dashboard, error) {
	var d dashboard
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// valueMapping is one entry of a panel's value mappings.
type valueMapping struct {
	text  string
	color color.RGBA
	index int
}

// mapValue applies the panel's value mappings (type "value") to v.
func (f fieldDefaults) mapValue(v float64) (valueMapping, bool) {
	key := strconv.FormatFloat(v, 'f', -1, 64)
	for _, m := range f.Mappings {
		if m.Type != "value" {
			continue
		}
		if o, ok := m.Options[key]; ok {
			return valueMapping{text: o.Text, color: grafanaColor(o.Color), index: o.Index}, true
		}
	}
	return valueMapping{}, false
}

// mappings lists the value mappings in their index order.
func (f fieldDefaults) mappings() []valueMapping {
	var out []valueMapping
	for _, m := range f.Mappings {
		for _, o := range m.Options {
			out = append(out, valueMapping{text: o.Text, color: grafanaColor(o.Color), index: o.Index})
		}
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].index < out[i].index {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// seriesColor is a series' color: a byName override's fixed color, the
// panel's fixed color, or the classic palette by the series' position.
func (p panel) seriesColor(name string, i int) color.RGBA {
	for _, o := range p.FieldConfig.Overrides {
		if o.Matcher.ID != "byName" || o.Matcher.Options != name {
			continue
		}
		for _, prop := range o.Properties {
			var c struct {
				Mode       string `json:"mode"`
				FixedColor string `json:"fixedColor"`
			}
			if prop.ID == "color" && json.Unmarshal(prop.Value, &c) == nil && c.FixedColor != "" {
				return grafanaColor(c.FixedColor)
			}
		}
	}
	if d := p.FieldConfig.Defaults.Color; d.Mode == "fixed" && d.FixedColor != "" {
		return grafanaColor(d.FixedColor)
	}
	return colPalette[i%len(colPalette)]
}

// grafanaColor maps Grafana's named colors (and #rrggbb) to the picture's.
func grafanaColor(name string) color.RGBA {
	switch name {
	case "green":
		return colGreen
	case "yellow":
		return colYellow
	case "orange":
		return colOrange
	case "red":
		return colRed
	case "dark-red":
		return colDarkRed
	case "blue":
		return colBlue
	case "purple":
		return colPurple
	case "transparent":
		return transparentC
	case "text":
		return colText
	}
	var r, g, b uint8
	if n, _ := fmt.Sscanf(name, "#%02x%02x%02x", &r, &g, &b); n == 3 {
		return rgb(r, g, b)
	}
	return colGrey
}

// format writes v in the panel's unit.
func (f fieldDefaults) format(v float64) string {
	switch f.Unit {
	case "s":
		return formatSeconds(v)
	case "Bps":
		return formatBytesRate(v)
	case "percentunit": // Grafana's "Percent (0.0-1.0)"
		return strconv.FormatFloat(v*100, 'f', 0, 64) + "%"
	}
	if f.Decimals != nil {
		return strconv.FormatFloat(v, 'f', *f.Decimals, 64)
	}
	return formatPlain(v)
}

// axisFormat writes an axis tick in the panel's unit; plain numbers keep the
// digits a tick needs (decimals is for the values, as in Grafana).
func (f fieldDefaults) axisFormat(v float64) string {
	switch f.Unit {
	case "s", "Bps", "percentunit":
		return f.format(v)
	}
	return formatPlain(v)
}
