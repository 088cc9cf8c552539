package peerseed

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/raft/v3/raftpb"
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
		snap, fixture.src, err = StreamForSeed(ctx, endpoint, nil, fixture.db, NeedBytes(0), nil)
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
// the real cluster: add a learner, stream a snapshot after the add, build
// the data dir, start a real etcd on it, promote it, compare HashKV.
func TestSeededLearnerJoinsWithoutARaftSnapshot(t *testing.T) {
	l := realLab(t)
	cli := labClient(t, l)
	putKeys(t, l, "seed-before", 100, 256)
	urls := freeURLs(t, 2)
	peerURL, clientURL := urls[0], urls[1]
	newID, clusterID := addLearner(t, cli, peerURL)

	endpoint, _ := followerEndpoint(t)
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "seed.db")
	t0 := time.Now()
	snap, src, err := StreamForSeed(ctxWithTimeout(t, 30*time.Second), endpoint, nil, dbPath, NeedBytes(0), nil)
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
	info, err := BuildDataDir(dbPath, dataDir, newID, clusterID, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
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
	r := localdisk.Classify(ctxWithTimeout(t, 30*time.Second), dataDir, localdisk.Expect{MemberID: newID, ClusterID: clusterID})
	if r.Class != localdisk.ClassOK {
		t.Fatalf("seeded data dir classifies %s: %s", r.Class, r.Detail)
	}
	mustHaveNoSeedTemps(t, dataDir)

	// Start a real etcd on it, as the member runtime would.
	ml, err := cli.MemberList(ctxWithTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var ic []string
	for _, m := range ml.Members {
		if m.ID != newID {
			ic = append(ic, m.Name+"="+m.PeerURLs[0])
		}
	}
	ic = append(ic, "seeded="+peerURL)
	sort.Strings(ic)
	logPath := filepath.Join(dir, "etcd.log")
	startedAt := time.Now()
	stop := startEtcd(t, l.Spec.BinDir, logPath, "--name=seeded", "--data-dir="+dataDir,
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster="+strings.Join(ic, ","), "--initial-cluster-state=existing",
		"--initial-cluster-token="+l.Spec.ClusterToken, "--feature-gates=InitialCorruptCheck=true",
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

	logs, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"restarting local member"`,
		fmt.Sprintf(`"commit-index":%d`, info.ConsistentIndex),
		`"initial corruption checking passed; no corruption"`,
	} {
		if !bytes.Contains(logs, []byte(want)) {
			t.Errorf("etcd log lacks %s (log kept at %s)", want, logPath)
		}
	}
	// A raft snapshot from the leader is what seeding avoids.
	if bytes.Contains(logs, []byte(`"applying snapshot"`)) {
		t.Errorf("the seeded learner applied a raft snapshot from the leader (log %s)", logPath)
	}
	if t.Failed() {
		keep := filepath.Join(shared.Dir(), "seeded-etcd.log")
		_ = os.WriteFile(keep, logs, 0o644)
		t.Logf("etcd log copied to %s", keep)
	}
}

func mustHaveNoSeedTemps(t *testing.T, dataDir string) {
	t.Helper()
	if left, _ := filepath.Glob(dataDir + seedTmpInfix + "*"); len(left) > 0 {
		t.Errorf("seed temp dirs left behind: %v", left)
	}
}

// startEtcd starts bin/etcd with args, its output in logPath, and returns a
// func that stops exactly that process (SIGTERM, then SIGKILL) and waits.
func startEtcd(t *testing.T, binDir, logPath string, args ...string) (stop func()) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "etcd"), args...)
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

// dbVariant copies the fixture's db into dir, lets change alter it, and
// writes its provenance record: as streamed (the record no longer matches
// an altered db), or recomputed for the altered db.
func dbVariant(t *testing.T, fx seedFixture, change func(path string), recompute bool) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "variant.db")
	b, err := os.ReadFile(fx.db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(dst)
	}
	src := fx.src
	if recompute {
		st, err := os.Stat(dst)
		if err != nil {
			t.Fatal(err)
		}
		src.Size, src.SHA256 = st.Size(), fileSHA256(t, dst)
	}
	if err := writeSeedSource(dst, src); err != nil {
		t.Fatal(err)
	}
	return dst
}

// updateMeta changes the db's meta bucket with bbolt directly.
func updateMeta(t *testing.T, path string, f func(b *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return f(tx.Bucket(schema.Meta.Name())) }); err != nil {
		t.Fatal(err)
	}
}

func TestBuildDataDirRefusesAndLeavesNoDataDir(t *testing.T) {
	fx := getSeedFixture(t)
	other := fx.learner ^ 0x5a5a5a5a
	tests := []struct {
		name    string
		db      func(t *testing.T) string
		newID   uint64
		cluster uint64
		prepare func(t *testing.T, dataDir string)
		want    error
		reason  string
	}{
		{name: "learner absent from the membership", newID: other, want: ErrSeedLearnerAbsent, reason: "learner-absent"},
		{name: "member is a voter", newID: fx.voter, want: ErrSeedNotLearner, reason: "not-learner"},
		{name: "foreign cluster", cluster: fx.cluster + 1, want: ErrSeedForeignCluster, reason: "foreign-cluster"},
		{
			name: "term key absent",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error { return b.Delete(schema.MetaTermKeyName) })
				}, true)
			},
			want: ErrSeedTermZero, reason: "term-zero",
		},
		{
			name: "term zero",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error { return b.Put(schema.MetaTermKeyName, make([]byte, 8)) })
				}, true)
			},
			want: ErrSeedTermZero, reason: "term-zero",
		},
		{
			name: "stored ConfState lacks the learner",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error {
						var cs raftpb.ConfState
						if err := json.Unmarshal(b.Get(schema.MetaConfStateName), &cs); err != nil {
							return err
						}
						cs.Learners = nil
						v, _ := json.Marshal(cs)
						return b.Put(schema.MetaConfStateName, v)
					})
				}, true)
			},
			want: ErrSeedConfStateMismatch, reason: "confstate-mismatch",
		},
		{
			name: "no stored ConfState",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error { return b.Delete(schema.MetaConfStateName) })
				}, true)
			},
			want: ErrSeedConfStateMismatch, reason: "confstate-mismatch",
		},
		{
			name:    "data dir exists (even empty)",
			prepare: func(t *testing.T, dataDir string) { os.Mkdir(dataDir, 0o700) },
			want:    ErrSeedDataDirExists, reason: "data-dir-exists",
		},
		{
			name: "truncated db",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					st, _ := os.Stat(p)
					os.Truncate(p, st.Size()/2)
				}, false)
			},
			want: ErrSeedCorruptDB, reason: "corrupt-db",
		},
		{
			name: "one flipped byte",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					b, _ := os.ReadFile(p)
					b[len(b)/2] ^= 0x10
					os.WriteFile(p, b, 0o600)
				}, false)
			},
			want: ErrHashMismatch, reason: "snapshot-hash-mismatch",
		},
		{
			name: "garbled meta pages, matching record",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					f, _ := os.OpenFile(p, os.O_WRONLY, 0)
					f.WriteAt(make([]byte, 8192), 0)
					f.Close()
				}, true)
			},
			want: ErrSeedCorruptDB, reason: "corrupt-db",
		},
		{
			name: "no provenance record",
			db: func(t *testing.T) string {
				p := dbVariant(t, fx, nil, false)
				os.Remove(SeedSourcePath(p))
				return p
			},
			want: ErrSeedNoProvenance, reason: "no-provenance",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := fx.db
			if tt.db != nil {
				db = tt.db(t)
			}
			before := fileSHA256(t, db)
			newID, cluster := fx.learner, fx.cluster
			if tt.newID != 0 {
				newID = tt.newID
			}
			if tt.cluster != 0 {
				cluster = tt.cluster
			}
			dataDir := filepath.Join(t.TempDir(), "etcd")
			if tt.prepare != nil {
				tt.prepare(t, dataDir)
			}
			_, err := BuildDataDir(db, dataDir, newID, cluster, zap.NewNop())
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			t.Logf("refused: %v", err)
			if got := SeedReason(err); got != tt.reason {
				t.Errorf("SeedReason = %q, want %q", got, tt.reason)
			}
			if tt.prepare != nil {
				// The existing data dir is left exactly as it was.
				if entries, err := os.ReadDir(dataDir); err != nil || len(entries) != 0 {
					t.Errorf("existing data dir changed: %v %v", entries, err)
				}
				mustHaveNoSeedTemps(t, dataDir)
			} else {
				mustLeaveNoDataDir(t, dataDir)
			}
			if after := fileSHA256(t, db); after != before {
				t.Errorf("the source db changed")
			}
		})
	}
}

func TestBuildDataDirRemovesItsLeftoverTempDirAndCopiesTheDB(t *testing.T) {
	fx := getSeedFixture(t)
	dataDir := filepath.Join(t.TempDir(), "etcd")
	// What a crash mid-build leaves behind.
	stale := dataDir + seedTmpInfix + "123456"
	if err := os.MkdirAll(filepath.Join(stale, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "member", "snap", "db"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := BuildDataDir(fx.db, dataDir, fx.learner, fx.cluster, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %s: index %d term %d, %d members, %d-byte db", info.Took, info.ConsistentIndex, info.Term, info.Members, info.DBBytes)
	mustHaveNoSeedTemps(t, dataDir)
	if info.DBSHA256 != fx.src.SHA256 || info.DBBytes != fx.src.Size {
		t.Errorf("copied db %d bytes sha256 %s, the stream had %d bytes %s", info.DBBytes, info.DBSHA256, fx.src.Size, fx.src.SHA256)
	}
	if _, err := os.Stat(fx.db); err != nil {
		t.Errorf("the streamed db must stay where it was (copied, not moved): %v", err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dataDir, "member", "snap", "*.snap"))
	want := filepath.Join(dataDir, "member", "snap", fmt.Sprintf("%016x-%016x.snap", info.Term, info.ConsistentIndex))
	if len(snaps) != 1 || snaps[0] != want {
		t.Errorf("snap files %v, want [%s]", snaps, want)
	}
	if st, err := os.Stat(dataDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v (%v), want 0700 as etcd wants it", st.Mode().Perm(), err)
	}
	r := localdisk.Classify(ctxWithTimeout(t, 30*time.Second), dataDir, localdisk.Expect{MemberID: fx.learner, ClusterID: fx.cluster})
	if r.Class != localdisk.ClassOK {
		t.Errorf("seeded data dir classifies %s: %s", r.Class, r.Detail)
	}
	// A second build onto the same data dir is refused, not merged.
	if _, err := BuildDataDir(fx.db, dataDir, fx.learner, fx.cluster, zap.NewNop()); !errors.Is(err, ErrSeedDataDirExists) {
		t.Errorf("second build: %v, want ErrSeedDataDirExists", err)
	}
}

func TestSeedSourceRecordRoundTrips(t *testing.T) {
	db := filepath.Join(t.TempDir(), "x.db")
	in := SeedSource{ClusterID: 0xfedcba9876543210, SourceID: 0x8e9e05c52164694d, LeaderID: 1, Endpoint: "https://10.0.0.1:2379",
		LeaderIndex: 42, SourceApplied: 43, Size: 8192, SHA256: strings.Repeat("ab", 32), Version: "3.6.0",
		StreamedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := writeSeedSource(db, in); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(SeedSourcePath(db))
	if !bytes.Contains(raw, []byte(`"clusterID": "fedcba9876543210"`)) {
		t.Errorf("IDs are not written in hex:\n%s", raw)
	}
	out, err := ReadSeedSource(db)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("read back %+v, wrote %+v", out, in)
	}
	if err := os.WriteFile(SeedSourcePath(db), []byte(`{"clusterID":"0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSeedSource(db); !errors.Is(err, ErrSeedNoProvenance) {
		t.Errorf("incomplete record: %v, want ErrSeedNoProvenance", err)
	}
	if got := SeedReason(fmt.Errorf("wrapped: %w", ErrDiskFull)); got != "disk-full" {
		t.Errorf("SeedReason(disk full) = %q", got)
	}
	if got := SeedReason(fmt.Errorf("stream: %w", ErrHashMismatch)); got != "snapshot-hash-mismatch" {
		t.Errorf("SeedReason(hash mismatch) = %q", got)
	}
	if got := SeedReason(fmt.Errorf("stream: %w after 5 bytes: EOF", ErrTruncated)); got != "snapshot-truncated" {
		t.Errorf("SeedReason(truncated) = %q", got)
	}
	if got := SeedReason(context.DeadlineExceeded); got != "error" {
		t.Errorf("SeedReason(other) = %q", got)
	}
}

// BeforeRename sees the complete, synced temp dir while the data dir does
// not exist yet; its error aborts the build and leaves neither behind.
func TestBuildDataDirBeforeRenameSeesTheTempDirAndCanAbort(t *testing.T) {
	fx := getSeedFixture(t)
	dataDir := filepath.Join(t.TempDir(), "etcd")
	stop := errors.New("held and abandoned")
	var sawTemp string
	_, err := BuildDataDir(fx.db, dataDir, fx.learner, fx.cluster, zap.NewNop(), BeforeRename(func(tmp string) error {
		sawTemp = tmp
		if _, err := os.Stat(filepath.Join(tmp, "member", "snap", "db")); err != nil {
			t.Errorf("temp dir incomplete at the rename: %v", err)
		}
		if _, err := os.Lstat(dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("data dir exists before the rename: %v", err)
		}
		return stop
	}))
	if !errors.Is(err, stop) {
		t.Fatalf("got %v, want the hook's error", err)
	}
	if !strings.HasPrefix(filepath.Base(sawTemp), filepath.Base(dataDir)+seedTmpInfix) {
		t.Errorf("hook saw %q, want a %s temp dir next to the data dir", sawTemp, seedTmpInfix)
	}
	mustLeaveNoDataDir(t, dataDir)
	mustHaveNoSeedTemps(t, dataDir)
}

// MoveDB: the streamed db becomes the data dir's db without a copy, and is
// still checked against the stream's sha256 after the move.
func TestBuildDataDirMoveDBMovesAndStillChecksTheHash(t *testing.T) {
	fx := getSeedFixture(t)
	db := dbVariant(t, fx, nil, false)
	dataDir := filepath.Join(t.TempDir(), "etcd")
	info, err := BuildDataDir(db, dataDir, fx.learner, fx.cluster, zap.NewNop(), MoveDB())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the streamed db is still at %s (%v): want it moved", db, err)
	}
	if info.DBSHA256 != fx.src.SHA256 || info.DBBytes != fx.src.Size {
		t.Errorf("moved db %d bytes sha256 %s, the stream had %d bytes %s", info.DBBytes, info.DBSHA256, fx.src.Size, fx.src.SHA256)
	}
	r := localdisk.Classify(ctxWithTimeout(t, 30*time.Second), dataDir, localdisk.Expect{MemberID: fx.learner, ClusterID: fx.cluster})
	if r.Class != localdisk.ClassOK {
		t.Errorf("seeded data dir classifies %s: %s", r.Class, r.Detail)
	}

	flipped := dbVariant(t, fx, func(p string) {
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0x10
		os.WriteFile(p, b, 0o600)
	}, false)
	dataDir2 := filepath.Join(t.TempDir(), "etcd")
	if _, err := BuildDataDir(flipped, dataDir2, fx.learner, fx.cluster, zap.NewNop(), MoveDB()); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("moved db with a flipped byte: %v, want ErrHashMismatch", err)
	}
	mustLeaveNoDataDir(t, dataDir2)
	mustHaveNoSeedTemps(t, dataDir2)
}
