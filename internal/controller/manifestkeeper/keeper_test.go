package manifestkeeper

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
)

type keeperCase struct {
	k        *Keeper
	manifest string
	now      time.Time
}

func newKeeperCase(t *testing.T) *keeperCase {
	t.Helper()
	dir := t.TempDir()
	manifests, state := filepath.Join(dir, "manifests"), filepath.Join(dir, "state")
	for _, d := range []string{manifests, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kc := &keeperCase{k: New(keeperConfig(filepath.Join(manifests, "etcd.yaml"), state, time.Minute, true), "cp-2", metrics.New(), nil, zap.NewNop()), manifest: filepath.Join(manifests, "etcd.yaml"),
		now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	kc.write(t, "v1")
	return kc
}

// write puts kubeadm's manifest of member cp-2 in place (its peer URL on a
// loopback port nothing listens on), tagged with a comment.
func (kc *keeperCase) write(t *testing.T, tag string) {
	t.Helper()
	b, err := os.ReadFile("../../manifest/testdata/kubeadm-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("https://10.0.0.12:2380"), []byte(keeperPeerURL))
	if err := os.WriteFile(kc.manifest, append(b, []byte("# "+tag+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
}

const keeperPeerURL = "https://127.0.0.1:1"

// poll feeds the keeper one full observation of a three-voter cluster that
// lists node2 (serving or not), d after the last.
func (kc *keeperCase) poll(d time.Duration, serving bool) bool {
	kc.now = kc.now.Add(d)
	o := observation.Observation{At: kc.now, ClusterID: 0xc1, Members: []observation.Member{
		{ID: 1, Name: "node1", Serving: true}, {ID: 2, Name: "cp-2", Serving: serving}, {ID: 3, Name: "node3", Serving: true}},
		Local: observation.Local{Name: "cp-2", DataDir: "/var/lib/etcd", PeerURLs: []string{keeperPeerURL}, ClientURL: "https://127.0.0.1:1",
			DataDirClass: observation.DataDirOK, DataDirVerified: !serving, DataDirMemberID: 2, Match: observation.MatchOK, ID: 2, Serving: serving}}
	state := memberstate.Healthy
	if !serving {
		state = memberstate.Lost
	}
	return kc.k.Consider(memberstate.Result{Observation: o, Verdict: memberstate.Verdict{State: state}})
}

func TestAVanishedManifestComesBackFromItsCheckpointAfterTheDelay(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	want, _ := os.ReadFile(kc.manifest)
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	if kc.poll(time.Second, false) || kc.poll(50*time.Second, false) {
		t.Fatal("restored within the delay")
	}
	if got := testutil.ToFloat64(kc.k.metrics.ManifestMissing.WithLabelValues("cp-2")); got != 1 {
		t.Fatalf("manifest_missing %v, want 1", got)
	}
	if !kc.poll(11*time.Second, false) {
		t.Fatal("not restored after the delay")
	}
	got, err := os.ReadFile(kc.manifest)
	if err != nil || string(got) != string(want) {
		t.Fatalf("restored manifest %q (%v), want %q", got, err, want)
	}
	if n := testutil.ToFloat64(kc.k.metrics.ManifestRestoresTotal.WithLabelValues("cp-2")); n != 1 {
		t.Fatalf("manifest_restores_total %v, want 1", n)
	}
	if b, err := os.ReadFile(filepath.Join(kc.k.stateDir, manifestRestoreLog)); err != nil || !strings.Contains(string(b), `"memberID":"2"`) {
		t.Fatalf("restore log %q (%v)", b, err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(kc.manifest), ".*"))
	if len(leftovers) > 0 {
		t.Fatalf("temp files left in the manifests dir: %v", leftovers)
	}
	if kc.poll(time.Second, false); testutil.ToFloat64(kc.k.metrics.ManifestMissing.WithLabelValues("cp-2")) != 0 {
		t.Fatal("manifest_missing still 1 with the manifest back")
	}
}

func TestTheCheckpointFollowsTheManifestOnlyWhileTheMemberIsHealthy(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	if _, _, err := kc.k.load(); err == nil {
		t.Fatal("a checkpoint taken at the first look: a manifest is taken when seen twice with the member healthy")
	}
	kc.poll(time.Second, true)
	v1, err := os.ReadFile(kc.manifest)
	if err != nil {
		t.Fatal(err)
	}
	kc.write(t, "v2, never healthy")
	kc.poll(time.Second, false)
	kc.poll(time.Second, false)
	if _, data, err := kc.k.load(); err != nil || string(data) != string(v1) {
		t.Fatalf("checkpoint %q (%v): want the last manifest seen healthy", data, err)
	}
	kc.poll(time.Second, true)
	kc.poll(time.Second, true)
	if _, data, _ := kc.k.load(); !strings.HasSuffix(string(data), "# v2, never healthy\n") {
		t.Fatalf("checkpoint %q: want the manifest the member is healthy with now", data)
	}
	// A copy that is not the one described is never put back.
	if err := os.WriteFile(kc.k.checkpointCopy(), []byte("kind: Pod # tampered\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kc.k.load(); err == nil {
		t.Fatal("a checkpoint copy whose sha256 is not the recorded one was loaded")
	}
}

// A manifest that is not the member's as the agent knows it (another data
// dir or name, or a one-time --force-new-cluster start) is never taken.
func TestAManifestThatIsNotTheMembersOwnIsNeverCheckpointed(t *testing.T) {
	for name, edit := range map[string][2]string{
		"another data dir":  {"--data-dir=/var/lib/etcd", "--data-dir=/var/lib/etcd-new"},
		"another name":      {"--name=cp-2", "--name=cp-9"},
		"force-new-cluster": {"--name=cp-2", "--name=cp-2\n    - --force-new-cluster"},
		// A 3.5 learner's start (issue 40): serving healthy once promoted,
		// until it is restarted on its own client URLs.
		"client URLs set aside": {"  annotations:\n", "  annotations:\n    etcd-agent.io/client-urls-aside: '" +
			`{"listen":"https://127.0.0.1:2379,https://10.0.0.12:2379","advertise":"https://10.0.0.12:2379","private":"https://10.0.0.12:12379"}` + "'\n"},
	} {
		t.Run(name, func(t *testing.T) {
			kc := newKeeperCase(t)
			b, _ := os.ReadFile(kc.manifest)
			if err := os.WriteFile(kc.manifest, bytes.ReplaceAll(b, []byte(edit[0]), []byte(edit[1])), 0o600); err != nil {
				t.Fatal(err)
			}
			kc.poll(0, true)
			kc.poll(time.Second, true)
			if _, _, err := kc.k.load(); err == nil {
				t.Fatal("checkpointed")
			}
		})
	}
}

// A manifest that keeps vanishing is put back MaxRestores times an hour,
// then the keeper waits for a person.
func TestAManifestThatKeepsVanishingIsNotFought(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	restores := 0
	for range 5 {
		if err := os.Remove(kc.manifest); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		kc.poll(time.Second, false)
		if kc.poll(2*time.Minute, false) {
			restores++
		}
	}
	if restores != 3 {
		t.Fatalf("%d restores within the hour, want %d", restores, 3)
	}
}

// The restore log is what the hourly limit counts: a restore it cannot
// record (a full disk, a log that is not a file) would never count, so it
// is not made; it is made once the log takes it.
func TestARestoreThatCannotBeJournaledIsNotMade(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	logPath := filepath.Join(kc.k.stateDir, manifestRestoreLog)
	if err := os.Mkdir(logPath, 0o700); err != nil { // appends to it fail
		t.Fatal(err)
	}
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	if kc.poll(2*time.Minute, false) {
		t.Fatal("restored with the restore log unwritable")
	}
	if kc.k.said != plan.ReasonRestoreLogUnusable {
		t.Fatalf("the answer's reason is %q, want %q (the refusal must say why)", kc.k.said, plan.ReasonRestoreLogUnusable)
	}
	// A log that reads but has a line it cannot parse counts nothing
	// either: refused the same.
	if err := os.Remove(logPath); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("{\"at\":\"2026-\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kc.poll(time.Second, false) || kc.k.said != plan.ReasonRestoreLogUnusable {
		t.Fatalf("a garbled restore log: the answer's reason is %q, want %q and no restore", kc.k.said, plan.ReasonRestoreLogUnusable)
	}
	if _, err := os.Stat(kc.manifest); !os.IsNotExist(err) {
		t.Fatalf("the manifest is back (%v) though the restore was not journaled", err)
	}
	if err := os.Remove(logPath); err != nil {
		t.Fatal(err)
	}
	if !kc.poll(time.Second, false) {
		t.Fatal("not restored once the log is writable")
	}
}

// A restore log that reads but cannot be written (a full disk) refuses the
// restore with its own reason, and the restore is made once it can.
func TestARestoreTheLogCannotTakeIsRefusedWithItsReason(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	kc.k.writeLog = func(string, []byte, os.FileMode) error { return syscall.ENOSPC }
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	for range 3 {
		if kc.poll(2*time.Minute, false) {
			t.Fatal("restored though the restore log could not be written")
		}
		if kc.k.said != plan.ReasonRestoreLogUnusable {
			t.Fatalf("the answer's reason is %q, want %q", kc.k.said, plan.ReasonRestoreLogUnusable)
		}
	}
	kc.k.writeLog = fsutil.WriteFileAtomic
	if !kc.poll(time.Second, false) {
		t.Fatalf("not restored once the log can be written (the last answer: %s)", kc.k.said)
	}
}

// The limit counts restores made: attempts whose link failed (the
// kubelet's dir unwritable a while) do not use it up.
func TestFailedRestoreAttemptsDoNotCountTowardsTheLimit(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	kc.k.link = func(string, []byte) error { return syscall.ENOSPC } // the kubelet's dir full a while
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	for range 5 {
		if kc.poll(2*time.Minute, false) {
			t.Fatal("restored though the link failed")
		}
	}
	kc.k.link = linkNew
	if !kc.poll(time.Second, false) {
		t.Fatalf("not restored once the dir has room (the last answer: %s)", kc.k.said)
	}
}

func TestTheRestoreLogKeepsItsLastLines(t *testing.T) {
	kc := newKeeperCase(t)
	cp := &plan.ManifestCheckpoint{MemberID: 2, SHA256: "ab"}
	for i := range restoreLogKeep + 50 {
		if err := kc.k.record(cp, plan.ManifestRestore{Detail: fmt.Sprint("restore ", i)}, kc.now.Add(time.Duration(i)*time.Minute), restoreAttempted); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(kc.k.stateDir, manifestRestoreLog))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != restoreLogKeep || !strings.Contains(lines[0], "restore 50\"") || !strings.Contains(lines[len(lines)-1], fmt.Sprintf("restore %d\"", restoreLogKeep+49)) {
		t.Fatalf("%d lines, first %s, last %s; want the last %d", len(lines), lines[0], lines[len(lines)-1], restoreLogKeep)
	}
	// The limit still reads the last hour of it.
	if n, err := kc.k.recentRestores(kc.now.Add(time.Duration(restoreLogKeep+49) * time.Minute)); n != 60 || err != nil {
		t.Fatalf("%d restores in the last hour (%v), want 60", n, err)
	}
}

func TestARestoreNeverReplacesAManifestThatAppeared(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	if err := os.WriteFile(kc.manifest, []byte("kind: Pod # a person's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, data, err := kc.k.load()
	if err != nil {
		t.Fatal(err)
	}
	if err := linkNew(kc.manifest, data); !os.IsExist(err) {
		t.Fatalf("linkNew over an existing manifest: %v, want exists", err)
	}
	if b, _ := os.ReadFile(kc.manifest); string(b) != "kind: Pod # a person's\n" {
		t.Fatalf("manifest replaced: %q", b)
	}
}

func TestADecommissionedNodesManifestStaysGoneAcrossRestarts(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	kc.k.SetDecommissioned(true)
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	// The agent restarts while the API is away: the state dir remembers.
	again := New(keeperConfig(kc.manifest, kc.k.stateDir, time.Minute, true), "cp-2", metrics.New(), nil, zap.NewNop())
	kc.k = again
	kc.poll(time.Second, false)
	if kc.poll(time.Hour, false) {
		t.Fatal("a decommissioned node's manifest was restored")
	}
	kc.k.SetDecommissioned(false)
	if !kc.poll(time.Second, false) {
		t.Fatal("not restored once the annotation was taken off")
	}
}

func TestAMovedMembersCheckpointIsForgotten(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	kc.k.Forget()
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	if kc.poll(time.Hour, false) {
		t.Fatal("restored without a checkpoint")
	}
	if ok, err := fsutil.Exists(CheckpointCopy(kc.k.stateDir, kc.manifest)); ok || err != nil {
		t.Fatalf("the checkpoint is still there (%v)", err)
	}
}

func TestNoRestoreWhileTheMembersAddressAnswers(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	kc.k.listenOverride = "http://" + ln.Addr().String()
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	if kc.poll(time.Hour, false) {
		t.Fatal("restored while the member's address answers")
	}
	if kc.k.said != plan.ReasonMemberRunning {
		t.Fatalf("answer %q, want member-running", kc.k.said)
	}
}

// A person's replacement manifest (another name in the kubelet's dir, its
// pod in crash back-off with its ports closed) is never raced by the old
// one; a checkpoint older than the manifest last in place never replaces it.
func TestNoRestoreOverAReplacementOrAnEditTheCheckpointMissed(t *testing.T) {
	kc := newKeeperCase(t)
	kc.poll(0, true)
	kc.poll(time.Second, true)
	b, _ := os.ReadFile(kc.manifest)
	other := filepath.Join(filepath.Dir(kc.manifest), "etcd-restore.yaml")
	if err := os.Rename(kc.manifest, other); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	if kc.poll(time.Hour, false) || kc.k.said != plan.ReasonMemberRunning {
		t.Fatalf("with %s in the dir: restored, or answer %q (want member-running)", other, kc.k.said)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kc.manifest, append(b, []byte("# an edit never seen healthy\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	if err := os.Remove(kc.manifest); err != nil {
		t.Fatal(err)
	}
	kc.poll(time.Second, false)
	if kc.poll(time.Hour, false) || kc.k.said != plan.ReasonNoCheckpoint {
		t.Fatalf("after an edit the checkpoint missed: restored, or answer %q (want no-checkpoint)", kc.k.said)
	}
}

// keeperConfig is the agent's config for a kubeadm member's manifest (its
// parked copy in the state dir's parked/, as the agent parks it).
func keeperConfig(manifest, stateDir string, delay time.Duration, autoHeal bool) Config {
	return Config{Manifest: manifest, Parked: filepath.Join(stateDir, "parked", filepath.Base(manifest)), StateDir: stateDir, Delay: delay, AutoHeal: autoHeal}
}
