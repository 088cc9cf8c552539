package forcearm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// fakeLease stands for the API's Lease (its own tests run on a real
// kube-apiserver): held by someone else, or by a holder name.
type fakeLease struct {
	holder             string // "" free
	me                 string
	acquired, released int
	abandoned          bool
	lost               bool  // the renewer found it taken
	confirmErr         error // Confirm and ConfirmFor
	acquireErr         error
	confirmedFor       time.Duration
}

func (f *fakeLease) TryAcquire(context.Context, lease.Info) error {
	if f.acquireErr != nil {
		return f.acquireErr
	}
	if f.holder != "" && f.holder != f.me {
		return fmt.Errorf("%w: held by %s", lease.ErrHeldByOther, f.holder)
	}
	f.acquired++
	f.holder = f.me
	return nil
}
func (f *fakeLease) ConfirmFor(_ context.Context, d time.Duration) error {
	f.confirmedFor = d
	return f.confirmErr
}
func (f *fakeLease) Confirm(context.Context) error { return f.confirmErr }
func (f *fakeLease) Current(context.Context) (string, lease.Info, bool, error) {
	return f.holder, lease.Info{}, false, nil
}
func (f *fakeLease) Release(context.Context) error {
	f.released++
	if f.holder == f.me {
		f.holder = ""
	}
	return nil
}
func (f *fakeLease) Abandon()      { f.abandoned = true }
func (f *fakeLease) Holding() bool { return f.holder == f.me && !f.lost }

func result(majorityLost bool) memberstate.Result {
	return memberstate.Result{
		Observation: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 7, Name: "etcd-0"}, {ID: 8, Name: "etcd-1"}, {ID: 9, Name: "etcd-2"}},
			Local: observation.Local{ID: 7}},
		Verdict: memberstate.Verdict{MajorityLost: majorityLost},
	}
}

func writeRequest(t *testing.T, dir string, at time.Time) {
	t.Helper()
	b := `{"memberID":"7","requestedAt":"` + at.UTC().Format(time.RFC3339) + `"}`
	if err := os.WriteFile(filepath.Join(dir, memberruntime.ForceFile), []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

func notArmed(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, memberruntime.NotArmedFile))
	return string(b)
}

