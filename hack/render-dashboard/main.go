// Command render-dashboard draws the panels of the etcd-agent Grafana
// dashboard (deploy/grafana/etcd-agent-dashboard.json) to a PNG from the
// agents' own /metrics, without Grafana: each panel's own PromQL is evaluated
// by Prometheus's query engine over the recorded samples, and drawn with the
// Go standard library's image/png and a built-in 5x7 bitmap font.
//
//	render-dashboard lab    -repo ../.. -recording run.jsonl.gz -out ../../docs/dashboard.png
//	render-dashboard record -lab-dir ../../lab -out run.jsonl      (until Ctrl-C)
//	render-dashboard render -in run.jsonl.gz -out dashboard.png
//
// `lab` brings up a 3-node lab with agents (bin/etcd-agent-lab up), records
// every agent's /metrics once a second, breaks a member and lets the agent
// heal it, then renders. `record` records a lab that is already running;
// `render` draws a recording (see README.md for how Grafana's variables are
// substituted); a panel type this program does not draw is an error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "render":
		err = renderCmd(os.Args[2:])
	case "record":
		err = recordCmd(os.Args[2:])
	case "lab":
		err = labCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "render-dashboard:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: render-dashboard lab|record|render [flags] (-h for the flags)")
	os.Exit(2)
}

func renderCmd(args []string) error {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	in := fs.String("in", "", "recording (JSON lines, .gz ok)")
	dash := fs.String("dashboard", "../../deploy/grafana/etcd-agent-dashboard.json", "the Grafana dashboard JSON")
	out := fs.String("out", "dashboard.png", "PNG to write")
	_ = fs.Parse(args)
	if *in == "" {
		return errors.New("render: -in is required")
	}
	return render(*in, *dash, *out)
}

func render(in, dashPath, out string) error {
	rec, err := readRecording(in)
	if err != nil {
		return err
	}
	d, err := readDashboard(dashPath)
	if err != nil {
		return err
	}
	c, err := renderDashboard(d, rec, "a lab run's metrics ("+filepath.Base(in)+")")
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%dx%d) from %d rounds of %s\n", out, c.img.Rect.Dx(), c.img.Rect.Dy(), len(rec), in)
	return nil
}

func recordCmd(args []string) error {
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	labDir := fs.String("lab-dir", "../../lab", "the running lab's folder (with lab.json)")
	out := fs.String("out", "recording.jsonl", "recording to write")
	interval := fs.Duration("interval", time.Second, "scrape interval")
	duration := fs.Duration("duration", 0, "stop after this long (0: at Ctrl-C)")
	_ = fs.Parse(args)
	targets, err := labTargets(*labDir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := record(ctx, liveTargets(*labDir, targets), *interval, f)
	fmt.Printf("recorded %d rounds of %d agents to %s\n", n, len(targets), *out)
	return err
}

// liveTargets re-reads the lab's agents at each round (a node added
// mid-run, the target of a move, is recorded from then on); a read that
// fails keeps the last.
func liveTargets(dir string, first map[string]string) func() map[string]string {
	last := first
	return func() map[string]string {
		if t, err := labTargets(dir); err == nil {
			last = t
		}
		return last
	}
}

// labSpec is the part of a lab's lab.json this program reads.
type labSpec struct {
	Nodes []struct {
		Name            string `json:"name"`
		ClientURL       string `json:"clientURL"`
		AgentMetricsURL string `json:"agentMetricsURL"`
	} `json:"nodes"`
	APIServer *struct {
		URL   string `json:"url"`
		Token string `json:"token"`
		Dir   string `json:"dir"`
	} `json:"apiServer"`
}

func readLabSpec(dir string) (labSpec, error) {
	var s labSpec
	b, err := os.ReadFile(filepath.Join(dir, "lab.json"))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// labTargets maps node name to its agent's /metrics URL.
func labTargets(dir string) (map[string]string, error) {
	s, err := readLabSpec(dir)
	if err != nil {
		return nil, err
	}
	t := map[string]string{}
	for _, n := range s.Nodes {
		if n.AgentMetricsURL != "" {
			t[n.Name] = n.AgentMetricsURL
		}
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("%s: the lab runs no agents (start it with `etcd-agent-lab up --agents`)", dir)
	}
	return t, nil
}
