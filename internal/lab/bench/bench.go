// Package bench is `etcd-agent-lab bench`: for each db size, in one lab, it
// measures side by side (1) the bare etcd rejoin (remove + learner + start +
// promote, driven directly, no agent) of one member and (2) the agent's heal
// of another member on the same db, with API write latency before and during.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Row is one db size's figures; durations are per run, reported as the median.
type Row struct {
	DBBytes     int64
	Bare        []time.Duration // remove -> promoted and serving, no agent
	BaselineP99 time.Duration
	Modes       []string
	Heals       map[string]*Heals // by rejoin mode
}

// Heals are the agent's heals of one rejoin mode.
type Heals struct {
	Agent        []time.Duration            // fault -> promoted (no grace applies: data dir gone, member down)
	AgentTotal   []time.Duration            // fault -> verified and Lease released
	Snapshot     []time.Duration            // the pre-change backup stream
	LeaderSnaps  float64                    // raft snapshots the members sent during the heals (etcd_network_snapshot_send_success)
	ToLearner    []float64                  // bytes the members sent to the new learner (etcd_network_peer_sent_bytes_total{To=learner})
	LeaderCPU    []float64                  // CPU seconds of the leader's etcd during a heal
	PeersCPU     []float64                  // CPU seconds of the other members' etcd (not the healed one's) during a heal
	Steps        map[string][]time.Duration // per step of stepNames, one duration per run that passed it
	ETA          [][]ETAStep                // per run: how the long steps' ETAs fared (eta.go)
	lat          []time.Duration
	APIFailed    int
	APIAttempted int
}

// Options configure a run.
type Options struct {
	Lab   lab.Options
	Sizes []int64 // db bytes to fill before measuring
	// Runs per size: etcd itself is noisy (a new member's first publish
	// sometimes times out after 7 s), so each side is run several times.
	Runs int
	// Modes are the agent's rejoin modes to measure, side by side.
	Modes []string
	// LearnerLinkRate, when set, is the bytes per second the healed
	// member's peer link receives (lab.LimitPeerIngress, through peer
	// proxies): raft snapshots to the learner take time, as on a real
	// network, so the snapshot receive's and the catch-up's ETAs can be
	// measured. The bare rejoin's member (node3) is not limited.
	LearnerLinkRate int64
	Out             io.Writer
	Log             *zap.Logger
}

// Run measures every size on a fresh lab each and prints the table.
func Run(ctx context.Context, o Options) ([]Row, error) {
	var rows []Row
	for i, size := range o.Sizes {
		lo := o.Lab
		lo.Dir = filepath.Join(o.Lab.Dir, fmt.Sprintf("size-%d", i))
		lo.Agents = true
		lo.EtcdQuotaBytes = quotaFor(size)
		// Only "data dir gone and not serving" (lost at once, no grace) may
		// start a heal here: stopping etcd under API load takes longer than
		// the lab's 3 s grace, which would start the clock early.
		lo.AgentArgs = append(lo.AgentArgs, "--grace-period=1h")
		lo.PeerProxy = lo.PeerProxy || o.LearnerLinkRate > 0
		transport := "plain"
		if lo.EtcdTLS {
			transport = "etcd TLS"
		}
		fmt.Fprintf(o.Out, "== %s (%s): lab up, filling the db ...\n", human(size), transport)
		modes := o.Modes
		if len(modes) == 0 {
			modes = []string{"raft"}
		}
		row, err := runOne(ctx, lo, size, max(1, o.Runs), modes, o.LearnerLinkRate, o.Out)
		if err != nil {
			if len(rows) > 0 { // what was measured is not lost
				Print(o.Out, rows)
				fmt.Fprintln(o.Out)
				PrintPhases(o.Out, rows)
				PrintETA(o.Out, rows)
			}
			return rows, fmt.Errorf("%s: %w", human(size), err)
		}
		rows = append(rows, row)
	}
	Print(o.Out, rows)
	fmt.Fprintln(o.Out)
	PrintPhases(o.Out, rows)
	fmt.Fprintln(o.Out)
	PrintETA(o.Out, rows)
	return rows, nil
}

// quotaFor is the members' --quota-backend-bytes for a db filled to size:
// etcd's default (0: 2 GiB) up to 1 GiB; above, twice the size (the fill
// ends ~20 % over it, and the heal's writes need room), at most the 8 GiB
// etcd accepts.
func quotaFor(size int64) int64 {
	if size <= 1<<30 {
		return 0
	}
	return min(2*size, 8<<30)
}

