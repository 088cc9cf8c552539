package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/docs"
	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/runbook"
	"github.com/etcd-agent/etcd-agent/internal/survivor"
	"github.com/etcd-agent/etcd-agent/internal/timefmt"
)

// clusterFlags are status --cluster's: how to reach the other nodes' agents.
type clusterFlags struct {
	on        bool
	agentURLs map[string]string
	agentPort int
	// lost are members a person says are gone for good.
	lost []string
	// pod is the member pod whose cluster to show (--member-source=pods).
	pod string
	// say tells the person what takes a while (stderr; nil: nothing).
	say func(string)
}

func (f clusterFlags) note(s string) {
	if f.say != nil {
		f.say(s)
	}
}

// clusterAnswer is status --cluster's JSON output.
type clusterAnswer struct {
	Choice survivor.Choice `json:"choice"`
	// Steps are the restore's scripts, in order ("" error when written).
	Steps         []survivor.Step `json:"steps,omitempty"`
	CommandsError string          `json:"commandsError,omitempty"`
}

// clusterStatus gathers what every member's etcd and agent say, names the
// member to restore from when the majority is lost, and prints the
// commands to do it (docs/runbooks/README.md, "Majority lost: restore").
// It never acts. The Kubernetes API is not used: without etcd's quorum it
// does not answer; each node's agent answers /status on its metrics port.
func clusterStatus(ctx context.Context, out io.Writer, c agent.Config, f clusterFlags, output string) error {
	rep, err := agent.Status(ctx, c)
	if err != nil {
		return err
	}
	members, majorityLost, cluster := rep.Observation.Members, rep.MajorityLost, rep.Observation.ClusterID
	if len(members) == 0 {
		// A fresh process has no member list without a quorum: the
		// daemon's last one, and its verdict on it.
		d, err := agent.DaemonReport(c.StateDir)
		if err != nil {
			return fmt.Errorf("no member list: etcd gave none (%s) and the daemon's report is unreadable: %w", rep.Observation.MemberListError, err)
		}
		members, majorityLost, cluster = d.Observation.Members, d.MajorityLost, d.Observation.ClusterID
	}
	tlsCfg, err := c.TLSConfig()
	if err != nil {
		return err
	}
	rep.MajorityLost = rep.MajorityLost || majorityLost // (the daemon's verdict when this process saw no list)
	var ev []survivor.Member
	for _, m := range members {
		e := evidence(ctx, m, cluster, tlsCfg, majorityLost)
		var r *agent.Report
		if rep.Observation.Local.Name == m.Name {
			// This node's member: read here, as its agent would.
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			agent.AddLogPosition(rctx, &rep)
			cancel()
			agent.AddDataDirHash(ctx, &rep, c.StateDir, f.note)
			r = &rep
		} else if u := agentURL(m, f); u != "" {
			r, err = fetchReport(ctx, u, nil)
			if err != nil {
				e.Note = err.Error()
			}
		}
		if r != nil {
			fromAgent(&e, *r, cluster, time.Now())
		}
		e.DeclaredLost = slices.Contains(f.lost, m.Name)
		ev = append(ev, e)
	}
	now := time.Now() // after the reports came: none is from the future
	ans := clusterAnswer{Choice: survivor.Choose(ev, !majorityLost, now)}
	if ans.Choice.Survivor != nil {
		texts, err := runbook.Scripts(docs.RunbooksFile, docs.Runbooks)
		if err == nil {
			def := survivor.Paths{}
			if rep.Where != nil {
				def = pathsOf(*rep.Where) // (a --lost member's node is laid out as this one)
			}
			ans.Steps, err = survivor.Commands(ans.Choice, texts, survivor.Etcdctl{CACert: c.CACert, Cert: c.Cert, Key: c.Key}, def)
		}
		if err != nil {
			ans.CommandsError = err.Error()
		}
	}
	if err := writeClusterAnswer(out, ans, now, staticRestoreIntro, output); err != nil {
		return err
	}
	if majorityLost {
		return statusExit(3)
	}
	if code := rep.ExitCode(); code != 0 {
		return statusExit(code)
	}
	return nil
}

