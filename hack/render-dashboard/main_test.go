package main

import (
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseTextWithExpfmt: a /metrics response is read by expfmt; a
// histogram is kept as its _sum and _count, other prefixes are dropped.
func TestParseTextWithExpfmt(t *testing.T) {
	in := `# HELP etcd_agent_member_state The local member's state.
# TYPE etcd_agent_member_state gauge
etcd_agent_member_state{member="node1",state="healthy"} 1
etcd_agent_member_state{member="n\"1",state="lost"} 0
# TYPE etcd_agent_recovery_phase_duration_seconds histogram
etcd_agent_recovery_phase_duration_seconds_bucket{member="node1",phase="stopped",le="1"} 2
etcd_agent_recovery_phase_duration_seconds_bucket{member="node1",phase="stopped",le="+Inf"} 3
etcd_agent_recovery_phase_duration_seconds_sum{member="node1",phase="stopped"} 4.5
etcd_agent_recovery_phase_duration_seconds_count{member="node1",phase="stopped"} 3
# TYPE etcd_agent_cluster_quorum_margin gauge
etcd_agent_cluster_quorum_margin{member="node1"} -1
# TYPE go_goroutines gauge
go_goroutines 42
`
	got, err := parseText(strings.NewReader(in), "etcd_agent_")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range got {
		keys = append(keys, fmt.Sprintf("%s %v %g", s.Name, s.Labels, s.Value))
	}
	want := []string{
		"etcd_agent_cluster_quorum_margin map[member:node1] -1",
		"etcd_agent_member_state map[member:node1 state:healthy] 1",
		`etcd_agent_member_state map[member:n"1 state:lost] 0`,
		"etcd_agent_recovery_phase_duration_seconds_sum map[member:node1 phase:stopped] 4.5",
		"etcd_agent_recovery_phase_duration_seconds_count map[member:node1 phase:stopped] 3",
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("parsed:\n%s\nwant:\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
	}
	if _, err := parseText(strings.NewReader("etcd_agent_x{a=\"1\" 2\n"), "etcd_agent_"); err == nil {
		t.Error("a malformed line was accepted")
	}
}

// synthetic is a recording shaped like a lab heal: node2 degraded at 10s,
// recovering 11-20s, healthy after; a refusal on node1 at 30s.
func synthetic() Recording {
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	var rec Recording
	for i := 0; i <= 45; i++ {
		r := Round{T: t0.Add(time.Duration(i) * time.Second), Nodes: map[string]*Scrape{}}
		for n := 1; n <= 3; n++ {
			node := fmt.Sprintf("node%d", n)
			state, dd, margin, healthy := "healthy", "ok", 1.0, 3.0
			inProgress, lag, snap := 0.0, 0.0, 0.0
			if n == 2 && i >= 10 && i < 11 {
				state, dd = "degraded", "missing"
			}
			if n == 2 && i >= 11 && i < 20 {
				state, dd, inProgress = "recovering", "empty", 1
				lag = float64(max(0, 3000-(i-11)*400))
			}
			if i >= 10 && i < 20 {
				margin, healthy = 0, 2
			}
			if n == 2 && i >= 13 {
				snap = 24 << 20
			}
			up := !(n == 3 && i == 38)
			s := &Scrape{Up: up}
			if up {
				for _, st := range []string{"healthy", "degraded", "down", "lost", "recovering", "learner"} {
					s.Samples = append(s.Samples, Sample{Name: "etcd_agent_member_state", Labels: map[string]string{"state": st}, Value: b2f(st == state)})
				}
				for _, st := range []string{"ok", "missing", "empty", "corrupt", "foreign", "in-use", "stale"} {
					s.Samples = append(s.Samples, Sample{Name: "etcd_agent_data_dir_status", Labels: map[string]string{"status": st}, Value: b2f(st == dd)})
				}
				refusals := 0.0
				if n == 1 && i >= 30 {
					refusals = 1
				}
				refusedSince := 0.0
				if n == 1 && i >= 30 && i < 36 {
					refusedSince = float64(t0.Add(30 * time.Second).Unix())
				}
				recovered := 0.0
				if n == 2 && i >= 20 {
					recovered = 1
				}
				s.Samples = append(s.Samples,
					Sample{Name: "etcd_agent_cluster_quorum_margin", Value: margin},
					Sample{Name: "etcd_agent_cluster_voting_members", Value: 3},
					Sample{Name: "etcd_agent_cluster_healthy_voting_members", Value: healthy},
					Sample{Name: "etcd_agent_recovery_in_progress", Value: inProgress},
					Sample{Name: "etcd_agent_lease_held", Value: inProgress},
					Sample{Name: "etcd_agent_learner_lag_entries", Value: lag},
					Sample{Name: "etcd_agent_snapshot_bytes_total", Value: snap},
					Sample{Name: "etcd_agent_recoveries_total", Labels: map[string]string{"result": "succeeded"}, Value: recovered},
					Sample{Name: "etcd_agent_recoveries_total", Labels: map[string]string{"result": "failed"}, Value: 0},
					Sample{Name: "etcd_agent_recovery_refusals_total", Labels: map[string]string{"reason": "dry-run"}, Value: refusals},
					Sample{Name: "etcd_agent_recovery_refused_since_timestamp_seconds", Labels: map[string]string{"reason": "dry-run"}, Value: refusedSince},
				)
				if n == 2 && i >= 20 {
					for p, d := range map[string]float64{"started": 0.05, "stopped": 1.2, "snapshotted": 0.8, "removed": 0.02, "learner-added": 0.03, "member-started": 2.5, "promoted": 3.1, "verified": 0.4} {
						s.Samples = append(s.Samples,
							Sample{Name: "etcd_agent_recovery_phase_duration_seconds_sum", Labels: map[string]string{"phase": p}, Value: d},
							Sample{Name: "etcd_agent_recovery_phase_duration_seconds_count", Labels: map[string]string{"phase": p}, Value: 1})
					}
				}
			}
			r.Nodes[node] = s
		}
		rec = append(rec, r)
	}
	return rec
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestRenderSynthetic renders every panel of the real dashboard from a
// synthetic recording (RENDER_OUT=path keeps the PNG to look at).
func TestRenderSynthetic(t *testing.T) {
	d, err := readDashboard(filepath.Join("..", "..", "deploy", "grafana", "etcd-agent-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := renderDashboard(d, synthetic(), "a synthetic recording")
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("RENDER_OUT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "dashboard.png")
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, c.img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if c.img.Rect.Dx() != imageWidth || c.img.Rect.Dy() < 800 {
		t.Errorf("image %v", c.img.Rect)
	}
}