func runOne(ctx context.Context, lo lab.Options, size int64, runs int, modes []string, linkRate int64, out io.Writer) (Row, error) {
	row := Row{Modes: modes, Heals: map[string]*Heals{}}
	l, err := lab.Up(ctx, lo)
	if l != nil {
		defer l.Down(context.Background())
	}
	if err != nil {
		return row, err
	}
	cli, err := l.EtcdClient()
	if err != nil {
		return row, err
	}
	defer cli.Close()
	if err := fill(ctx, cli, size); err != nil {
		return row, err
	}
	// The fill may leave gigabytes of dirty pages: flushed before anything
	// is measured, so that no measured step waits behind their writeback.
	// (A precaution: the 64 s apply seen once at 4 GiB was not this; the
	// flush found nothing to write.)
	t := time.Now()
	unix.Sync()
	fmt.Fprintf(out, "   the fill flushed to disk in %s\n", time.Since(t).Round(time.Millisecond))
	st, err := cli.Status(ctx, l.Spec.Nodes[0].ClientURL)
	if err != nil {
		return row, err
	}
	row.DBBytes = st.DbSize
	kc, err := l.KubeClient()
	if err != nil {
		return row, err
	}
	w, err := invariant.StartWriter(ctx, kc, nil, 50*time.Millisecond)
	if err != nil {
		return row, err
	}
	defer w.Stop()
	time.Sleep(5 * time.Second) // a baseline is a duration of load
	base := w.Snapshot()
	row.BaselineP99 = invariant.Percentile(base.APILatencies, 99)

	for r := 1; r <= runs; r++ {
		fmt.Fprintf(out, "   run %d/%d, db %s: bare etcd rejoin of node3 (its agent stopped) ...\n", r, runs, human(row.DBBytes))
		bare, err := bareRejoin(ctx, l, cli, "node3")
		if err != nil {
			return row, fmt.Errorf("bare rejoin: %w", err)
		}
		row.Bare = append(row.Bare, bare)
		fmt.Fprintf(out, "   bare: %s\n", bare.Round(time.Millisecond))
		if err := l.WaitHealthy(ctx, 3, 5*time.Minute); err != nil {
			return row, err
		}
	}
	if linkRate > 0 {
		if err := l.LimitPeerIngress("node2", linkRate); err != nil {
			return row, err
		}
		fmt.Fprintf(out, "   node2's peer link receives at most %s/s\n", human(linkRate))
	}
	for _, mode := range modes {
		if err := l.RestartAgents(ctx, rejoinModeArgs(mode)...); err != nil {
			return row, err
		}
		h := &Heals{}
		row.Heals[mode] = h
		for r := 1; r <= runs; r++ {
			fmt.Fprintf(out, "   run %d/%d: agent heal of node2 in %s mode (member stopped, data dir wiped) ...\n", r, runs, mode)
			snapsBefore, err := l.SnapshotsSentByProcess(ctx)
			if err != nil {
				return row, err
			}
			leader, lerr := l.LeaderProcess(ctx)
			cpuBefore, cerr := l.CPUByProcess(ctx)
			if err := errors.Join(lerr, cerr); err != nil {
				return row, err
			}
			mid, fault := w.Snapshot(), time.Now()
			if err := agentHeal(ctx, l, "node2", h); err != nil {
				return row, fmt.Errorf("agent heal (%s): %w", mode, err)
			}
			end := w.Snapshot()
			// Say why a write failed: one in flight through a leader that
			// the fault itself stops is etcd's loss, not the heal's.
			for _, f := range end.Failures[len(mid.Failures):] {
				fmt.Fprintf(out, "   %s write begun %s after the fault failed: %s (node2 led at the fault: %v)\n", f.Via,
					f.At.Sub(fault).Round(time.Millisecond), f.Err, strings.HasPrefix(leader, "node2/"))
			}
			snapsAfter, err := l.SnapshotsSentByProcess(ctx)
			if err != nil {
				return row, err
			}
			cpuAfter, err := l.CPUByProcess(ctx)
			if err != nil {
				return row, err
			}
			if strings.HasPrefix(leader, "node2/") || leader == "" {
				// node2 led (its etcd is gone now): the leader during the
				// heal is the one that leads after it, if not node2 again.
				if leader, err = l.LeaderProcess(ctx); err != nil {
					return row, err
				}
			}
			if leader != "" && !strings.HasPrefix(leader, "node2/") {
				h.LeaderCPU = append(h.LeaderCPU, lab.CounterGrowth(only(cpuBefore, leader), only(cpuAfter, leader)))
			}
			h.PeersCPU = append(h.PeersCPU, lab.CounterGrowth(without(cpuBefore, "node2/"), without(cpuAfter, "node2/")))
			// Per process: node2's etcd restarts in the heal and its
			// counter with it (subtracted naively, the total went negative).
			h.LeaderSnaps += lab.CounterGrowth(snapsBefore, snapsAfter)
			h.lat = append(h.lat, end.APILatencies[len(mid.APILatencies):]...)
			h.APIAttempted += end.APIAttempted - mid.APIAttempted
			h.APIFailed += end.APIFailed - mid.APIFailed
			fmt.Fprintf(out, "   agent (%s): %s to promoted\n", mode, h.Agent[len(h.Agent)-1].Round(time.Millisecond))
			if err := l.WaitHealthy(ctx, 3, 5*time.Minute); err != nil {
				return row, err
			}
		}
	}
	return row, nil
}

