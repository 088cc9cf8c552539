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
	if err := os.WriteFile(c.StaticPodManifest, bytes.ReplaceAll(b, []byte("https://10.0.0.12:2380"), []byte(cp2Peer)), 0o600); err != nil {
		t.Fatal(err)
	}
	k := c.newManifestKeeper("cp-2", metrics.New(), nil, zap.NewNop())
	for i := range 2 {
		k.Consider(cp2Seen(time.Duration(i)*time.Second, true))
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

const cp2Peer = "https://127.0.0.1:1"

// cp2Seen is the agent's observation of cp-2 in a three-voter cluster, at
// after past noon of 2026-12-03, serving or not.
func cp2Seen(after time.Duration, serving bool) memberstate.Result {
	o := observation.Observation{At: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC).Add(after), ClusterID: 0xc1, Members: []observation.Member{
		{ID: 1, Name: "node1", Serving: true}, {ID: 2, Name: "cp-2", Serving: serving}, {ID: 3, Name: "node3", Serving: true}},
		Local: observation.Local{Name: "cp-2", DataDir: "/var/lib/etcd", PeerURLs: []string{cp2Peer}, ClientURL: cp2Peer,
			DataDirClass: observation.DataDirOK, DataDirVerified: !serving, DataDirMemberID: 2, Match: observation.MatchOK, ID: 2, Serving: serving}}
	state := memberstate.Healthy
	if !serving {
		state = memberstate.Lost
	}
	return memberstate.Result{Observation: o, Verdict: memberstate.Verdict{State: state}}
}

// Helper-32's review: the keeper's tests set its parked path themselves;
// this checks the agent's wiring. A manifest the agent parked to stop its
// member is never put back by the keeper, however long it is away.
func TestTheKeeperNeverPutsBackAManifestTheAgentParked(t *testing.T) {
	c, k := checkpointedMember(t)
	if err := os.MkdirAll(filepath.Dir(c.parkedManifest()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(c.StaticPodManifest, c.parkedManifest()); err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{2 * time.Second, time.Hour, 2 * time.Hour} {
		if k.Consider(cp2Seen(after, false)) {
			t.Fatalf("%s after the park: the keeper put the manifest back", after)
		}
	}
	if _, err := os.Stat(c.StaticPodManifest); err == nil {
		t.Fatal("the parked manifest is back in the kubelet's dir")
	}
}
