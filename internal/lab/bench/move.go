package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
)

// MoveRow is one db size's moves (`etcd-agent move`, UC3), per mode of the
// target's agent: seed (the learner's data dir built from the move's
// snapshot in the store), follower (built from a second stream off a
// follower, --seed-from-store=false) or raft (the leader sends it a raft
// snapshot).
type MoveRow struct {
	DBBytes int64
	Modes   []string
	Moves   map[string]*Moves
}

// Moves are the moves of one mode.
type Moves struct {
	Total      []time.Duration // request -> the old member removed (last-recovery written)
	ToPromoted []time.Duration // request -> the new member promoted
	ToLearner  []float64       // bytes the members sent the new member over raft
	Streamed   []float64       // bytes the target's agent streamed from members (snapshot API)
	LeaderSnap float64         // raft snapshots sent (etcd_network_snapshot_send_success)
	lat        []time.Duration
	APIFailed  int
	Attempted  int
}

// Move measures `etcd-agent move` per size and mode on a lab with a file
// snapshot store: each run adds a node with a new member's manifest and
// moves the member last moved (node2 first) there.
func Move(ctx context.Context, o Options) ([]MoveRow, error) {
	modes := o.Modes
	if len(modes) == 0 {
		modes = []string{"seed", "follower", "raft"}
	}
	var rows []MoveRow
	for i, size := range o.Sizes {
		row := MoveRow{Modes: modes, Moves: map[string]*Moves{}}
		for _, mode := range modes {
			// A lab per mode: a moved-away node's agent has no member, so
			// the agents cannot all be restarted with another mode.
			lo := o.Lab
			lo.Dir = filepath.Join(o.Lab.Dir, fmt.Sprintf("move-%d-%s", i, mode))
			lo.Agents, lo.SnapshotStore = true, lab.SnapshotStoreFile
			lo.EtcdQuotaBytes = quotaFor(size)
			lo.AgentArgs = append(slices.Clone(lo.AgentArgs), "--grace-period=1h")
			switch mode {
			case "follower":
				lo.AgentArgs = append(lo.AgentArgs, "--rejoin-mode=seed", "--seed-from-store=false")
			default:
				lo.AgentArgs = append(lo.AgentArgs, "--rejoin-mode="+mode)
			}
			fmt.Fprintf(o.Out, "== %s, %s: lab up, filling the db ...\n", human(size), mode)
			m, dbBytes, err := moveOne(ctx, lo, size, max(1, o.Runs), mode, o.Out)
			if err != nil {
				return rows, fmt.Errorf("%s %s: %w", human(size), mode, err)
			}
			row.Moves[mode], row.DBBytes = m, dbBytes
		}
		rows = append(rows, row)
	}
	PrintMoves(o.Out, rows)
	return rows, nil
}

