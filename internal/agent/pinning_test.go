package agent

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/record"
	"go.uber.org/zap"
)

// fakeRecord is a pin record in memory (the real ones: nodePins and
// clusterrecord.Store, tested against their API objects).
type fakeRecord struct {
	pins  map[string]pin.Pin
	err   error
	wrote []pin.Pin
}

func (f *fakeRecord) ReadPins(context.Context) (map[string]pin.Pin, bool, error) {
	return f.pins, len(f.pins) > 0, f.err
}
func (f *fakeRecord) Behind(rec pin.Pin, ok bool, ours pin.Pin) bool {
	return nodePins{}.Behind(rec, ok, ours)
}
func (f *fakeRecord) WritePin(_ context.Context, p pin.Pin, _ bool) error {
	f.wrote = append(f.wrote, p)
	if f.err == nil && f.pins != nil {
		f.pins[p.Member] = p
	}
	return f.err
}
func (f *fakeRecord) Where() string { return "hc1/etcd-agent-pins-x" }

// A pod member on a new node or claim: its state dir is empty, its
// cluster's record is not. The agent adopts the member's pin from it, and
// tells the gate whether the cluster has served (its only way to tell a
// first start from a member re-created later).
func TestAPodMembersPinAndItsGatesWordComeFromTheClustersRecord(t *testing.T) {
	at := time.Unix(1_700_000_000, 0).UTC()
	mine := pin.Pin{Member: "etcd-1", ClusterID: 0xc1, MemberID: 0x11, FirstSeenAt: at, SeenAt: at}
	other := pin.Pin{Member: "etcd-0", ClusterID: 0xc1, MemberID: 0x10, FirstSeenAt: at, SeenAt: at}
	for _, tc := range []struct {
		name     string
		rec      *fakeRecord
		wantPin  bool
		wantWord bool // an admission is given
		wantSeen bool
	}{
		{"the record pins this member: adopted", &fakeRecord{pins: map[string]pin.Pin{"etcd-1": mine, "etcd-0": other}}, true, true, true},
		{"the record pins others only: the cluster has served", &fakeRecord{pins: map[string]pin.Pin{"etcd-0": other}}, false, true, true},
		{"no record: the cluster never served", &fakeRecord{pins: map[string]pin.Pin{}}, false, true, false},
		{"the record cannot be read: no word (the gate holds)", &fakeRecord{err: errors.New("api down")}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := newPinner(context.Background(), dir, "etcd-1", tc.rec, true, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := pin.Load(dir, "etcd-1")
			if err != nil || ok != tc.wantPin || p.Current().Seen() != tc.wantPin || (ok && !reflect.DeepEqual(got, mine)) {
				t.Fatalf("state dir pin %+v ok=%v err=%v, pinner %+v; want adopted=%v", got, ok, err, p.Current(), tc.wantPin)
			}
			a, err := pin.LoadAdmission(dir)
			if err != nil || a.Given() != tc.wantWord || a.ClusterSeen != tc.wantSeen {
				t.Fatalf("admission %+v %v; want given=%v seen=%v", a, err, tc.wantWord, tc.wantSeen)
			}
			if tc.wantSeen && a.ClusterID != 0xc1 {
				t.Fatalf("admission names cluster %x", uint64(a.ClusterID))
			}
		})
	}
}

