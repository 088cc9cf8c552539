package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"go.uber.org/zap"
)

// ScaleOptions configure `lab bench-scale`: the agent's idle cost with K
// local members (docs/design.md §10, §11), each the only member of its own small
// hosted etcd cluster, on one management node.
type ScaleOptions struct {
	Lab     lab.Options // Dir, BinDir, AgentBinary, Log; the rest is set here
	Members []int
	// Window is how long the agent's CPU time is measured once every
	// member is pinned and the agent has settled.
	Window time.Duration
	// PollInterval is the agent's --poll-interval while measured (the
	// product's default, not the lab's short one).
	PollInterval time.Duration
	// Replicas is the members per hosted cluster: 1 (one node, K
	// one-member clusters) or 3 (three nodes, K three-member clusters,
	// one member of each per node; node1's agent is measured, and each
	// of its members has two peers to probe).
	Replicas int
	// ProfileDir, when set, gets a CPU profile of the measured agent over
	// each window (agent-<members>.pprof; the agent runs with --profiling).
	ProfileDir string
	Out        io.Writer
	Log        *zap.Logger
}

// ScaleRow is one member count's figures.
type ScaleRow struct {
	Members    int
	CPUPercent float64 // of one core, over the window
	RSSMiB     float64
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTicks = 100

// Scale measures each member count in its own lab, then prints the table.
func Scale(ctx context.Context, o ScaleOptions) ([]ScaleRow, error) {
	var rows []ScaleRow
	for _, k := range o.Members {
		row, err := scaleOne(ctx, o, k)
		if err != nil {
			return rows, fmt.Errorf("%d members: %w", k, err)
		}
		o.Log.Info("measured", zap.Int("members", k), zap.Float64("cpuPercent", row.CPUPercent), zap.Float64("rssMiB", row.RSSMiB))
		rows = append(rows, row)
	}
	printScale(o.Out, o, rows)
	return rows, nil
}

// ProductPeerProbeInterval is `etcd-agent run`'s default (a test in
// cmd/etcd-agent keeps them one).
const ProductPeerProbeInterval = "60s"

// emptyLab removes the bench's own lab dir for one count, stopping a lab
// left running there first: a lab left by an earlier run (of the other
// shape, or of another cluster) would otherwise restart its members. A
// dir that is not a lab (no readable lab.json) and is not empty is not
// the bench's to remove: it is refused, and kept.
func emptyLab(ctx context.Context, dir string, log *zap.Logger) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(entries) == 0:
		return os.Remove(dir)
	}
	old, err := lab.Open(dir, log)
	if err != nil {
		return fmt.Errorf("%s is not a lab this bench left (%w): remove it, or choose another --dir", dir, err)
	}
	if err := old.Down(ctx); err != nil {
		return fmt.Errorf("the lab left in %s: %w", dir, err)
	}
	return os.RemoveAll(dir)
}

func scaleOne(ctx context.Context, o ScaleOptions, k int) (ScaleRow, error) {
	opts := o.Lab
	replicas := max(1, o.Replicas)
	opts.Dir = filepath.Join(o.Lab.Dir, fmt.Sprintf("scale-%d", k))
	if err := emptyLab(ctx, opts.Dir, o.Log); err != nil {
		return ScaleRow{}, err
	}
	opts.Management, opts.Agents, opts.Nodes, opts.HostedClusters, opts.HostedReplicas = true, true, replicas, k, replicas
	opts.PVsPerNode = k + 1
	// The product's timings, not the lab's short ones.
	opts.AgentArgs = append(append([]string{}, opts.AgentArgs...), "--poll-interval="+o.PollInterval.String(),
		"--peer-probe-interval="+ProductPeerProbeInterval)
	if o.ProfileDir != "" {
		opts.AgentArgs = append(opts.AgentArgs, "--profiling")
	}
	l, err := lab.Up(ctx, opts)
	if l != nil {
		defer func() {
			if err := l.Down(context.Background()); err != nil {
				o.Log.Warn("lab down", zap.Error(err))
			}
		}()
	}
	if err != nil {
		return ScaleRow{}, err
	}
	pid, err := l.AgentPID("node1")
	if err != nil {
		return ScaleRow{}, err
	}
	// Settle: the informers' first lists and every member's first looks.
	select {
	case <-ctx.Done():
		return ScaleRow{}, ctx.Err()
	case <-time.After(2 * o.PollInterval):
	}
	t0, err := cpuTicks(pid)
	if err != nil {
		return ScaleRow{}, err
	}
	start := time.Now()
	profiled := make(chan error, 1)
	if o.ProfileDir != "" {
		go func() {
			profiled <- profileAgent(ctx, l, o.Window, filepath.Join(o.ProfileDir, fmt.Sprintf("agent-%d.pprof", k)))
		}()
	} else {
		profiled <- nil
	}
	select {
	case <-ctx.Done():
		return ScaleRow{}, ctx.Err()
	case <-time.After(o.Window):
	}
	t1, err := cpuTicks(pid)
	if err != nil {
		return ScaleRow{}, err
	}
	rss, err := rssKiB(pid)
	if err != nil {
		return ScaleRow{}, err
	}
	cpu := float64(t1-t0) / clockTicks / time.Since(start).Seconds() * 100
	if err := <-profiled; err != nil {
		o.Log.Warn("CPU profile", zap.Error(err))
	}
	return ScaleRow{Members: k, CPUPercent: cpu, RSSMiB: float64(rss) / 1024}, nil
}

// profileAgent saves node1's agent's CPU profile over window to path.
func profileAgent(ctx context.Context, l *lab.Lab, window time.Duration, path string) error {
	n, err := l.Spec.Node("node1")
	if err != nil {
		return err
	}
	url := strings.TrimSuffix(n.AgentMetricsURL, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds()))
	rctx, cancel := context.WithTimeout(ctx, window+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuTicks is the process's user+system time in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields after its ")".
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return u + st, nil
}

// rssKiB is the process's resident set (VmRSS).
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// printScale prints the rows, the per-member cost between the smallest and
// the largest count, and its extrapolation to 100 members.
func printScale(out io.Writer, o ScaleOptions, rows []ScaleRow) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "agent idle cost, --poll-interval=%s, --peer-probe-interval=%s, %d-member clusters, CPU over %s\n", o.PollInterval, ProductPeerProbeInterval, max(1, o.Replicas), o.Window)
	fmt.Fprintln(tw, "members\tCPU (% of a core)\tRSS (MiB)")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.2f\t%.1f\n", r.Members, r.CPUPercent, r.RSSMiB)
	}
	if len(rows) >= 2 {
		a, b := rows[0], rows[len(rows)-1]
		if n := float64(b.Members - a.Members); n > 0 {
			cpu, rss := (b.CPUPercent-a.CPUPercent)/n, (b.RSSMiB-a.RSSMiB)/n
			fmt.Fprintf(tw, "per member\t%.3f\t%.2f\n", cpu, rss)
			fmt.Fprintf(tw, "100 members (extrapolated)\t%.2f\t%.1f\n", a.CPUPercent+cpu*float64(100-a.Members), a.RSSMiB+rss*float64(100-a.Members))
		}
	}
	_ = tw.Flush()
}