func moveOne(ctx context.Context, lo lab.Options, size int64, runs int, mode string, out io.Writer) (*Moves, int64, error) {
	m := &Moves{}
	var dbBytes int64
	l, err := lab.Up(ctx, lo)
	if l != nil {
		defer l.Down(context.Background())
	}
	if err != nil {
		return m, dbBytes, err
	}
	cli, err := l.EtcdClient()
	if err != nil {
		return m, dbBytes, err
	}
	defer cli.Close()
	if err := fill(ctx, cli, size); err != nil {
		return m, dbBytes, err
	}
	st, err := cli.Status(ctx, l.Spec.Nodes[0].ClientURL)
	if err != nil {
		return m, dbBytes, err
	}
	dbBytes = st.DbSize
	kc, err := l.KubeClient()
	if err != nil {
		return m, dbBytes, err
	}
	w, err := invariant.StartWriter(ctx, kc, nil, 50*time.Millisecond)
	if err != nil {
		return m, dbBytes, err
	}
	defer w.Stop()
	from := "node2"
	for r := 1; r <= runs; r++ {
		snapsBefore, err := l.SnapshotsSentByProcess(ctx) // before the new member is in the lab's spec (it serves only once moved)
		if err != nil {
			return m, dbBytes, err
		}
		n, err := l.AddNode(ctx)
		if err != nil {
			return m, dbBytes, err
		}
		if _, err := l.PlaceNewMember(n.Name); err != nil {
			return m, dbBytes, err
		}
		fmt.Fprintf(out, "   run %d/%d (%s): move %s to %s ...\n", r, runs, mode, from, n.Name)
		mid := w.Snapshot()
		t0 := time.Now()
		lr, err := nodereport.RequestMove(ctx, kc, from, n.Name, false, 30*time.Minute)
		if err != nil {
			return m, dbBytes, err
		}
		if lr.Result != nodereport.ResultSucceeded {
			return m, dbBytes, fmt.Errorf("move %s to %s: %s %s %s", from, n.Name, lr.Result, lr.Reason, lr.Message)
		}
		m.Total = append(m.Total, time.Since(t0))
		end := w.Snapshot()
		if err := l.MemberMovedAway(from); err != nil {
			return m, dbBytes, err
		}
		rec, ok, err := journal.Load(n.StateDir, n.Name)
		if err != nil || !ok {
			return m, dbBytes, fmt.Errorf("%s's journal: %v", n.Name, err)
		}
		m.ToPromoted = append(m.ToPromoted, rec.PhaseTimes[journal.PhasePromoted].Sub(t0))
		sent, err := l.BytesSentTo(ctx, uint64(rec.NewMemberID))
		if err != nil {
			return m, dbBytes, err
		}
		m.ToLearner = append(m.ToLearner, sent)
		am, err := l.AgentMetrics(ctx, n.Name)
		if err != nil {
			return m, dbBytes, err
		}
		streamed, _ := am.Value("etcd_agent_snapshot_bytes_total", map[string]string{"member": n.Name})
		m.Streamed = append(m.Streamed, streamed)
		snapsAfter, err := l.SnapshotsSentByProcess(ctx)
		if err != nil {
			return m, dbBytes, err
		}
		// Per process: the moved member's counter left with it.
		m.LeaderSnap += lab.CounterGrowth(snapsBefore, snapsAfter)
		m.lat = append(m.lat, end.APILatencies[len(mid.APILatencies):]...)
		m.Attempted += end.APIAttempted - mid.APIAttempted
		m.APIFailed += end.APIFailed - mid.APIFailed
		fmt.Fprintf(out, "   moved in %s (promoted at %s), %s sent to the new member\n", m.Total[len(m.Total)-1].Round(time.Millisecond),
			m.ToPromoted[len(m.ToPromoted)-1].Round(time.Millisecond), human(int64(sent)))
		from = n.Name
	}
	return m, dbBytes, nil
}

// PrintMoves writes the move table.
func PrintMoves(w io.Writer, rows []MoveRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "db size\tmode\truns\tmove total\tto promoted\tstreamed from members\tsent to new member\tleader raft snapshots\tAPI p99 during\tAPI writes failed\t")
	for _, r := range rows {
		for _, mode := range r.Modes {
			m := r.Moves[mode]
			if m == nil {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.0f\t%s\t%d/%d\t\n", human(r.DBBytes), mode, len(m.Total), spread(m.Total), spread(m.ToPromoted),
				human(int64(medianF(m.Streamed))), human(int64(medianF(m.ToLearner))), m.LeaderSnap, invariant.Percentile(m.lat, 99).Round(time.Millisecond), m.APIFailed, m.Attempted)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(move total: request to the old member removed; durations median [min-max]; streamed from members: median bytes the target's agent streamed off followers (the move's backup, and the seed in follower mode); sent to new member: median bytes the members sent it over raft; seed: its data dir built from the move's snapshot in the store (taken before the add), follower: from a second stream off a follower, raft: the leader sends a raft snapshot)")
}