// fill writes 512 KiB values until the db holds about size bytes, then
// 12,000 small writes: the lab runs etcd with --snapshot-count=10000, so the
// leader's raft log is compacted and a new learner needs a raft snapshot, as
// on any long-lived cluster.
func fill(ctx context.Context, cli *clientv3.Client, size int64) error {
	if err := lab.FillDB(ctx, cli, "/bench/fill/", size); err != nil {
		return err
	}
	// 8 writers; the first error ends the others (errgroup's job, without
	// golang.org/x/sync in the product's go.mod for this one use).
	gctx, cancelAll := context.WithCancelCause(ctx)
	defer cancelAll(nil)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 12000; i += 8 {
				rctx, cancel := context.WithTimeout(gctx, 30*time.Second)
				_, err := cli.Put(rctx, fmt.Sprintf("/bench/entries/%06d", i), "x")
				cancel()
				if err != nil {
					cancelAll(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(gctx)
}

// bareRejoin is the upstream procedure with no agent: stop the member, set
// its data dir aside, remove it, add it back as a learner, start it on an
// empty data dir, promote it once etcd lets us. Timed from the remove.
func bareRejoin(ctx context.Context, l *lab.Lab, cli *clientv3.Client, node string) (time.Duration, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return 0, err
	}
	// Its agent would heal the member itself: stop it as a kubelet would.
	parked := filepath.Join(n.NodeDir, "etcd-agent.yaml.parked")
	if err := os.Rename(n.AgentManifest(), parked); err != nil {
		return 0, err
	}
	defer os.Rename(parked, n.AgentManifest())
	rt := memberruntime.NewStaticPod(n.EtcdManifest(), filepath.Join(n.NodeDir, "bench-parked"), []string{n.ClientURL, n.PeerListen()}, zap.NewNop())
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return 0, err
	}
	var oldID uint64
	var others []string
	for _, m := range ml.Members {
		if m.Name == n.Member {
			oldID = m.ID
		} else {
			others = append(others, m.Name+"="+m.PeerURLs[0])
		}
	}
	if err := rt.Stop(ctx); err != nil {
		return 0, err
	}
	aside := fmt.Sprintf("%s.bench-aside-%d", n.DataDir, time.Now().UnixNano())
	if err := os.Rename(n.DataDir, aside); err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := cli.MemberRemove(ctx, oldID); err != nil {
		return 0, err
	}
	// etcd refuses an add ("unhealthy cluster") until its leader has been
	// connected to every voter for 5 s (e.g. right after the fill's load).
	var add *clientv3.MemberAddResponse
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var aerr error
		add, aerr = cli.MemberAddAsLearner(ctx, []string{n.PeerURL})
		if errors.Is(aerr, rpctypes.ErrUnhealthy) {
			return false, nil
		}
		return aerr == nil, aerr
	})
	if err != nil {
		return 0, fmt.Errorf("add learner: %w", err)
	}
	// As the agent does: an empty data dir takes its member ID from the
	// first peer that answers, and a peer behind on the remove would hand
	// it the old ID (seen at 2.3 GiB: the leader 11 s behind; etcd then
	// panicked on the leader's commit index and its gate held it).
	if err := waitLearnerKnown(ctx, l, node, add.Member.ID, n.PeerURL); err != nil {
		return 0, err
	}
	ic := strings.Join(append(others, n.Member+"="+n.PeerURL), ",")
	if err := rt.Start(ctx, ic); err != nil {
		return 0, err
	}
	promoted := false
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if !promoted {
			// etcd answers "not ready" until the learner has caught up.
			_, err := cli.MemberPromote(rctx, add.Member.ID)
			promoted = err == nil
		}
		// Done when the member serves, as the agent's TTR counts it.
		_, err := cli.Status(rctx, n.ClientURL)
		return promoted && err == nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("learner not promoted and serving after 10 minutes: %w", err)
	}
	took := time.Since(start)
	// The bench's own copy, not a heal's quarantine, deleted only once the
	// member serves again (a failed rejoin keeps it): at 4 GiB three of
	// them would not fit beside the members and the agent's backups.
	if err := os.RemoveAll(aside); err != nil {
		return 0, err
	}
	return took, nil
}