// evidence is what m's etcd says of its log now: a member with no leader
// still answers Status with its term and committed index. The member list
// may be the daemon's last one, whose probes are old: m is asked again.
func evidence(ctx context.Context, m observation.Member, cluster uint64, tlsCfg *tls.Config, majorityLost bool) survivor.Member {
	e := survivor.Member{Name: m.Name, ID: m.ID, IsLearner: m.IsLearner}
	if len(m.PeerURLs) > 0 {
		e.PeerURL, e.OtherPeerURLs = m.PeerURLs[0], m.PeerURLs[1:]
	}
	if len(m.ClientURLs) == 0 {
		return e
	}
	e.ClientURL = m.ClientURLs[0]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL}, TLS: tlsCfg, DialTimeout: 3 * time.Second,
		Logger: zap.NewNop(), Context: ctx})
	if err != nil {
		return e
	}
	defer cli.Close()
	st, err := cli.Status(ctx, e.ClientURL)
	// An answer for another member, or another cluster, says nothing of m.
	if err != nil || st.Header.MemberId != m.ID || cluster != 0 && st.Header.ClusterId != cluster {
		return e
	}
	e.Source, e.Term, e.Commit, e.Applied, e.Leader = survivor.FromEtcd, st.RaftTerm, st.RaftIndex, st.RaftAppliedIndex, st.Leader
	e.Revision = st.Header.Revision
	if st.Leader != 0 || !majorityLost {
		return e // a quorum: nothing is restored, its db is not read
	}
	// Answered locally without a leader; a big db takes a while.
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), hashKVTimeout)
	defer hcancel()
	if h, err := cli.HashKV(hctx, e.ClientURL, 0); err != nil {
		e.HashNote = "its etcd's HashKV: " + err.Error()
	} else if h.Header.MemberId == m.ID {
		e.Hash, e.HashRevision = h.Hash, h.Header.Revision
	}
	return e
}

// hashKVTimeout bounds a member's HashKV (it reads its whole db).
const hashKVTimeout = 30 * time.Second

// fromAgent adds what m's agent says of it, if the report is m's: the
// same name and peer URL, and the data dir's WAL naming m and its cluster.
func fromAgent(e *survivor.Member, r agent.Report, cluster uint64, now time.Time) {
	l := r.Observation.Local
	switch {
	case l.Name != e.Name || len(l.PeerURLs) == 0 || l.PeerURLs[0] != e.PeerURL:
		e.Note = fmt.Sprintf("its agent reports on member %s at %v", l.Name, l.PeerURLs)
		return
	case l.DataDirMemberID != 0 && e.ID != 0 && l.DataDirMemberID != e.ID:
		e.Note = fmt.Sprintf("its data dir's WAL is member %x's, not %x's", l.DataDirMemberID, e.ID)
		return
	case l.DataDirClusterID != 0 && cluster != 0 && l.DataDirClusterID != cluster:
		e.Note = fmt.Sprintf("its data dir's WAL is of cluster %x, not %x", l.DataDirClusterID, cluster)
		return
	}
	e.DataDir, e.DataDirVerified, e.ReportedAt = l.DataDirClass, l.DataDirVerified, r.At
	if !r.ServedAt.IsZero() {
		e.ReportedAt = now.Add(-r.ServedAt.Sub(r.At)) // its age on its own clock
	}
	e.Serving = l.Serving
	e.QuorumSeen = r.Quorum > 0 && r.HealthyVoters >= r.Quorum
	if w := r.Where; w != nil {
		e.Node = w.Node
		e.Paths = pathsOf(*w)
	}
	if h := r.DataDirHash; h != nil && e.HashRevision == 0 {
		e.Hash, e.HashRevision = h.Hash, h.Revision
	} else if r.DataDirHashNote != "" && e.HashRevision == 0 {
		e.HashNote = "its agent's hash of its db: " + r.DataDirHashNote
	}
	if l.DataDirRaftError != "" {
		e.Note = "its log on disk: " + l.DataDirRaftError
	}
	if p := l.DataDirRaft; p != nil {
		e.LastIndex = p.LastIndex
		if e.Source == "" {
			e.Source, e.Term, e.Commit, e.Applied, e.Revision = survivor.FromDataDir, p.Term, p.Commit, p.Applied, p.Revision
		}
	}
}

// agentURL is where m's agent answers: --agent-url NAME=URL, else the host
// of m's peer URL on --agent-port (the DaemonSet runs on the host network).
func agentURL(m observation.Member, f clusterFlags) string {
	if u, ok := f.agentURLs[m.Name]; ok {
		return u
	}
	if len(m.PeerURLs) == 0 || f.agentPort == 0 {
		return ""
	}
	p, err := url.Parse(m.PeerURLs[0])
	if err != nil || p.Hostname() == "" {
		return ""
	}
	return "http://" + net.JoinHostPort(p.Hostname(), strconv.Itoa(f.agentPort))
}

// fetchReport asks an agent for its latest report, bounded.
func fetchReport(ctx context.Context, base string, query url.Values) (*agent.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, agent.StatusAnswersWithin+3*time.Second)
	defer cancel()
	u := strings.TrimSuffix(base, "/") + "/status"
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("its agent at %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("its agent at %s: %s: %s", base, resp.Status, strings.TrimSpace(string(b)))
	}
	var r agent.Report
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&r); err != nil {
		return nil, fmt.Errorf("its agent at %s: %w", base, err)
	}
	return &r, nil
}

