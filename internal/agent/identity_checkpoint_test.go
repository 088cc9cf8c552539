package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/controller/manifestkeeper"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
)

// checkpointedMember is kubeadm's manifest of member cp-2, checkpointed by
// its keeper (seen healthy twice), with the agent's config of it.
func checkpointedMember(t *testing.T) (Config, *manifestkeeper.Keeper) {
	t.Helper()
	dir := t.TempDir()
	c := Config{StaticPodManifest: filepath.Join(dir, "manifests", "etcd.yaml"), StateDir: filepath.Join(dir, "state"), ManifestRestoreDelay: time.Minute, AutoHeal: true}
	for _, d := range []string{filepath.Dir(c.StaticPodManifest), c.StateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("../manifest/testdata/kubeadm-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const peer = "https://127.0.0.1:1"
	if err := os.WriteFile(c.StaticPodManifest, bytes.ReplaceAll(b, []byte("https://10.0.0.12:2380"), []byte(peer)), 0o600); err != nil {
		t.Fatal(err)
	}
	k := c.newManifestKeeper("cp-2", metrics.New(), nil, zap.NewNop())
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for i := range 2 {
		o := observation.Observation{At: at.Add(time.Duration(i) * time.Second), ClusterID: 0xc1, Members: []observation.Member{
			{ID: 1, Name: "node1", Serving: true}, {ID: 2, Name: "cp-2", Serving: true}, {ID: 3, Name: "node3", Serving: true}},
			Local: observation.Local{Name: "cp-2", DataDir: "/var/lib/etcd", PeerURLs: []string{peer}, ClientURL: peer,
				DataDirClass: observation.DataDirOK, DataDirMemberID: 2, Match: observation.MatchOK, ID: 2, Serving: true}}
		k.Consider(memberstate.Result{Observation: o, Verdict: memberstate.Verdict{State: memberstate.Healthy}})
	}
	if _, err := os.Stat(c.checkpointedManifest()); err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	return c, k
}

func TestAMovedMembersForgottenCheckpointNamesNoMember(t *testing.T) {
	c, k := checkpointedMember(t)
	k.Forget()
	if err := os.Remove(c.StaticPodManifest); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveIdentity(c); err == nil {
		t.Fatal("identity resolved with no manifest, no parked copy and no checkpoint")
	}
}

func TestTheIdentityOfAMemberWhoseManifestVanishedComesFromItsCheckpoint(t *testing.T) {
	c, _ := checkpointedMember(t)
	if err := os.Remove(c.StaticPodManifest); err != nil {
		t.Fatal(err)
	}
	id, err := ResolveIdentity(c)
	if err != nil || id.Name != "cp-2" {
		t.Fatalf("identity %+v, %v: want the checkpoint's", id, err)
	}
	c.ManifestRestoreDelay = 0
	if _, err := ResolveIdentity(c); err == nil {
		t.Fatal("with restores off, the checkpoint named the member")
	}
	c.ManifestRestoreDelay = time.Minute
	moved := journal.Record{ID: "m1", Member: "cp-2", Request: plan.ActionMoveOut, Result: journal.ResultSucceeded, MoveTarget: "cp-4"}
	moved.Advance(journal.PhaseDone, time.Now())
	if err := journal.Save(c.StateDir, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveIdentity(c); err == nil {
		t.Fatal("a member that moved away is known by its checkpoint (the agent died before forgetting it)")
	}
}
