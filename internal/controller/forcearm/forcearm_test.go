package forcearm

import (
	"context"
	"errors"
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
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// fakeLease stands for the API's Lease (its own tests run on a real
// kube-apiserver): held by someone else, or ours.
type fakeLease struct {
	other              string // "" free
	acquired, released int
	confirmErr         error
	confirmedFor       time.Duration
	mine               bool
}

func (f *fakeLease) TryAcquire(context.Context, lease.Info) error {
	if f.other != "" {
		return errors.New("recovery lease is held by another agent: " + f.other)
	}
	f.acquired++
	f.mine = true
	return nil
}
func (f *fakeLease) ConfirmFor(_ context.Context, d time.Duration) error {
	f.confirmedFor = d
	return f.confirmErr
}
func (f *fakeLease) Confirm(context.Context) error { return f.confirmErr }
func (f *fakeLease) Release(context.Context) error { f.released++; f.mine = false; return nil }

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
	setup := func(t *testing.T) (string, *fakeLease, *Arm) {
		dir := t.TempDir()
		f := &fakeLease{}
		a := New(Config{StateDir: dir, Member: "etcd-0", Holder: "n1/etcd-0/force-new-cluster", ValidFor: 15 * time.Second, Now: func() time.Time { return now },
			NewLease: func(cid uint64) (Lease, error) {
				if cid != 0xc1 {
					t.Fatalf("the Lease of cluster %x", cid)
				}
				return f, nil
			}})
		return dir, f, a
	}
	ctx := context.Background()

	t.Run("free Lease: armed, valid for the time fenced", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		m, err := memberruntime.ReadForceArm(dir)
		if err != nil || m == nil || m.MemberID != 7 || !m.Until.Equal(now.Add(15*time.Second)) || m.Holder != "n1/etcd-0/force-new-cluster" {
			t.Fatalf("mark %+v, %v", m, err)
		}
		if f.acquired != 1 || f.confirmedFor != 15*time.Second {
			t.Fatalf("lease acquired %d times, fenced for %s", f.acquired, f.confirmedFor)
		}
		// Withdrawn: the mark goes first, then the Lease.
		os.Remove(filepath.Join(dir, memberruntime.ForceFile))
		a.Consider(ctx, result(true))
		if m, _ := memberruntime.ReadForceArm(dir); m != nil || f.released != 1 {
			t.Fatalf("withdrawn: mark %+v, released %d", m, f.released)
		}
	})
	t.Run("the Lease held by another member's arm: no mark, and why", func(t *testing.T) {
		dir, f, a := setup(t)
		f.other = "n2/etcd-1/force-new-cluster"
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		if m, _ := memberruntime.ReadForceArm(dir); m != nil {
			t.Fatalf("armed under a Lease another holds: %+v", m)
		}
		if w := notArmed(dir); !strings.Contains(w, "n2/etcd-1") {
			t.Fatalf("not-armed says %q", w)
		}
		if f.released != 0 {
			t.Fatal("released a Lease it never held")
		}
	})
	t.Run("the fence fails after the take: no mark, the Lease let go", func(t *testing.T) {
		dir, f, a := setup(t)
		f.confirmErr = errors.New("recovery lease is not held by this agent")
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(true))
		if m, _ := memberruntime.ReadForceArm(dir); m != nil || f.released != 1 {
			t.Fatalf("mark %+v, released %d", m, f.released)
		}
	})
	t.Run("the agent sees a quorum: not armed, and why", func(t *testing.T) {
		dir, f, a := setup(t)
		writeRequest(t, dir, now.Add(-time.Minute))
		a.Consider(ctx, result(false))
		if m, _ := memberruntime.ReadForceArm(dir); m != nil || f.acquired != 0 || !strings.Contains(notArmed(dir), "majority") {
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
		if m, _ := memberruntime.ReadForceArm(dir); m != nil || f.acquired != 0 {
			t.Fatalf("armed with a recovery open: %+v", m)
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
		if m, _ := memberruntime.ReadForceArm(dir); m == nil || f.released != 0 || !f.mine {
			t.Fatalf("used, no quorum yet: mark %+v, released %d", m, f.released)
		}
		a.Consider(ctx, result(false))
		if m, _ := memberruntime.ReadForceArm(dir); m != nil || f.released != 1 {
			t.Fatalf("used, quorum back: mark %+v, released %d", m, f.released)
		}
	})
}
