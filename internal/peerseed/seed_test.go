package peerseed

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// seedIP is the loopback address of the learners these tests add; the
// lab's nodes use 127.0.0.11 and up.
const seedIP = "127.0.0.31"

func freeURLs(t testing.TB, n int) []string {
	t.Helper()
	var urls []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(seedIP, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		urls = append(urls, "http://"+l.Addr().String())
	}
	return urls
}

func labClient(t testing.TB, l *lab.Lab) *clientv3.Client {
	t.Helper()
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// addLearner adds a learner with peerURL and removes it again when the test
// ends (if the test did not), so the shared lab stays a healthy 3-member
// cluster.
func addLearner(t testing.TB, cli *clientv3.Client, peerURL string) (id, clusterID uint64) {
	t.Helper()
	resp, err := memberAddAsLearner(cli, peerURL)
	if err != nil {
		t.Fatal(err)
	}
	id = resp.Member.ID
	t.Cleanup(func() { removeMember(t, cli, id) })
	return id, resp.Header.ClusterId
}

// memberAddAsLearner adds a learner, retrying while etcd refuses membership
// changes as "unhealthy cluster": a leader that has not been connected to a
// quorum for 5 s (a freshly started lab) refuses them.
func memberAddAsLearner(cli *clientv3.Client, peerURL string) (*clientv3.MemberAddResponse, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
		cancel()
		if err == nil || !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline) {
			return resp, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func removeMember(t testing.TB, cli *clientv3.Client, id uint64) {
	t.Helper()
	var err error
	for range 80 { // "unhealthy cluster" for up to 5 s after a member stopped
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cli.MemberRemove(ctx, id)
		cancel()
		if err == nil || errors.Is(err, rpctypes.ErrMemberNotFound) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("remove member %x: %v", id, err)
}

// seedFixture is a snapshot streamed for seeding right after a learner was
// added (the learner was removed again at once: the db still has it).
type seedFixture struct {
	db                string
	learner, cluster  uint64
	voter             uint64 // a lab member
	src               SeedSource
	streamTook, total time.Duration
}

var (
	fixtureOnce sync.Once
	fixture     seedFixture
	fixtureErr  error
)

func getSeedFixture(t *testing.T) seedFixture {
	t.Helper()
	l := realLab(t)
	fixtureOnce.Do(func() {
		// Stays the error if the setup stops half-way (t.Fatal in a helper).
		fixtureErr = errors.New("the seed fixture's setup did not finish")
		start := time.Now()
		cli, err := l.EtcdClient()
		if err != nil {
			fixtureErr = err
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := memberAddAsLearner(cli, freeURLs(t, 1)[0])
		if err != nil {
			fixtureErr = err
			return
		}
		fixture.learner, fixture.cluster = resp.Member.ID, resp.Header.ClusterId
		defer removeMember(t, cli, fixture.learner)
		for _, m := range resp.Members {
			if !m.IsLearner {
				fixture.voter = m.ID
				break
			}
		}
		endpoint, _ := followerEndpoint(t)
		dir, err := os.MkdirTemp(shared.Dir(), "seed-fixture-")
		if err != nil {
			fixtureErr = err
			return
		}
		fixture.db = filepath.Join(dir, "seed.db")
		t0 := time.Now()
		var snap Snapshot
		snap, fixture.src, err = StreamForSeed(ctx, endpoint, nil, fixture.db, plan.StreamBytesNeeded(0), nil)
		if fixtureErr = err; err != nil {
			return
		}
		fixture.streamTook = time.Since(t0)
		fixture.total = time.Since(start)
		t.Logf("fixture: learner %x, %d-byte snapshot from %s in %s (%s with add and remove)", fixture.learner, snap.Size,
			endpoint, fixture.streamTook, fixture.total)
	})
	if fixtureErr != nil {
		t.Fatalf("seed fixture: %v", fixtureErr)
	}
	return fixture
}

// mustLeaveNoDataDir fails if dataDir or a seed temp dir next to it exists.
func mustLeaveNoDataDir(t *testing.T, dataDir string) {
	t.Helper()
	if _, err := os.Lstat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after a refused seed (stat err %v)", dataDir, err)
	}
	if left, _ := filepath.Glob(dataDir + seedTmpInfix + "*"); len(left) > 0 {
		t.Errorf("seed temp dirs left behind: %v", left)
	}
}

func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestSeededLearnerJoinsWithoutARaftSnapshot is the whole seed path against
// the real cluster, on each etcd of seedEtcds: add a learner, stream a
// snapshot after the add, build the data dir, start a real etcd on it,
// promote it, compare HashKV.
func TestSeededLearnerJoinsWithoutARaftSnapshot(t *testing.T) {
	for _, e := range seedEtcds {
		t.Run(e.name, func(t *testing.T) { seededLearnerJoins(t, e) })
	}
}

func seededLearnerJoins(t *testing.T, e seedEtcd) {
	l := e.up(t)
	cli := labClient(t, l)
	putKeys(t, l, "seed-before", 100, 256)
	urls := freeURLs(t, 2)
	peerURL, clientURL := urls[0], urls[1]
	newID, clusterID := addLearner(t, cli, peerURL)

	endpoint, _ := followerEndpointOf(t, l)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "seed.db")
	t0 := time.Now()
	snap, src, err := StreamForSeed(ctxWithTimeout(t, 30*time.Second), endpoint, nil, dbPath, plan.StreamBytesNeeded(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("streamed %d bytes from %s in %s (waited for leader index %d, source applied %d)", snap.Size, endpoint,
		time.Since(t0), src.LeaderIndex, src.SourceApplied)
	if src.ClusterID != clusterID || src.SHA256 != snap.SHA256 || src.Size != snap.Size || src.SourceApplied < src.LeaderIndex {
		t.Fatalf("provenance %+v does not match the stream %+v / cluster %x", src, snap, clusterID)
	}
	// Writes after the snapshot: the learner must get them from the log.
	putKeys(t, l, "seed-after", 50, 256)

	dataDir := filepath.Join(dir, "etcd")
	// The learner runs the lab's minor: the db's storage version (3.6's
	// key; absent on 3.5) is no newer.
	info, err := BuildDataDir(dbPath, dataDir, newID, clusterID, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), WithLearnerVersion(e.version+"0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built data dir in %s: index %d term %d voters %x learners %x", info.Took, info.ConsistentIndex, info.Term,
		info.ConfState.Voters, info.ConfState.Learners)
	if info.Term == 0 || info.ConsistentIndex < src.LeaderIndex || len(info.ConfState.Voters) != 3 ||
		len(info.ConfState.Learners) != 1 || info.ConfState.Learners[0] != newID || info.Members != 4 {
		t.Errorf("seed info %+v: want a term, index >= %d, 3 voters and learner %x", info, src.LeaderIndex, newID)
	}
	if len(info.LearnerPeerURLs) != 1 || info.LearnerPeerURLs[0] != peerURL {
		t.Errorf("learner peer URLs %v, want [%s]", info.LearnerPeerURLs, peerURL)
	}
	if got := fileSHA256(t, dbPath); got != snap.SHA256 {
		t.Errorf("the streamed db changed (sha256 %s, was %s): it must be copied, not moved or opened", got, snap.SHA256)
	}
	r := localdisk.Classify(ctxWithTimeout(t, 30*time.Second), localdisk.DataDirOnly(dataDir), localdisk.Expect{MemberID: newID, ClusterID: clusterID})
	if r.Class != localdisk.ClassOK {
		t.Fatalf("seeded data dir classifies %s: %s", r.Class, r.Detail)
	}
	mustHaveNoSeedTemps(t, dataDir)

	joinSeeded(t, e, l, cli, dir, dataDir, peerURL, clientURL, newID, info)
}

// joinSeeded starts a real etcd on the seeded dataDir (as the member
// runtime would), waits until the learner serves, promotes it, compares
// HashKV across the members, and checks etcd's own log: restarted at the
// seed's index from the .snap's v2 store, its initial corruption check
// passed, no raft snapshot applied; on etcd 3.5 the cluster version set
// from that store. The promoted learner lists every member by name. It
// returns the log.
func joinSeeded(t *testing.T, e seedEtcd, l *lab.Lab, cli *clientv3.Client, dir, dataDir, peerURL, clientURL string, newID uint64, info SeedInfo) []byte {
	t.Helper()
	ml, err := cli.MemberList(ctxWithTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ic, names []string
	for _, m := range ml.Members {
		if m.ID != newID {
			ic = append(ic, m.Name+"="+m.PeerURLs[0])
			names = append(names, m.Name)
		}
	}
	names = append(names, "seeded")
	sort.Strings(names)
	ic = append(ic, "seeded="+peerURL)
	sort.Strings(ic)
	logPath := filepath.Join(dir, "etcd.log")
	startedAt := time.Now()
	stop := startEtcd(t, etcdPath(l), logPath, "--name=seeded", "--data-dir="+dataDir,
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster="+strings.Join(ic, ","), "--initial-cluster-state=existing",
		"--initial-cluster-token="+l.Spec.ClusterToken, e.corruptCheck,
		"--logger=zap", "--log-outputs=stderr")
	// Remove first (the member then stops itself), then make sure it is gone.
	t.Cleanup(func() {
		removeMember(t, cli, newID)
		stop()
		if err := l.WaitHealthy(context.Background(), 3, 30*time.Second); err != nil {
			t.Errorf("lab not healthy after the test: %v", err)
		}
	})

	waitLearnerServes(t, cli, clientURL, newID)
	servedAfter := time.Since(startedAt)
	attempts, promoteTook := promote(t, cli, newID)
	t.Logf("seeded learner served after %s; promoted after %d attempt(s) in %s", servedAfter, attempts, promoteTook)

	hashes := hashKVAll(t, cli)
	t.Logf("HashKV at revision %d: %v", hashes.rev, hashes.byMember)
	// The names come from the seed's membership (the .snap's v2 store on
	// 3.5), the learner's own from its publish.
	if got := memberNamesAt(t, clientURL); !slices.Equal(got, names) {
		t.Errorf("the seeded member lists members %v, want %v", got, names)
	}

	logs, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{
		`"restarting local member"`,
		fmt.Sprintf(`"commit-index":%d`, info.ConsistentIndex),
		`"initial corruption checking passed; no corruption"`,
		`"recovered v2 store from snapshot"`,
		fmt.Sprintf(`"snapshot-index":%d`, info.ConsistentIndex),
	}
	if e.v2 {
		// The version the seed's .snap carries, e.g. 3.5 (etcd logs major.minor).
		wants = append(wants, `"set cluster version from store"`, fmt.Sprintf(`"cluster-version":"%s"`, strings.TrimSuffix(e.version, ".")))
	}
	for _, want := range wants {
		if !bytes.Contains(logs, []byte(want)) {
			t.Errorf("etcd log lacks %s (log kept at %s)", want, logPath)
		}
	}
	// A raft snapshot from the leader is what seeding avoids.
	if bytes.Contains(logs, []byte(`"applying snapshot"`)) {
		t.Errorf("the seeded learner applied a raft snapshot from the leader (log %s)", logPath)
	}
	if t.Failed() {
		keep := filepath.Join(e.lab.Dir(), "seeded-etcd.log")
		_ = os.WriteFile(keep, logs, 0o644)
		t.Logf("etcd log copied to %s", keep)
	}
	return logs
}

func mustHaveNoSeedTemps(t *testing.T, dataDir string) {
	t.Helper()
	if left, _ := filepath.Glob(dataDir + seedTmpInfix + "*"); len(left) > 0 {
		t.Errorf("seed temp dirs left behind: %v", left)
	}
}

// memberNamesAt is the member names the member at clientURL lists itself
// (serializable: from its own membership), sorted.
func memberNamesAt(t *testing.T, clientURL string) []string {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ml, err := c.MemberList(ctxWithTimeout(t, 5*time.Second), clientv3.WithSerializable())
	if err != nil {
		t.Fatalf("member list at %s: %v", clientURL, err)
	}
	var names []string
	for _, m := range ml.Members {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return names
}

// startEtcd starts the etcd binary with args, its output in logPath, and
// returns a func that stops exactly that process (SIGTERM, then SIGKILL)
// and waits.
func startEtcd(t *testing.T, binary, logPath string, args ...string) (stop func()) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitLearnerServes waits until the member at clientURL answers Status as
// learner id.
func waitLearnerServes(t *testing.T, cli *clientv3.Client, clientURL string, id uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, clientURL)
		cancel()
		switch {
		case err != nil:
			last = err
		case st.Header.MemberId != id || !st.IsLearner:
			last = fmt.Errorf("status says member %x learner %v", st.Header.MemberId, st.IsLearner)
		default:
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the seeded learner does not serve at %s: %v", clientURL, last)
}

// promote promotes id, retrying while etcd says the learner is not ready.
func promote(t *testing.T, cli *clientv3.Client, id uint64) (attempts int, took time.Duration) {
	t.Helper()
	start := time.Now()
	var err error
	for attempts = 1; time.Since(start) < 30*time.Second; attempts++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cli.MemberPromote(ctx, id)
		cancel()
		if err == nil {
			return attempts, time.Since(start)
		}
		if !errors.Is(err, rpctypes.ErrMemberLearnerNotReady) && !strings.Contains(err.Error(), "not in sync") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("promote %x: %v (after %d attempts)", id, err, attempts)
	return 0, 0
}

type hashKVs struct {
	rev      int64
	byMember map[string]uint32
}

// hashKVAll compares HashKV of every member at one revision.
func hashKVAll(t *testing.T, cli *clientv3.Client) hashKVs {
	t.Helper()
	put, err := cli.Put(ctxWithTimeout(t, 5*time.Second), "seed-hashkv-mark", time.Now().String())
	if err != nil {
		t.Fatal(err)
	}
	rev := put.Header.Revision
	ml, err := cli.MemberList(ctxWithTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := hashKVs{rev: rev, byMember: map[string]uint32{}}
	var first *clientv3.HashKVResponse
	for _, m := range ml.Members {
		var resp *clientv3.HashKVResponse
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err = cli.HashKV(ctx, m.ClientURLs[0], rev)
			cancel()
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // e.g. "future revision" on a member still catching up
		}
		if err != nil {
			t.Fatalf("HashKV of %s at %d: %v", m.Name, rev, err)
		}
		out.byMember[m.Name] = resp.Hash
		if first == nil {
			first = resp
		} else if resp.Hash != first.Hash || resp.CompactRevision != first.CompactRevision {
			t.Errorf("HashKV of %s at revision %d is %d (compact %d), another member's is %d (compact %d)",
				m.Name, rev, resp.Hash, resp.CompactRevision, first.Hash, first.CompactRevision)
		}
	}
	if len(out.byMember) != 4 {
		t.Errorf("hashed %d members, want 4", len(out.byMember))
	}
	return out
}

// TestALearnerSeededFromASnapshotTakenBeforeItsAdd: the snapshot predates
// the learner's add (a stored snapshot, a move's pre-change backup), with
// writes between it and the add and after. Without WithLearner the build
// refuses (learner-absent); with it the learner is written into the
// snapshot's membership, and a real etcd started on the data dir applies
// the add's entry from the leader's log as a change it already has
// ("membership: ID exists": raft applies it as a no-op), passes its initial corruption
// check, catches up from the log (no raft snapshot), is promoted, and every
// member's HashKV is equal.
func TestALearnerSeededFromASnapshotTakenBeforeItsAdd(t *testing.T) {
	for _, e := range seedEtcds {
		t.Run(e.name, func(t *testing.T) { learnerSeededBeforeItsAdd(t, e) })
	}
}

func learnerSeededBeforeItsAdd(t *testing.T, e seedEtcd) {
	l := e.up(t)
	cli := labClient(t, l)
	putKeys(t, l, "preadd-before", 100, 256)
	endpoint, _ := followerEndpointOf(t, l)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "stored.db")
	snap, src, err := StreamForSeed(ctxWithTimeout(t, 30*time.Second), endpoint, nil, dbPath, plan.StreamBytesNeeded(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	putKeys(t, l, "preadd-between", 50, 256) // after the snapshot, before the add
	urls := freeURLs(t, 2)
	peerURL, clientURL := urls[0], urls[1]
	newID, clusterID := addLearner(t, cli, peerURL)
	putKeys(t, l, "preadd-after", 50, 256)

	dataDir := filepath.Join(dir, "etcd")
	lg := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	if _, err := BuildDataDir(dbPath, dataDir, newID, clusterID, lg); !errors.Is(err, ErrSeedLearnerAbsent) {
		t.Fatalf("without WithLearner: %v, want %v", err, ErrSeedLearnerAbsent)
	}
	// A peer URL another member of the snapshot has is refused too.
	if _, err := BuildDataDir(dbPath, dataDir, newID, clusterID, lg, WithLearner([]string{l.Spec.Nodes[0].PeerURL})); !errors.Is(err, ErrSeedLearnerAbsent) {
		t.Fatalf("with a member's peer URL: %v, want %v", err, ErrSeedLearnerAbsent)
	}
	// The cluster's membership now, after the add: the seed must match it.
	ml, err := cli.MemberList(ctxWithTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var now []ExpectedMember
	for _, m := range ml.Members {
		now = append(now, ExpectedMember{ID: m.ID, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner})
	}
	// A membership that changed otherwise since the snapshot (here: a
	// member the cluster has and the snapshot lacks) is refused.
	other := append(slices.Clone(now), ExpectedMember{ID: 0xfeed, PeerURLs: []string{"http://127.0.0.99:2380"}})
	if _, err := BuildDataDir(dbPath, dataDir, newID, clusterID, lg, WithLearner([]string{peerURL}), ExpectMembership(other)); !errors.Is(err, ErrSeedMembershipDiffers) {
		t.Fatalf("with a changed membership: %v, want %v", err, ErrSeedMembershipDiffers)
	}
	mustHaveNoSeedTemps(t, dataDir)
	info, err := BuildDataDir(dbPath, dataDir, newID, clusterID, lg, WithLearner([]string{peerURL}), ExpectMembership(now))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built from a snapshot at index %d (%d bytes, leader index at the stream %d): learner written %v, voters %x learners %x",
		info.ConsistentIndex, snap.Size, src.LeaderIndex, info.LearnerWritten, info.ConfState.Voters, info.ConfState.Learners)
	if !info.LearnerWritten || len(info.ConfState.Learners) != 1 || info.ConfState.Learners[0] != newID || len(info.ConfState.Voters) != 3 || info.Members != 4 {
		t.Fatalf("seed info %+v: want the learner written in, 3 voters and learner %x", info, newID)
	}
	if got := fileSHA256(t, dbPath); got != snap.SHA256 {
		t.Errorf("the stored db changed (sha256 %s, was %s): only the copy may be written", got, snap.SHA256)
	}
	logs := joinSeeded(t, e, l, cli, dir, dataDir, peerURL, clientURL, newID, info)
	if !bytes.Contains(logs, []byte(`"Validation on configuration change failed"`)) || !bytes.Contains(logs, []byte("membership: ID exists")) {
		t.Errorf("etcd's log does not show the add applied as a change it already had")
	}
}
