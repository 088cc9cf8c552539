package survivor

import (
	"strings"
	"testing"
)

var procs = map[string]string{
	ProcedureStop:     "PEER=https://10.0.0.11:2380      # peer\nCLIENT=https://10.0.0.11:2379    # client\n(! EP=$CLIENT E endpoint health --command-timeout=5s)\nmv /etc/kubernetes/manifests/etcd.yaml /root/p\nmv /var/lib/etcd /var/lib/etcd-agent-quarantine/x\n",
	ProcedureSurvivor: "M=cp-1 PEER=https://10.0.0.11:2380\nE endpoint status\ncp -a /var/lib/etcd /var/lib/etcd-agent-quarantine/y\n",
	ProcedureRejoin:   "M=cp-2 PEER=https://10.0.0.12:2380\nE member add \"$M\"\n",
}

func TestCommandsAreTheRunbooksWithTheClustersValues(t *testing.T) {
	c := Choose([]Member{
		{Name: "n1", PeerURL: "https://h1:2380", ClientURL: "https://h1:2379", Source: FromEtcd, Commit: 5, Node: "node1",
			Paths: Paths{Manifest: "/m1/etcd.yaml", DataDir: "/d1", QuarantineDir: "/q1"}},
		{Name: "n2", PeerURL: "https://h2:2380", Source: FromDataDir, DataDir: "ok", Commit: 9, ReportedAt: now, Node: "node2",
			Paths: Paths{Manifest: "/m2/etcd.yaml", DataDir: "/d2", QuarantineDir: "/q2"}, ClientURL: "https://h2:2379"},
		{Name: "n3", PeerURL: "https://h3:2380", DeclaredLost: true}, // no agent: the defaults
	}, false, now)
	steps, err := Commands(c, procs, Etcdctl{CACert: "/ca", Cert: "/c", Key: "/k"}, Paths{Manifest: "/dm/etcd.yaml", DataDir: "/dd", QuarantineDir: "/dq"})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, s := range steps {
		order = append(order, s.Procedure+" "+s.Member)
	}
	want := "majority-lost-stop n1|majority-lost-stop n3|majority-lost-survivor n2|majority-lost-rejoin n1|majority-lost-rejoin n3"
	if strings.Join(order, "|") != want {
		t.Fatalf("order %v, want %s", order, want)
	}
	for _, chk := range []struct {
		i    int
		want []string
	}{
		// The stop asks its own member first whether it sees a quorum.
		{0, []string{"PEER=https://h1:2380 ", "CLIENT=https://h1:2379 ", "mv /m1/etcd.yaml", "mv /d1 /q1/x", "E() { etcdctl --endpoints=${EP:-https://h2:2379} ", "--cacert=/ca --cert=/c --key=/k"}},
		{1, []string{"PEER=https://h3:2380 ", "CLIENT='' ", "mv /dm/etcd.yaml", "mv /dd /dq/x"}},
		{2, []string{"M=n2 PEER=https://h2:2380", "cp -a /d2 /q2/y", "set -euo pipefail"}},
		{4, []string{"M=n3 PEER=https://h3:2380"}},
	} {
		for _, w := range chk.want {
			if !strings.Contains(steps[chk.i].Script, w) {
				t.Errorf("step %d (%s) lacks %q:\n%s", chk.i, order[chk.i], w, steps[chk.i].Script)
			}
		}
	}
}

func TestCommandsRefuseWhatTheProceduresDoNotCover(t *testing.T) {
	base := []Member{{Name: "n1", PeerURL: "https://h1:2380", ClientURL: "https://h1:2379", Source: FromEtcd, Commit: 5,
		Paths: Paths{Manifest: "/m", DataDir: "/d", QuarantineDir: "/q"}}, {Name: "n2", PeerURL: "https://h2:2380"}}
	def := Paths{Manifest: "/m", DataDir: "/d", QuarantineDir: "/q"}
	if _, err := Commands(Choose(base, false, now), procs, Etcdctl{}, def); err == nil || !strings.Contains(err.Error(), "n2") {
		t.Errorf("a member nothing is known of (it may serve in a quorum elsewhere): %v", err)
	}
	base[1].DeclaredLost = true
	wal := append([]Member(nil), base...)
	wal[0].Paths.WALDir = "/w"
	if _, err := Commands(Choose(wal, false, now), procs, Etcdctl{}, def); err == nil || !strings.Contains(err.Error(), "WAL") {
		t.Errorf("a dedicated WAL dir: %v", err)
	}
	drifted := map[string]string{ProcedureStop: "PEER=x\n", ProcedureSurvivor: procs[ProcedureSurvivor], ProcedureRejoin: procs[ProcedureRejoin]}
	if _, err := Commands(Choose(base, false, now), drifted, Etcdctl{}, def); err == nil || !strings.Contains(err.Error(), "drifted") {
		t.Errorf("a drifted runbook: %v", err)
	}
	if _, err := Commands(Choose(base, false, now), procs, Etcdctl{}, Paths{}); err == nil || !strings.Contains(err.Error(), "not known") {
		t.Errorf("unknown paths: %v", err)
	}
}