// The word that the cluster never served goes stale (plan.
// AdmissionFreshFor): the agent renews it while the member has no pin,
// and the record's later pins turn it into "served".
func TestThePinnerRenewsTheGatesWordWhileTheMemberHasNoPin(t *testing.T) {
	dir := t.TempDir()
	rec := &fakeRecord{pins: map[string]pin.Pin{}}
	p, err := newPinner(context.Background(), dir, "etcd-1", rec, true, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	rec.pins = map[string]pin.Pin{"etcd-0": {Member: "etcd-0", ClusterID: 0xc1, MemberID: 0x10, FirstSeenAt: at, SeenAt: at}}
	p.admittedAt = time.Now().Add(-admissionRenewEvery) // due
	p.observe(context.Background(), observation.Observation{At: at, MemberListError: "not asked"})
	a, err := pin.LoadAdmission(dir)
	if err != nil || !a.ClusterSeen || a.ClusterID != record.MemberID(0xc1) {
		t.Fatalf("renewed admission %+v %v, want the cluster seen", a, err)
	}
}

// From review 9: a record deleted (by hand, or with its StatefulSet) while
// its members serve was never written again, and a member re-created later
// would have read "never served". A pinned member checks its record and
// writes its pin back, unless the record has a later one (the member moved
// on, on another node).
func TestAPinnedMemberWritesItsPinBackIntoARecordThatLostIt(t *testing.T) {
	at := time.Now().UTC()
	mine := pin.Pin{Member: "etcd-1", ClusterID: 0xc1, MemberID: 0x11, FirstSeenAt: at, SeenAt: at}
	dir := t.TempDir()
	if err := pin.Save(dir, mine); err != nil {
		t.Fatal(err)
	}
	rec := &fakeRecord{pins: map[string]pin.Pin{"etcd-1": mine}}
	p, err := newPinner(context.Background(), dir, "etcd-1", rec, true, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	idle := observation.Observation{At: at, MemberListError: "not asked"}
	p.observe(context.Background(), idle) // the state dir's pin, written once
	rec.wrote = nil
	rec.pins = map[string]pin.Pin{} // the record lost it
	p.recordRead = time.Now().Add(-recordCheckEvery)
	p.observe(context.Background(), idle)
	if len(rec.wrote) != 1 || rec.wrote[0].MemberID != 0x11 {
		t.Fatalf("pin not written back: %+v", rec.wrote)
	}
	later := mine
	later.MemberID, later.SeenAt = 0x21, at.Add(time.Minute)
	rec.wrote, rec.pins = nil, map[string]pin.Pin{"etcd-1": later}
	p.recordRead = time.Now().Add(-recordCheckEvery)
	p.observe(context.Background(), idle)
	if len(rec.wrote) != 0 {
		t.Fatalf("a later pin (the member moved on) was overwritten: %+v", rec.wrote)
	}
}

// The high-water mark (UC2) moves with every write to the cluster: the
// state dir's copy follows it at every full probe (the gate reads it), the
// record's (an API write) at most every highWaterRecordEvery, and neither
// logs a "member pinned".
func TestTheHighWaterMarkGoesToTheStateDirAtOnceAndToTheRecordSpacedOut(t *testing.T) {
	dir := t.TempDir()
	rec := &fakeRecord{pins: map[string]pin.Pin{}}
	p, err := newPinner(context.Background(), dir, "m", rec, false, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	sight := func(index uint64, d time.Duration) observation.Observation {
		return observation.Observation{At: at.Add(d), ClusterID: 0xc1,
			Members: []observation.Member{{ID: 7, Serving: true, RaftTerm: 2, RaftIndex: index}},
			Local: observation.Local{Match: observation.MatchOK, ID: 7, Serving: true, AnsweringID: 7, AnsweringClusterID: 0xc1,
				DataDirClass: "in-use", PeerURLs: []string{"http://p"}}}
	}
	ctx := context.Background()
	p.observe(ctx, sight(100, 0))
	if len(rec.wrote) != 1 || rec.wrote[0].HighWater.Index != 0 {
		t.Fatalf("first pin: record writes %+v", rec.wrote)
	}
	for i := uint64(1); i <= 5; i++ {
		p.observe(ctx, sight(100+i*10, time.Duration(i)*time.Second))
		got, _, err := pin.Load(dir, "m")
		if err != nil || got.HighWater.Index != 100+(i-1)*10 {
			t.Fatalf("sight %d: state dir mark %+v (%v), want index %d", i, got.HighWater, err, 100+(i-1)*10)
		}
	}
	if len(rec.wrote) != 1 {
		t.Fatalf("record writes %d (%+v): want the first pin only (marks spaced out)", len(rec.wrote), rec.wrote)
	}
	p.markRecorded = time.Now().Add(-highWaterRecordEvery)
	p.observe(ctx, sight(200, 10*time.Second))
	if len(rec.wrote) != 2 || rec.wrote[1].HighWater.Index != 150 {
		t.Fatalf("after %s: record writes %+v", highWaterRecordEvery, rec.wrote)
	}
	// An API that fails is not asked again at every probe.
	rec.err = errors.New("api down")
	p.markRecorded = time.Time{}
	for i := range 5 {
		p.observe(ctx, sight(300+uint64(i), time.Duration(20+i)*time.Second))
	}
	if len(rec.wrote) != 3 {
		t.Fatalf("with the API down: %d writes, want 1 more (retries spaced by %s)", len(rec.wrote), nodeRetryEvery)
	}
}

// The mark never goes down (issue 15 review): a state dir rolled back with
// the node's disk takes the record's higher mark of the same member; a new
// claim's empty state dir (a PVC restored from a volume snapshot) takes the
// record's pin with the mark its set-aside state dir held (fresher than the
// record's, which is written at most every highWaterRecordEvery).
func TestTheHighWaterMarkIsRaisedFromTheRecordAndCarriedToANewClaim(t *testing.T) {
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0).UTC()
	mark := func(i uint64) record.Progress { return record.Progress{Term: 2, Index: i, At: at} }
	mine := pin.Pin{Member: "etcd-1", ClusterID: 0xc1, MemberID: 0x11, FirstSeenAt: at, SeenAt: at}

	for _, tc := range []struct {
		name       string
		local, rec pin.Pin
		want       uint64
	}{
		{"the record is ahead: raised", withMark(mine, 100), withMark(mine, 500), 500},
		{"the record is behind: kept", withMark(mine, 500), withMark(mine, 100), 500},
		{"the record pins another member ID: kept", withMark(mine, 100), withMark(pin.Pin{Member: "etcd-1", ClusterID: 0xc1, MemberID: 0x12, FirstSeenAt: at, SeenAt: at}, 900), 100},
	} {
		dir := t.TempDir()
		if err := pin.Save(dir, tc.local); err != nil {
			t.Fatal(err)
		}
		p, err := newPinner(ctx, dir, "etcd-1", &fakeRecord{pins: map[string]pin.Pin{"etcd-1": tc.rec}}, true, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := pin.Load(dir, "etcd-1")
		if p.Current().HighWater.Index != tc.want || got.HighWater.Index != tc.want {
			t.Errorf("%s: pinner %d, state dir %d; want %d", tc.name, p.Current().HighWater.Index, got.HighWater.Index, tc.want)
		}
	}

	root := t.TempDir()
	dir := filepath.Join(root, "hc1_etcd-1")
	onClaim := mine
	onClaim.ClaimName, onClaim.ClaimUID = "data-etcd-1", "old-claim-uid"
	if err := pin.Save(dir+".old-claim-uid.20261202T210000Z", withMark(onClaim, 300)); err != nil {
		t.Fatal(err)
	}
	// Never taken: another claim's dir, and a dir of that claim pinning an
	// earlier incarnation (same IDs, first seen at another time).
	if err := pin.Save(dir+".another-claim.20261202T200000Z", withMark(onClaim, 900)); err != nil {
		t.Fatal(err)
	}
	earlier := withMark(onClaim, 800)
	earlier.FirstSeenAt = at.Add(-time.Hour)
	if err := pin.Save(dir+".old-claim-uid.20261201T000000Z", earlier); err != nil {
		t.Fatal(err)
	}
	p, err := newPinner(ctx, dir, "etcd-1", &fakeRecord{pins: map[string]pin.Pin{"etcd-1": withMark(onClaim, 200)}}, true, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Current().HighWater; got != mark(300) {
		t.Fatalf("adopted mark %+v, want the set-aside dir's %+v", got, mark(300))
	}
}

// A writer that could not read the record first (the API away at start)
// never lowers the record's mark: the record keeps the higher one.
func TestTheRecordsHighWaterMarkNeverGoesDown(t *testing.T) {
	at := time.Unix(1_700_000_000, 0).UTC()
	p := pin.Pin{Member: "m", ClusterID: 0xc1, MemberID: 0x11, FirstSeenAt: at, SeenAt: at}
	v, err := pin.EncodeWith(map[string]pin.Pin{"m": withMark(p, 500)}, withMark(p, 100))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := pin.DecodeMap(v)
	if got["m"].HighWater.Index != 500 {
		t.Fatalf("record mark %d after a lower write, want 500", got["m"].HighWater.Index)
	}
	other := p
	other.MemberID = 0x12 // a rejoined member: its own progress
	v, _ = pin.EncodeWith(map[string]pin.Pin{"m": withMark(p, 500)}, withMark(other, 10))
	if got, _ := pin.DecodeMap(v); got["m"].HighWater.Index != 10 {
		t.Fatalf("a new member ID kept the old one's mark: %+v", got["m"])
	}
}

func withMark(p pin.Pin, index uint64) pin.Pin {
	p.HighWater = record.Progress{Term: 2, Index: index, At: p.SeenAt}
	return p
}
