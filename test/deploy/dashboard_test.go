package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type grafanaDashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readGrafanaDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(repoPath("deploy", "grafana", "etcd-agent-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

// grafanaVars replaces the dashboard's variables with values PromQL accepts.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$node", ".*")

// TestDashboardQueries: the dashboard has the panels the issue asks for,
// every query parses (promtool check rules, as recording rules) and uses only
// metrics the agent exports.
func TestDashboardQueries(t *testing.T) {
	d := readGrafanaDashboard(t)
	names := agentMetricNames(t)
	titles := map[string]bool{}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, p := range d.Panels {
		titles[p.Title] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for j, tg := range p.Targets {
			refs := agentMetricRef.FindAllString(tg.Expr, -1)
			if len(refs) == 0 {
				t.Errorf("panel %q query %d uses no etcd_agent_ metric: %s", p.Title, j, tg.Expr)
			}
			for _, ref := range refs {
				if !names[ref] {
					t.Errorf("panel %q uses %s, which the agent does not export", p.Title, ref)
				}
			}
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel%d_%d", i, j), Expr: grafanaVars.Replace(tg.Expr)})
		}
	}
	for _, want := range []string{"Member state per node", "Quorum margin", "Recoveries by result", "Refusals by reason",
		"Recovery phase durations", "Learner lag", "Recovery step progress", "Recovery step ETA", "Quorum margin per cluster"} {
		if !titles[want] {
			t.Errorf("dashboard has no panel %q", want)
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "dashboard.rules.yaml")
}

// TestDashboardRenders builds hack/render-dashboard (its own module) and
// renders the committed lab recording with the shipped dashboard: every
// panel's own PromQL is evaluated by Prometheus's engine, so the PNG in docs/
// is what the dashboard's queries return, and an edited query makes it stale.
func TestDashboardRenders(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "render-dashboard")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = repoPath("hack", "render-dashboard")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hack/render-dashboard: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "dashboard.png")
	cmd := exec.Command(bin, "render", "-in", repoPath("hack", "render-dashboard", "testdata", "lab-run.jsonl.gz"),
		"-dashboard", repoPath("deploy", "grafana", "etcd-agent-dashboard.json"), "-out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("render: %v\n%s", err, b)
	}
	for _, p := range []string{out, repoPath("docs", "dashboard.png")} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if img.Bounds().Dx() < 1000 {
			t.Errorf("%s: %v, want a full dashboard", p, img.Bounds())
		}
	}
	// The screenshot in docs/ is what the committed recording renders.
	got, _ := os.ReadFile(out)
	want, _ := os.ReadFile(repoPath("docs", "dashboard.png"))
	if !bytes.Equal(got, want) {
		t.Errorf("docs/dashboard.png is stale: re-render it from hack/render-dashboard/testdata/lab-run.jsonl.gz " +
			"(cd hack/render-dashboard && go run . render -in testdata/lab-run.jsonl.gz -out ../../docs/dashboard.png)")
	}
}