// What a procedure cannot say safely gets no commands: a member's name is
// whatever its --name said, a peer URL's host is re-parsed by a shell in
// the port checks, and the paths come from an agent's unauthenticated
// /status. Each is refused with a reason, and nothing is written.
func TestUnsafeValuesGetNoCommands(t *testing.T) {
	ok := func() []Member {
		return []Member{
			{Name: "a", PeerURL: "https://h1:2380", ClientURL: "https://h1:2379", Source: FromEtcd, Commit: 5,
				Paths: Paths{Manifest: "/etc/kubernetes/manifests/etcd.yaml", DataDir: "/var/lib/etcd", QuarantineDir: "/var/lib/etcd-agent-quarantine"}},
			{Name: "b", PeerURL: "https://[fd00::2]:2380", DeclaredLost: true},
		}
	}
	def := Paths{Manifest: "/m/etcd.yaml", DataDir: "/d/etcd", QuarantineDir: "/d/q"}
	if _, err := Commands(Choose(ok(), false, now), procs, Etcdctl{}, def); err != nil {
		t.Fatalf("the plain case (an IPv6 peer too): %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(ms []Member) []Member
		want string
	}{
		{"shell in a name", func(ms []Member) []Member { ms[1].Name = "b; rm -rf /"; return ms }, "not a plain word"},
		{"shell in a peer host", func(ms []Member) []Member { ms[1].PeerURL = "https://b;touch$IFS/x;:2380"; return ms }, "plain host"},
		{"shell in a client URL", func(ms []Member) []Member { ms[1].ClientURL = "https://$(reboot):2379"; return ms }, "plain host"},
		{"a name twice", func(ms []Member) []Member { ms[1].Name = "a"; return ms }, "two members"},
		{"an empty name", func(ms []Member) []Member { ms[1].Name = ""; return ms }, "not a plain word"},
		{"two peer URLs", func(ms []Member) []Member { ms[1].OtherPeerURLs = []string{"https://c:2380"}; return ms }, "2 peer URLs"},
		{"a system dir", func(ms []Member) []Member { ms[0].Paths.DataDir = "/etc"; return ms }, "system dir"},
		// Helper-32's review: cp -a and mv take a symlink, not the data.
		{"a symlinked data dir", func(ms []Member) []Member { ms[0].Paths.DataDirSymlink = true; return ms }, "symlink"},
		{"a layout not known", func(ms []Member) []Member { ms[0].Paths.LayoutUnknown = "an older agent"; return ms }, "not known"},
		{"a space in a path", func(ms []Member) []Member { ms[0].Paths.DataDir = "/d x"; return ms }, "plain"},
		{"a path not clean", func(ms []Member) []Member { ms[0].Paths.DataDir = "/var/lib/../../etc"; return ms }, "clean"},
		{"another node's paths not known", func(ms []Member) []Member {
			ms[1].DeclaredLost, ms[1].Source, ms[1].DataDir, ms[1].ReportedAt = false, FromDataDir, "missing", now
			return ms
		}, "not known"},
	} {
		if _, err := Commands(Choose(c.edit(ok()), false, now), procs, Etcdctl{}, def); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// From session 35's review: the stop and rejoin move the data dir
	// aside, which a mount root refuses (EBUSY) after the stop script ran;
	// the survivor's procedure only copies it.
	mounted := ok()
	mounted[0].Paths.DataDirMountPoint = true
	if _, err := Commands(Choose(mounted, false, now), procs, Etcdctl{}, def); err != nil {
		t.Errorf("the survivor's data dir at a mount root (only copied): %v", err)
	}
	mountedDef := def
	mountedDef.DataDirMountPoint = true
	if _, err := Commands(Choose(ok(), false, now), procs, Etcdctl{}, mountedDef); err == nil || !strings.Contains(err.Error(), "mount point") {
		t.Errorf("a member to stop and rejoin at a mount root: %v, want \"mount point\"", err)
	}
	if shellQuote("cp-1") != "cp-1" || shellQuote("/ca dir/ca.crt") != "'/ca dir/ca.crt'" || shellQuote("it's") != `'it'\''s'` {
		t.Errorf("shellQuote")
	}
}
