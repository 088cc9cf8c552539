package memberruntime

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// TestTheArmMarkReadsBackAndTheGateSeesIt: the agent's mark round-trips,
// ReadAgentWord carries it to the gate, its removal leaves nothing armed,
// and a request the gate used is found by the time in its name.
func TestTheArmMarkReadsBackAndTheGateSeesIt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, StatusFile), []byte(`{"at":"2026-12-07T21:00:00Z","majorityLost":true,"observation":{"members":[],"local":{}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if a, err := ReadForceArm(dir); a != nil || err != nil {
		t.Fatalf("no mark read as %+v, %v", a, err)
	}
	if err := SayNotArmed(dir, "the Lease is held by n2/etcd-1"); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	mark := plan.ForceArm{MemberID: 0x8e9e05c52164694d, RequestedAt: at, Holder: "n1/etcd-0/force-new-cluster", Until: at.Add(10 * time.Second)}
	if err := WriteForceArm(dir, mark); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, NotArmedFile)); !os.IsNotExist(err) {
		t.Fatalf("armed, the not-armed word stays: %v", err)
	}
	got, err := ReadForceArm(dir)
	if err != nil || got == nil || got.MemberID != mark.MemberID || !got.RequestedAt.Equal(at) || !got.Until.Equal(mark.Until) || got.Holder != mark.Holder {
		t.Fatalf("read back %+v, %v; wrote %+v", got, err, mark)
	}
	if w := ReadAgentWord(dir); w.Armed == nil || w.Armed.MemberID != mark.MemberID {
		t.Fatalf("the gate's read of the agent's word has no mark: %+v", w)
	}
	if err := SetForceArmAside(dir); err != nil {
		t.Fatal(err)
	}
	if w := ReadAgentWord(dir); w.Armed != nil {
		t.Fatalf("a mark set aside still arms: %+v", w.Armed)
	}
	if a, err := ReadForceArmAside(dir); err != nil || a == nil || a.MemberID != mark.MemberID {
		t.Fatalf("the mark set aside reads back as %+v, %v", a, err)
	}
	if err := RemoveForceArm(dir); err != nil {
		t.Fatal(err)
	}
	if a, _ := ReadForceArmAside(dir); a != nil || ReadAgentWord(dir).Armed != nil {
		t.Fatalf("a removed mark is still there: %+v", a)
	}
	if err := os.WriteFile(filepath.Join(dir, ArmFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if w := ReadAgentWord(dir); w.Armed != nil {
		t.Fatalf("an unreadable mark arms: %+v", w.Armed)
	}

	if !ForceRequestUsedAt(dir, mark).IsZero() {
		t.Fatal("no request used, yet one is found")
	}
	// Used: found by its content, whatever the clocks said (a request
	// written with a clock ahead is used before its own time).
	future := mark
	future.RequestedAt = at.Add(30 * time.Second)
	for _, req := range []plan.ForceArm{{MemberID: 9, RequestedAt: future.RequestedAt}, future} {
		b := fmt.Sprintf(`{"memberID":"%x","requestedAt":%q}`, req.MemberID, req.RequestedAt.Format(time.RFC3339))
		if err := os.WriteFile(filepath.Join(dir, ForceFile), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := SetForceRequestAside(dir, "used", "", at.Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		at = at.Add(time.Millisecond)
	}
	if got := ForceRequestUsedAt(dir, future); !got.Equal(at.Add(-time.Millisecond).Add(3 * time.Second)) {
		t.Fatalf("used at %s, want %s", got, at.Add(-time.Millisecond).Add(3*time.Second))
	}
	if got := ForceRequestUsedAt(dir, mark); !got.IsZero() {
		t.Fatalf("another request's use counts: %s", got)
	}
}
