package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/etcd-agent/etcd-agent/internal/gate"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"github.com/etcd-agent/etcd-agent/metrics"
)

type recordedEvents []string

func (r *recordedEvents) Eventf(eventType, reason, format string, args ...any) {
	*r = append(*r, eventType+" "+reason+": "+fmt.Sprintf(format, args...))
}

type skeletonCase struct {
	k      *skeletonKeeper
	dirs   localdisk.Dirs
	events *recordedEvents
	logs   *observer.ObservedLogs
}

// newSkeletonCase: member m2's data dir (and, with wal, its dedicated WAL
// dir) on the node, written as etcd writes them.
func newSkeletonCase(t *testing.T, wal bool) *skeletonCase {
	t.Helper()
	root := t.TempDir()
	id := watchdog.Identity{Name: "m2", DataDir: filepath.Join(root, "data")}
	if wal {
		id.WALDir = filepath.Join(root, "wal-disk", "wal")
	}
	d := id.Dirs()
	for _, dir := range []string{filepath.Join(d.Data, "member", "snap"), d.WALDir(), filepath.Join(root, "state")} {
		must(t, os.MkdirAll(dir, 0o700))
	}
	must(t, os.WriteFile(filepath.Join(d.Data, "member", "snap", "db"), []byte("bbolt"), 0o600))
	must(t, os.WriteFile(filepath.Join(d.WALDir(), "0000000000000000-0000000000000000.wal"), []byte("wal"), 0o600))
	core, logs := observer.New(zap.InfoLevel)
	ev := &recordedEvents{}
	c := Config{StateDir: filepath.Join(root, "state")}
	return &skeletonCase{k: c.newSkeletonKeeper(id, metrics.New(), ev, zap.New(core)), dirs: d, events: ev, logs: logs}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serving is a full observation of m2 serving as a voter of a three-member
// cluster whose third member is down, its data dir classed as class.
func serving(class string) observation.Observation {
	return observation.Observation{ClusterID: 0xc1, LeaderID: 1, Members: []observation.Member{
		{ID: 1, Name: "m1", Serving: true}, {ID: 2, Name: "m2", Serving: true}, {ID: 3, Name: "m3"}},
		Local: observation.Local{Name: "m2", Match: observation.MatchOK, ID: 2, AnsweringID: 2, AnsweringClusterID: 0xc1, Serving: true, DataDirClass: class}}
}

func (c *skeletonCase) restores(t *testing.T) float64 {
	t.Helper()
	return testutil.ToFloat64(c.k.metrics.SkeletonRestoresTotal.WithLabelValues("m2"))
}

// Issue 38: a wiped member that still serves died 30 s later on etcd's own
// purge. The agent now puts back what etcd's purge lists (the data dir,
// member/, member/snap, the WAL dir), marked, and says so: a log line, an
// Event, etcd_agent_data_dir_skeleton_restores_total.
func TestAWipedServingMembersSkeletonIsPutBackMarked(t *testing.T) {
	for _, wal := range []bool{false, true} {
		t.Run(fmt.Sprintf("dedicated WAL dir %v", wal), func(t *testing.T) {
			c := newSkeletonCase(t, wal)
			if c.k.consider(serving(observation.DataDirInUse)) || c.restores(t) != 0 {
				t.Fatal("a healthy member's dirs were touched")
			}
			must(t, os.RemoveAll(c.dirs.Data))
			if c.dirs.WAL != "" {
				must(t, os.RemoveAll(c.dirs.WAL))
			}
			if !c.k.consider(serving(observation.DataDirMissing)) {
				t.Fatal("the skeleton of a wiped member that serves was not put back")
			}
			p := localdisk.SkeletonPartsOf(c.dirs)
			for _, dir := range []string{p.DataDir, p.MemberDir, p.SnapDir, p.WALDir} {
				if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
					t.Fatalf("%s not made: %v", dir, err)
				}
			}
			if _, err := os.Stat(p.Marker); err != nil {
				t.Fatalf("no marker: %v", err)
			}
			if r := localdisk.ClassifyLayout(c.dirs); r.Class != localdisk.ClassCorrupt || !strings.Contains(r.Detail, "skeleton") {
				t.Fatalf("the restored skeleton classes %s (%s), want corrupt: skeleton", r.Class, r.Detail)
			}
			if c.restores(t) != 1 || len(*c.events) != 1 || !strings.HasPrefix((*c.events)[0], "Warning DataDirSkeletonRestored: m2: ") {
				t.Fatalf("restores_total %v, events %q; want 1 and one Warning DataDirSkeletonRestored", c.restores(t), *c.events)
			}
			if n := c.logs.FilterMessageSnippet("skeleton put back").Len(); n != 1 {
				t.Fatalf("%d log lines say the skeleton was put back, want 1: %v", n, c.logs.All())
			}
			// The next observation sees the marked skeleton: nothing more.
			if c.k.consider(serving(observation.DataDirCorrupt)) || c.restores(t) != 1 {
				t.Fatal("a skeleton in place was made again")
			}
		})
	}
}

