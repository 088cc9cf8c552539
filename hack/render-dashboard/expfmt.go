package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Sample is one series of a scrape.
type Sample struct {
	Name   string            `json:"n"`
	Labels map[string]string `json:"l,omitempty"`
	Value  float64           `json:"v"`
}

// parseText reads the Prometheus text exposition format (version 0.0.4),
// keeping the samples whose name has prefix.
func parseText(r io.Reader, prefix string) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, prefix) {
			continue
		}
		s, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w: %q", n, err, line)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseLine(line string) (Sample, error) {
	s := Sample{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		s.Labels = map[string]string{}
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, "=")
			if eq < 0 || len(line) < eq+2 || line[eq+1] != '"' {
				return s, fmt.Errorf("bad label")
			}
			name := strings.TrimSpace(line[:eq])
			line = line[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(line); j++ {
				ch := line[j]
				if ch == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[j])
					}
					continue
				}
				if ch == '"' {
					break
				}
				val.WriteByte(ch)
			}
			if j >= len(line) {
				return s, fmt.Errorf("unterminated label value")
			}
			s.Labels[name] = val.String()
			line = line[j+1:]
		}
	}
	fields := strings.Fields(line)
	if len(fields) < 1 {
		return s, fmt.Errorf("no value")
	}
	v, err := parseFloat(fields[0])
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

func parseFloat(f string) (float64, error) {
	switch f {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(f, 64)
}

// key renders name{labels} in a stable order.
func (s Sample) key() string {
	names := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteByte('{')
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, s.Labels[k])
	}
	b.WriteByte('}')
	return b.String()
}