// writeClusterAnswer prints ans as JSON, or as the table with intro before
// the scripts.
func writeClusterAnswer(out io.Writer, ans clusterAnswer, now time.Time, intro, output string) error {
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(ans)
	}
	printCluster(out, ans, now, intro)
	return nil
}

// staticRestoreIntro is what printCluster says before a static-pod
// member's restore scripts.
var staticRestoreIntro = fmt.Sprintf("\nNothing is done for you. First bring members back if you can (a member that returns with its data rejoins by itself).\n"+
	"Then run each script on its node, in this order, as root (%s, \"Majority lost: restore\"): first with DRY_RUN=1 (its checks only; "+
	"it ends before it changes anything), then without. Every script checks before it changes anything, and a stop script asks its own member "+
	"whether it sees a quorum first. Stop the agents before the rejoins: the API serves again "+
	"once the survivor does (kubectl -n <ns> patch daemonset etcd-agent, as the runbooks' \"Stopping the agents\" says).\n", docs.RunbooksFile)

// hashAt is m's hash as HASH@REV ("-": not known).
func hashAt(m survivor.Member) string {
	if m.HashRevision == 0 {
		return "-"
	}
	return fmt.Sprintf("%d@%d", m.Hash, m.HashRevision)
}

func printCluster(out io.Writer, a clusterAnswer, now time.Time, intro string) {
	c := a.Choice
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tNODE\tCOMMIT\tTERM\tAPPLIED\tREVISION\tHASH@REV\tFROM\tDATA DIR\tREPORTED\tPROBLEM\tNOTE")
	for _, m := range c.Members {
		at := ""
		if !m.ReportedAt.IsZero() {
			at = timefmt.At(m.ReportedAt, now)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Node, m.Commit, m.Term, m.Applied, m.Revision, hashAt(m), m.Source, m.DataDir, at, m.Problem, m.Note)
	}
	w.Flush()
	if c.Survivor == nil {
		fmt.Fprintf(out, "\nno restore: %s\n", c.Refused)
		return
	}
	fmt.Fprintf(out, "\nMAJORITY LOST. Restore from %s: %s.\n", c.Survivor.Name, c.Why)
	fmt.Fprintf(out, "Lost in the restore: %s.\n", c.Lost)
	if h := c.Survivor; h.HashRevision > 0 {
		fmt.Fprintf(out, "%s's data hashes to %d at revision %d (etcd's HashKV): once restored, and until the cluster compacts, `etcdctl endpoint hashkv --rev=%d` answers the same on every member.\n",
			h.Name, h.Hash, h.HashRevision, h.HashRevision)
	}
	switch {
	case c.Survivor.Source == survivor.FromEtcd:
	case c.Survivor.Pod != "":
		fmt.Fprintf(out, "%s's etcd does not answer Status: its position is its data dir's, read by its agent.\n", c.Survivor.Name)
	case c.Survivor.DataDir == "in-use":
		fmt.Fprintf(out, "%s's etcd runs but does not serve (restarted without a quorum, etcd never serves): its position is its WAL's, read by its agent.\n", c.Survivor.Name)
	default:
		fmt.Fprintf(out, "%s's etcd does not run: its position is its data dir's, read by its agent. Put its manifest back in the kubelet's dir first "+
			"(without a quorum it serves nothing and changes nothing): its script moves it out to stop it, then starts it with --force-new-cluster.\n", c.Survivor.Name)
	}
	if a.CommandsError != "" {
		fmt.Fprintf(out, "\nno commands: %s\n", a.CommandsError)
		return
	}
	fmt.Fprint(out, intro)
	for i, s := range a.Steps {
		node := s.Node
		if node == "" {
			node = "the node of " + s.Member
		}
		fmt.Fprintf(out, "\n### %d. on %s: %s (member %s)\n%s", i+1, node, s.Procedure, s.Member, s.Script)
	}
}

// pathsOf is where an agent says its member's files lie, and how its data
// dir is laid out (an agent that did not read it says nothing: unknown).
func pathsOf(w agent.Where) survivor.Paths {
	p := survivor.Paths{Manifest: w.Manifest, DataDir: w.DataDir, WALDir: w.WALDir, QuarantineDir: w.QuarantineDir, StateDir: w.StateDir,
		DataDirMountPoint: w.DataDirMountPoint, DataDirSymlink: w.DataDirSymlink}
	switch {
	case w.LayoutError != "":
		p.LayoutUnknown = w.LayoutError
	case !w.LayoutChecked:
		p.LayoutUnknown = "its agent does not say (an older version?)"
	}
	return p
}
