package journal

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestSaveThenLoadRoundTripsIDsAsHex(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := Record{ID: "r1", Member: "node2", OldMemberID: 0xd8a03b6ed23776c0, NewMemberID: 0x1}
	r.Advance(PhaseRemoved, now)
	if err := Save(dir, r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(Path(dir, "node2"))
	if !strings.Contains(string(b), `"oldMemberID": "d8a03b6ed23776c0"`) {
		t.Fatalf("member IDs must be hex strings:\n%s", b)
	}
	got, ok, err := Load(dir, "node2")
	if err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	if got.OldMemberID != r.OldMemberID || got.Phase != PhaseRemoved || !got.PhaseTimes[PhaseRemoved].Equal(now) || !got.Active() {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestLoadWithoutJournalIsNotAnError(t *testing.T) {
	if _, ok, err := Load(t.TempDir(), "node1"); ok || err != nil {
		t.Fatalf("ok=%v err=%v", ok, err)
	}
}

func TestUnreadableJournalIsAnErrorThatSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(Path(dir, "n"), []byte("{not json"), 0o600)
	if _, _, err := Load(dir, "n"); err == nil || !strings.Contains(err.Error(), "move it aside") {
		t.Fatalf("err = %v", err)
	}
}

func TestPhaseOrder(t *testing.T) {
	if !PhaseLearnerAdded.AtLeast(PhaseRemoved) || PhaseRemoved.AtLeast(PhaseLearnerAdded) || !PhaseDone.AtLeast(PhaseVerified) {
		t.Fatal("phase order broken")
	}
	if (Record{Phase: PhaseDone}).Active() || (Record{}).Active() {
		t.Fatal("closed or empty record is not active")
	}
}