// waitLearnerKnown waits (up to a minute) until every other member's own
// member list has the learner id at peerURL and nothing else there.
func waitLearnerKnown(ctx context.Context, l *lab.Lab, node string, id uint64, peerURL string) error {
	var detail string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		lists, failed := map[string][]plan.ListedMember{}, map[string]string{}
		for _, o := range l.Spec.Nodes {
			if o.Name == node {
				continue
			}
			c, err := l.EtcdClientFor(o.ClientURL)
			if err != nil {
				return false, err
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			ml, err := c.MemberList(rctx, clientv3.WithSerializable())
			cancel()
			c.Close()
			if err != nil {
				failed[o.Name] = err.Error()
				continue
			}
			for _, m := range ml.Members {
				lists[o.Name] = append(lists[o.Name], plan.ListedMember{ID: m.ID, PeerURLs: m.PeerURLs})
			}
		}
		var ok bool
		ok, detail = plan.LearnerKnownEverywhere(lists, failed, id, []string{peerURL})
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("learner %x not listed by every member within a minute (%s): %w", id, detail, err)
	}
	return nil
}

// agentHeal breaks node's member (stopped, data dir gone; its start gate
// then holds etcd back) and waits for its agent to heal it.
func agentHeal(ctx context.Context, l *lab.Lab, node string, row *Heals) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	if err := l.StopMember(node); err != nil {
		return err
	}
	// Down for a moment is within the grace; down with its data dir gone is
	// lost at once: the clock starts at the wipe.
	t0 := time.Now()
	if err := l.WipeDataDir(node); err != nil {
		return err
	}
	if err := l.StartMember(node); err != nil {
		return err
	}
	stopETA := watchETA(ctx, l, node)
	var rec journal.Record
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Minute, true, func(context.Context) (bool, error) {
		var ok bool
		rec, ok, _ = journal.Load(n.StateDir, n.Member) // polling the journal file
		return ok && rec.Phase == journal.PhaseDone && rec.StartedAt.After(t0), nil
	})
	row.ETA = append(row.ETA, stopETA())
	switch {
	case err != nil:
		return fmt.Errorf("not healed in 15 minutes: %w", err)
	case rec.Result != journal.ResultSucceeded:
		return fmt.Errorf("recovery %s: %s %s", rec.Result, rec.Reason, rec.Message)
	}
	row.Agent = append(row.Agent, rec.PhaseTimes[journal.PhasePromoted].Sub(t0))
	row.AgentTotal = append(row.AgentTotal, rec.FinishedAt.Sub(t0))
	row.Snapshot = append(row.Snapshot, streamTook(rec))
	if row.Steps == nil {
		row.Steps = map[string][]time.Duration{}
	}
	for s, d := range phaseSteps(rec, t0) {
		row.Steps[s] = append(row.Steps[s], d)
	}
	sent, err := l.BytesSentTo(ctx, uint64(rec.NewMemberID))
	if err != nil {
		return err
	}
	row.ToLearner = append(row.ToLearner, sent)
	return nil
}