// TestTheArmMarksARequestOnlyUnderTheClustersLease: the mark is written
// only after the Lease was taken and confirmed to last past the mark's
// time; a Lease another holds leaves the request unarmed, and says so
// beside it; a request withdrawn lets go of the Lease at once; a used one
// keeps it until the forced member serves with a quorum.
func TestTheArmMarksARequestOnlyUnderTheClustersLease(t *testing.T) {
	now := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	clock := now
	setup := func(t *testing.T) (string, *fakeLease, *Arm) {
		dir := t.TempDir()
		clock = now
		f := &fakeLease{me: "n1/etcd-0/force-new-cluster"}
		a := New(Config{StateDir: dir, Member: "etcd-0", Holder: f.me, ValidFor: 15 * time.Second, Now: func() time.Time { return clock },
			NewLease: func(cid uint64) (Lease, error) {
				if cid != 0xc1 {
					t.Fatalf("the Lease of cluster %x", cid)
				}
				return f, nil
			}})
		return dir, f, a
	}
	ctx := context.Background()

	mark := func(dir string) *plan.ForceArm {
		m, err := memberruntime.ReadForceArm(dir)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	t.Run("free Lease: armed, valid for the time fenced; withdrawn: the mark goes at once, the Lease after its time", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		m := mark(dir)
		if m == nil || m.MemberID != 7 || !m.Until.Equal(now.Add(15*time.Second)) || m.Holder != f.me {
			t.Fatalf("mark %+v", m)
		}
		if f.acquired != 1 || f.confirmedFor != 15*time.Second {
			t.Fatalf("lease acquired %d times, fenced for %s", f.acquired, f.confirmedFor)
		}
		clock = now.Add(2 * time.Second)
		a.Consider(ctx, result(true)) // renewed: no second take
		if m := mark(dir); f.acquired != 1 || m == nil || !m.Until.Equal(clock.Add(15*time.Second)) {
			t.Fatalf("renewal: acquired %d times, mark %+v", f.acquired, m)
		}
		os.Remove(filepath.Join(dir, memberruntime.ForceFile))
		a.Consider(ctx, result(true))
		if m := mark(dir); m != nil || f.released != 0 {
			t.Fatalf("withdrawn: mark %+v, released %d (a gate may have read the mark: the Lease stays until its time)", m, f.released)
		}
		clock = clock.Add(15*time.Second + plan.ForceArmReleaseSlack + time.Millisecond)
		a.Consider(ctx, result(true))
		if f.released != 1 || f.holder != "" {
			t.Fatalf("after the mark's time: released %d, holder %q", f.released, f.holder)
		}
	})
	t.Run("the Lease held by another member's arm: no mark, and why", func(t *testing.T) {
		dir, f, a := setup(t)
		f.holder = "n2/etcd-1/force-new-cluster"
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		if m := mark(dir); m != nil {
			t.Fatalf("armed under a Lease another holds: %+v", m)
		}
		if w := notArmed(dir); !strings.Contains(w, "n2/etcd-1") {
			t.Fatalf("not-armed says %q", w)
		}
		if f.released != 0 || f.holder != "n2/etcd-1/force-new-cluster" {
			t.Fatal("released a Lease it never held")
		}
	})
	t.Run("the fence fails after the take: no mark, the Lease let go", func(t *testing.T) {
		dir, f, a := setup(t)
		f.confirmErr = fmt.Errorf("%w: expired", lease.ErrNotHeld)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		if m := mark(dir); m != nil || f.released != 1 {
			t.Fatalf("mark %+v, released %d", m, f.released)
		}
	})
	t.Run("the API gone while armed: the mark stands until its time, not renewed", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		f.confirmErr = fmt.Errorf("%w: connection refused", lease.ErrAPIUnavailable)
		clock = now.Add(5 * time.Second)
		a.Consider(ctx, result(true))
		if m := mark(dir); m == nil || !m.Until.Equal(now.Add(15*time.Second)) {
			t.Fatalf("an API blip: mark %+v, want the first one standing", m)
		}
		clock = now.Add(16 * time.Second)
		a.Consider(ctx, result(true))
		if m := mark(dir); m != nil {
			t.Fatalf("the API gone past the mark's time: mark %+v", m)
		}
	})
	t.Run("the hold lost (the Lease deleted by hand): taken again at the next arm", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		f.holder, f.lost = "", true // deleted; the renewer stopped
		f.confirmErr = fmt.Errorf("%w: the Lease does not exist", lease.ErrNotHeld)
		clock = now.Add(time.Second)
		a.Consider(ctx, result(true)) // the fence fails: set aside
		f.confirmErr, f.lost = nil, false
		clock = now.Add(30 * time.Second)
		a.Consider(ctx, result(true))
		if m := mark(dir); m == nil || f.acquired != 2 || f.holder != f.me {
			t.Fatalf("after the Lease was deleted: mark %+v, acquired %d, holder %q; want it taken again and armed", m, f.acquired, f.holder)
		}
	})
	t.Run("the agent sees a quorum: not armed, and why", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(false))
		if m := mark(dir); m != nil || f.acquired != 0 || !strings.Contains(notArmed(dir), "majority") {
			t.Fatalf("mark %+v, acquired %d, not-armed %q", m, f.acquired, notArmed(dir))
		}
	})
	t.Run("a recovery open: not armed", func(t *testing.T) {
		dir, f, a := setup(t)
		if err := journal.Save(dir, record.Record{Member: "etcd-0", Phase: record.PhaseStopped}); err != nil {
			t.Fatal(err)
		}
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		if m := mark(dir); m != nil || f.acquired != 0 {
			t.Fatalf("armed with a recovery open: %+v", m)
		}
	})
	t.Run("an unreadable mark: removed, never a hold", func(t *testing.T) {
		dir, f, a := setup(t)
		if err := os.WriteFile(filepath.Join(dir, memberruntime.ArmFile), []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Create(filepath.Join(dir, memberruntime.ForceFile+".used-20261207T205900.000000000Z")); err != nil {
			t.Fatal(err)
		}
		a.Consider(ctx, result(true))
		if _, err := os.Stat(filepath.Join(dir, memberruntime.ArmFile)); !os.IsNotExist(err) || f.acquired != 0 {
			t.Fatalf("unreadable mark: %v, acquired %d", err, f.acquired)
		}
	})
	t.Run("used: held until the forced member serves with a quorum", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		if _, err := memberruntime.SetForceRequestAside(dir, "used", "", now); err != nil {
			t.Fatal(err)
		}
		a.Consider(ctx, result(true))
		if m := mark(dir); m == nil || f.released != 0 || f.holder != f.me {
			t.Fatalf("used, no quorum yet: mark %+v, released %d", m, f.released)
		}
		a.Consider(ctx, result(false)) // the mark goes, and the Lease at once (the request was used)
		if m := mark(dir); m != nil || f.released != 1 {
			t.Fatalf("used, quorum back: mark %+v, released %d", m, f.released)
		}
	})
	t.Run("the gate uses the request as the mark is set aside (stale a moment later): held until a quorum", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-plan.ForceNewClusterFreshFor+time.Second))
		a.Consider(ctx, result(true))
		clock = now.Add(2 * time.Second) // the request now stale: set aside
		a.Consider(ctx, result(true))
		if m := mark(dir); m != nil || f.released != 0 {
			t.Fatalf("stale: mark %+v, released %d", m, f.released)
		}
		// The gate had read the mark, and sets the request aside as used.
		if _, err := memberruntime.SetForceRequestAside(dir, "used", "", clock); err != nil {
			t.Fatal(err)
		}
		clock = now.Add(time.Hour)
		a.Consider(ctx, result(true))
		if f.released != 0 || f.holder != f.me {
			t.Fatalf("a use in the window, an hour on, no quorum: released %d, holder %q; want the Lease held", f.released, f.holder)
		}
		a.Consider(ctx, result(false))
		if f.released != 1 || f.holder != "" {
			t.Fatalf("the quorum back: released %d, holder %q", f.released, f.holder)
		}
	})
	t.Run("a mark that cannot be set aside or removed: let go once its time is over", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		// A non-empty dir where the mark would be set aside: the rename fails.
		if err := os.MkdirAll(filepath.Join(dir, memberruntime.ArmAsideFile, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		for range 10 {
			clock = clock.Add(5 * time.Second)
			a.Consider(ctx, result(false)) // the agent sees a quorum: set aside, in vain
		}
		if f.released != 1 || f.holder != "" {
			t.Fatalf("after %s: released %d, holder %q", clock.Sub(now), f.released, f.holder)
		}
	})
	t.Run("the mark removed by hand during the hold after use: held until a quorum, then let go", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		if _, err := memberruntime.SetForceRequestAside(dir, "used", "", now); err != nil {
			t.Fatal(err)
		}
		a.Consider(ctx, result(true))
		os.Remove(filepath.Join(dir, memberruntime.ArmFile))
		clock = now.Add(10 * time.Minute)
		a.Consider(ctx, result(true))
		if f.released != 0 {
			t.Fatal("the hold ended with its mark removed by hand, the majority still lost")
		}
		a.Consider(ctx, result(false))
		if f.released != 1 || f.holder != "" {
			t.Fatalf("the quorum back: released %d, holder %q", f.released, f.holder)
		}
	})
	t.Run("a second request of the member while the first one's mark is in force: not armed until its time is over", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		clock = now.Add(2 * time.Second)
		a.Consider(ctx, result(false)) // a poll without majority-lost: set aside, the Lease kept
		if _, err := memberruntime.SetForceRequestAside(dir, "used", "", clock); err != nil {
			t.Fatal(err)
		}
		writeRequest(t, dir, now.Add(time.Second))
		clock = now.Add(4 * time.Second)
		a.Consider(ctx, result(true))
		if m := mark(dir); m != nil {
			t.Fatalf("the second request armed over the first one's use: %+v", m)
		}
		os.Remove(filepath.Join(dir, memberruntime.ForceFile))
		for range 10 {
			clock = clock.Add(5 * time.Second)
			a.Consider(ctx, result(true)) // the first one's forced member not serving yet
		}
		if f.released != 0 || f.holder != f.me {
			t.Fatalf("the first request used, its member not serving, yet the Lease was let go (released %d, holder %q)", f.released, f.holder)
		}
	})
	t.Run("a restarted agent: resumes its hold, and lets go of a Lease its last run left", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		a.Close()
		if !f.abandoned || f.released != 0 {
			t.Fatalf("the loop's end: abandoned %v, released %d; want the renewer stopped, the Lease not cleared", f.abandoned, f.released)
		}
		b := New(a.c) // the next loop, same holder name, its mark on disk
		os.Remove(filepath.Join(dir, memberruntime.ForceFile))
		b.Consider(ctx, result(true)) // withdrawn: the mark goes
		clock = now.Add(time.Minute)
		b.Consider(ctx, result(true))
		if m := mark(dir); m != nil || f.holder != "" || f.released != 1 {
			t.Fatalf("after a restart: mark %+v, holder %q, released %d; want the Lease its last run held let go", m, f.holder, f.released)
		}
	})
}