// Never while a recovery of the member is open (its stop and quarantine
// own the data dir), never for a member that does not serve, and never in
// a dry run: nothing is made, and the member's dirs stay as they were.
func TestNoSkeletonWhileARecoveryIsOpenOrTheMemberDoesNotServe(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(t *testing.T, c *skeletonCase) observation.Observation
	}{
		{"a recovery is open", func(t *testing.T, c *skeletonCase) observation.Observation {
			must(t, journal.Save(c.k.stateDir, journal.Record{ID: "r1", Member: "m2", Phase: journal.PhaseStopped}))
			return serving(observation.DataDirMissing)
		}},
		{"the member does not serve", func(t *testing.T, c *skeletonCase) observation.Observation {
			o := serving(observation.DataDirMissing)
			o.Local.Serving, o.Members[1].Serving = false, false
			return o
		}},
		{"another process answers at its client URL", func(t *testing.T, c *skeletonCase) observation.Observation {
			o := serving(observation.DataDirMissing)
			o.Local.Match, o.Local.ID, o.Local.MatchDetail = observation.MatchAmbiguous, 0, "member 9 answers at our client URL"
			return o
		}},
		{"a dry run", func(t *testing.T, c *skeletonCase) observation.Observation {
			c.k.dryRun = true
			return serving(observation.DataDirMissing)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := newSkeletonCase(t, false)
			must(t, os.RemoveAll(k.dirs.Data))
			if k.k.consider(c.set(t, k)) {
				t.Fatal("a skeleton was made")
			}
			if _, err := os.Lstat(k.dirs.Data); !os.IsNotExist(err) || k.restores(t) != 0 || len(*k.events) != 0 {
				t.Fatalf("data dir %v, restores %v, events %q: want nothing made", err, k.restores(t), *k.events)
			}
		})
	}
}

// kubeadm mounts its hostPath right at --data-dir: a removed data dir is
// then the root of etcd's volume, and a dir made again at its path on the
// node is not what etcd's container sees. The identity says so; a data dir
// inside the volume does not.
func TestTheIdentitySaysWhetherTheDataDirIsEtcdsMountRoot(t *testing.T) {
	path := walDirManifest(t, false)
	id, err := ResolveIdentity(Config{StaticPodManifest: path})
	must(t, err)
	if !id.DataDirMountRoot || id.WALDirMountRoot {
		t.Fatalf("data dir at its hostPath's mount path: DataDirMountRoot %v, WALDirMountRoot %v; want true, false", id.DataDirMountRoot, id.WALDirMountRoot)
	}
	b, _ := os.ReadFile(path)
	must(t, os.WriteFile(path, []byte(strings.Replace(string(b), "--data-dir=/var/lib/etcd", "--data-dir=/var/lib/etcd/data", 1)), 0o600))
	id, err = ResolveIdentity(Config{StaticPodManifest: path})
	must(t, err)
	if id.DataDir != "/mnt/data/etcd/data" || id.DataDirMountRoot {
		t.Fatalf("data dir inside its volume: %s, DataDirMountRoot %v; want /mnt/data/etcd/data, false", id.DataDir, id.DataDirMountRoot)
	}

	// Such a data dir removed whole is not made again (the member ends at
	// etcd's purge, as before); its contents removed, they are.
	k := newSkeletonCase(t, false)
	k.k.id.DataDirMountRoot = true
	must(t, os.RemoveAll(k.dirs.Data))
	if k.k.consider(serving(observation.DataDirMissing)) {
		t.Fatal("a removed mount root was made again on the node")
	}
	if n := k.logs.FilterMessageSnippet("cannot be put back").Len(); n != 1 {
		t.Fatalf("%d log lines say why not, want 1: %v", n, k.logs.All())
	}
	must(t, os.MkdirAll(k.dirs.Data, 0o700))
	if !k.k.consider(serving(observation.DataDirEmpty)) {
		t.Fatal("the member/ of a mount root's data dir was not put back")
	}
}

// The start gate runs the same data dir check: etcd never starts on a
// marked skeleton, whatever the cluster would say (it is not asked).
func TestTheGateHoldsAMarkedSkeleton(t *testing.T) {
	k := newSkeletonCase(t, false)
	must(t, os.RemoveAll(k.dirs.Data))
	if !k.k.consider(serving(observation.DataDirMissing)) {
		t.Fatal("no skeleton made")
	}
	argv := []string{"/bin/etcd", "--name=m2", "--data-dir=" + k.dirs.Data, "--initial-advertise-peer-urls=" + closedEndpoint(t),
		"--advertise-client-urls=" + closedEndpoint(t), "--initial-cluster-state=existing"}
	c := Config{StateDir: k.k.stateDir, Endpoints: []string{closedEndpoint(t)}, PollInterval: 20 * time.Millisecond, Log: zap.NewNop()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := gate.Wait(ctx, c.GateConfig(), time.Second, argv)
	if err == nil || !strings.Contains(err.Error(), string(plan.GateDataDirUnusable)) || !strings.Contains(err.Error(), "skeleton") {
		t.Fatalf("the gate on a marked skeleton: %+v, %v; want it held, %s, naming the skeleton", v, err, plan.GateDataDirUnusable)
	}
}