// Print writes the table.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "db size\tmode\truns\tbare etcd rejoin\tfastest bare\tagent TTR-grace\tratio\tpre-change stream\tagent total\tbeyond the stream\tof the stream\ttarget\tmet\tleader raft snapshots\tsent to learner\tleader CPU\tpeers CPU\tAPI p99 before\tAPI p99 during\tAPI writes failed\t")
	for _, r := range rows {
		for _, mode := range r.Modes {
			h := r.Heals[mode]
			if h == nil {
				continue
			}
			floor, agent := fastest(r.Bare), median(h.Agent)
			b := beyondTheStream(h)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%.2fx\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%.2fs\t%.2fs\t%s\t%s\t%d/%d\t\n", human(r.DBBytes), mode, len(h.Agent), spread(r.Bare),
				floor.Round(10*time.Millisecond), spread(h.Agent), float64(agent)/float64(floor), median(h.Snapshot).Round(10*time.Millisecond), median(h.AgentTotal).Round(10*time.Millisecond),
				b.beyond, b.ratio, b.target, b.met, h.LeaderSnaps, human(int64(medianF(h.ToLearner))), medianF(h.LeaderCPU), medianF(h.PeersCPU),
				r.BaselineP99.Round(time.Millisecond), invariant.Percentile(h.lat, 99).Round(time.Millisecond), h.APIFailed, h.APIAttempted)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(durations: median [min-max] over the runs; ratio = median agent / fastest bare rejoin, the floor etcd reaches without its stall; pre-change stream: the stream's own time (the recovery's record; it overlaps the stop); beyond the stream: agent total - pre-change stream, the run with the median of it, its share of that run's stream, issue 43's target for it (0.15 x stream + 1 s) and whether it was met; leader raft snapshots: total over the runs; sent to learner: median bytes the members sent the new learner over raft; leader CPU, peers CPU: median CPU seconds of the leader's etcd, and of every member's but the healed one's, during a heal)")
}

// beyond is what a heal adds to its pre-change stream (issue 43), in the
// run with the median of it, as the table's cells.
type beyond struct{ beyond, ratio, target, met string }

func beyondTheStream(h *Heals) beyond {
	type run struct{ beyond, stream time.Duration }
	var runs []run
	for i := range min(len(h.AgentTotal), len(h.Snapshot)) {
		runs = append(runs, run{h.AgentTotal[i] - h.Snapshot[i], h.Snapshot[i]})
	}
	if len(runs) == 0 {
		return beyond{"-", "-", "-", "-"}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].beyond < runs[j].beyond })
	r := runs[(len(runs)-1)/2]
	target := time.Duration(0.15*float64(r.stream)) + time.Second
	b := beyond{beyond: r.beyond.Round(10 * time.Millisecond).String(), target: target.Round(10 * time.Millisecond).String(), met: "no", ratio: "-"}
	if r.stream > 0 {
		b.ratio = fmt.Sprintf("%.2fx", float64(r.beyond)/float64(r.stream))
	}
	if r.beyond <= target {
		b.met = "yes"
	}
	return b
}

func median(ds []time.Duration) time.Duration { return invariant.Percentile(ds, 50) }

func fastest(ds []time.Duration) time.Duration { return invariant.Percentile(ds, 0) }

func medianF(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

func spread(ds []time.Duration) string {
	r := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	if len(ds) < 2 {
		return r(median(ds))
	}
	return fmt.Sprintf("%s [%s-%s]", r(median(ds)), r(invariant.Percentile(ds, 0)), r(invariant.Percentile(ds, 100)))
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// rejoinModeArgs are the agent flags of a measured rejoin mode: raft, seed
// (from a copy of the pre-change backup: the db streamed once) or follower
// (seed mode streaming the db a second time, off a follower after the add).
func rejoinModeArgs(mode string) []string {
	switch mode {
	case "follower":
		return []string{"--rejoin-mode=seed", "--seed-from-backup=false"}
	case "seed-copy-after":
		return []string{"--rejoin-mode=seed", "--seed-copy-during-stream=false"}
	}
	return []string{"--rejoin-mode=" + mode}
}

// only keeps the reading of process key (none for "").
func only(m map[string]float64, key string) map[string]float64 {
	if v, ok := m[key]; ok {
		return map[string]float64{key: v}
	}
	return map[string]float64{}
}

// without drops the readings of the processes whose key starts with prefix.
func without(m map[string]float64, prefix string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}
