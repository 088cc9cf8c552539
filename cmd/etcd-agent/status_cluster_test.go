package main

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/survivor"
)

// A member's agent is found on its peer URL's host (the DaemonSet runs on
// the host network), unless --agent-url says where.
func TestAgentURLIsThePeerHostOnTheAgentPort(t *testing.T) {
	m := observation.Member{Name: "cp-2", PeerURLs: []string{"https://10.0.0.12:2380"}}
	if got := agentURL(m, clusterFlags{agentPort: 9793}); got != "http://10.0.0.12:9793" {
		t.Fatalf("default: %s", got)
	}
	v6 := observation.Member{Name: "cp-3", PeerURLs: []string{"https://[fd00::3]:2380"}}
	if got := agentURL(v6, clusterFlags{agentPort: 9793}); got != "http://[fd00::3]:9793" {
		t.Fatalf("IPv6: %s", got)
	}
	if got := agentURL(m, clusterFlags{agentPort: 9793, agentURLs: map[string]string{"cp-2": "http://x:1"}}); got != "http://x:1" {
		t.Fatalf("--agent-url: %s", got)
	}
}

// An agent's report counts only for the member it is about: one answering
// at a reused address for another member says nothing of this one's data.
func TestAReportOnAnotherMemberIsNoEvidence(t *testing.T) {
	r := agent.Report{At: time.Now()}
	r.Observation.Local = observation.Local{Name: "cp-9", PeerURLs: []string{"https://10.0.0.12:2380"}, DataDirClass: "ok",
		DataDirRaft: &observation.RaftPosition{Term: 3, Commit: 99}}
	e := survivor.Member{Name: "cp-2", PeerURL: "https://10.0.0.12:2380"}
	fromAgent(&e, r, 0, time.Now())
	if e.Source != "" || e.Commit != 0 || !strings.Contains(e.Note, "cp-9") {
		t.Fatalf("%+v", e)
	}
	r.Observation.Local.Name = "cp-2"
	r.Where = &agent.Where{Node: "n2", Manifest: "/m", DataDir: "/d", QuarantineDir: "/q", DataDirMountPoint: true, LayoutChecked: true}
	e = survivor.Member{Name: "cp-2", PeerURL: "https://10.0.0.12:2380"}
	fromAgent(&e, r, 0, time.Now())
	if e.Source != survivor.FromDataDir || e.Commit != 99 || e.Node != "n2" || e.Paths.Manifest != "/m" || !e.Paths.DataDirMountPoint || e.Paths.LayoutUnknown != "" || e.Note != "" {
		t.Fatalf("%+v", e)
	}
	// An agent that did not read its data dir's layout (an older one)
	// leaves it unknown: no commands then.
	r.Where.LayoutChecked = false
	fromAgent(&e, r, 0, time.Now())
	if e.Paths.LayoutUnknown == "" {
		t.Fatalf("layout unread, yet known: %+v", e.Paths)
	}
}

// A data dir whose WAL names another member, or another cluster, is no
// evidence for this one (a copied data dir, a member re-added under a new
// ID); a report's age is taken on its agent's clock, not this node's.
func TestAgentEvidenceIsTheMembersOwnAndAgedOnItsClock(t *testing.T) {
	r := agent.Report{At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r.ServedAt = r.At.Add(3 * time.Minute) // three minutes old, whatever this clock says
	r.Observation.Local = observation.Local{Name: "cp-2", PeerURLs: []string{"https://10.0.0.12:2380"}, DataDirClass: "ok",
		DataDirMemberID: 0xb, DataDirClusterID: 0xc1, DataDirRaft: &observation.RaftPosition{Term: 3, Commit: 99}}
	now := time.Now()
	for _, c := range []struct {
		id, cluster uint64
		note        string
	}{{0xa, 0xc1, "member b's, not a's"}, {0xb, 0xc2, "cluster c1, not c2"}} {
		e := survivor.Member{Name: "cp-2", ID: c.id, PeerURL: "https://10.0.0.12:2380"}
		fromAgent(&e, r, c.cluster, now)
		if e.Source != "" || !strings.Contains(e.Note, c.note) {
			t.Errorf("%+v: %+v", c, e)
		}
	}
	e := survivor.Member{Name: "cp-2", ID: 0xb, PeerURL: "https://10.0.0.12:2380"}
	fromAgent(&e, r, 0xc1, now)
	if e.Source != survivor.FromDataDir || now.Sub(e.ReportedAt) != 3*time.Minute {
		t.Fatalf("%+v (age %s)", e, now.Sub(e.ReportedAt))
	}
}

// The hash an agent gave of its stopped member's db is the member's
// (unless its etcd answered HashKV itself), and the table and the
// survivor's line say it; a hash not known says why in the JSON only.
func TestTheAgentsHashOfAStoppedMembersDataIsShown(t *testing.T) {
	r := agent.Report{At: time.Now(), DataDirHash: &localdisk.KVHash{Hash: 3308312853, Revision: 101}}
	r.Observation.Local = observation.Local{Name: "cp-2", PeerURLs: []string{"https://10.0.0.12:2380"}, DataDirClass: "ok",
		DataDirRaft: &observation.RaftPosition{Term: 3, Commit: 99, Revision: 101}}
	e := survivor.Member{Name: "cp-2", PeerURL: "https://10.0.0.12:2380"}
	fromAgent(&e, r, 0, time.Now())
	if e.Hash != 3308312853 || e.HashRevision != 101 || hashAt(e) != "3308312853@101" {
		t.Fatalf("%+v (%s)", e, hashAt(e))
	}
	fromEtcd := survivor.Member{Name: "cp-2", PeerURL: "https://10.0.0.12:2380", Hash: 7, HashRevision: 102}
	fromAgent(&fromEtcd, r, 0, time.Now())
	if fromEtcd.Hash != 7 || fromEtcd.HashRevision != 102 {
		t.Fatalf("its etcd's own answer was replaced: %+v", fromEtcd)
	}
	r.DataDirHash, r.DataDirHashNote = nil, "being hashed (since …); ask again"
	unknown := survivor.Member{Name: "cp-2", PeerURL: "https://10.0.0.12:2380"}
	fromAgent(&unknown, r, 0, time.Now())
	if unknown.HashRevision != 0 || !strings.Contains(unknown.HashNote, "being hashed") || hashAt(unknown) != "-" {
		t.Fatalf("%+v", unknown)
	}
	var out strings.Builder
	printCluster(&out, clusterAnswer{Choice: survivor.Choice{Members: []survivor.Member{e}, Survivor: &e, Why: "w", Lost: "l"}}, time.Now(), "")
	for _, want := range []string{"HASH@REV", "3308312853@101", "cp-2's data hashes to 3308312853 at revision 101", "endpoint hashkv --rev=101"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in:\n%s", want, out.String())
		}
	}
}
