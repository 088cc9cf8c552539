// Package runbook finds the manual procedures written in the docs as
// runnable shell blocks, so that a test can run them against the lab as an
// SRE would paste them: a fenced block whose info string is
//
//	```sh runbook=<procedure>
//
// is one step of <procedure>; its steps run in the order the docs give
// them (files in the order asked, blocks top to bottom). Markdown renders
// the block as plain sh: the marker is invisible to a reader. A check that
// must fail is written (! cmd): bash's errexit ignores a bare "! cmd".
package runbook

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// Step is one marked block.
type Step struct {
	Procedure string
	File      string
	Line      int // of the opening fence
	Script    string
}

// Where says where the step is written, for a failing test's message.
func (s Step) Where() string { return fmt.Sprintf("%s:%d", s.File, s.Line) }

// Parse returns the marked steps of the markdown files, by procedure.
// An unterminated marked block or a marker without a name is an error: a
// procedure a test silently skipped would rot again.
func Parse(files ...string) (map[string][]Step, error) {
	out := map[string][]Step{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		procs, err := ParseBytes(f, b)
		if err != nil {
			return nil, err
		}
		for name, steps := range procs {
			out[name] = append(out[name], steps...)
		}
	}
	return out, nil
}

// ParseBytes is Parse of one file's contents (an embedded doc), named file.
func ParseBytes(file string, b []byte) (map[string][]Step, error) {
	steps, err := parse(file, b)
	if err != nil {
		return nil, err
	}
	out := map[string][]Step{}
	for _, s := range steps {
		out[s.Procedure] = append(out[s.Procedure], s)
	}
	return out, nil
}

// Scripts is each procedure's whole script in one file's contents: its
// steps' scripts in order.
func Scripts(file string, b []byte) (map[string]string, error) {
	procs, err := ParseBytes(file, b)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, steps := range procs {
		for _, s := range steps {
			out[name] += s.Script
		}
	}
	return out, nil
}

func parse(file string, b []byte) ([]Step, error) {
	var (
		steps []Step
		cur   *Step
		body  strings.Builder
		fence string // the open fence (three or more ` or ~), "" outside a block
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if run := fenceRun(trimmed); run != "" && run[0] == fence[0] && len(run) >= len(fence) && len(run) == len(trimmed) {
				if cur != nil {
					cur.Script = body.String()
					steps = append(steps, *cur)
					cur = nil
				}
				fence = ""
				continue
			}
			if cur != nil {
				if strings.HasPrefix(trimmed, "! ") {
					return nil, fmt.Errorf("%s:%d: a check negated with a bare ! never stops a set -e script: write (! %s)", file, n, trimmed[2:])
				}
				body.WriteString(line)
				body.WriteByte('\n')
			}
			continue
		}
		if fence = fenceRun(trimmed); fence == "" {
			continue
		}
		name, marked, err := marker(strings.TrimSpace(trimmed[len(fence):]))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		if marked {
			cur = &Step{Procedure: name, File: file, Line: n}
			body.Reset()
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: runbook block of %q is never closed", file, cur.Line, cur.Procedure)
	}
	return steps, nil
}

// fenceRun is the run of ` or ~ (three or more) a fence line starts with.
func fenceRun(line string) string {
	if line == "" || line[0] != '`' && line[0] != '~' {
		return ""
	}
	n := len(line) - len(strings.TrimLeft(line, line[:1]))
	if n < 3 {
		return ""
	}
	return line[:n]
}

// marker reads a fence's info string: "sh runbook=<name>" marks a step.
func marker(info string) (name string, marked bool, err error) {
	fields := strings.Fields(info)
	for _, f := range fields {
		v, ok := strings.CutPrefix(f, "runbook=")
		if !ok {
			continue
		}
		if len(fields) == 0 || fields[0] != "sh" && fields[0] != "bash" {
			return "", false, fmt.Errorf("a runbook block must be sh or bash, not %q", fields[0])
		}
		if v == "" {
			return "", false, fmt.Errorf("runbook= without a procedure name")
		}
		return v, true, nil
	}
	return "", false, nil
}
