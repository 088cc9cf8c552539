package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Issue 10 item 4: a failed attempt puts the member back (restarts it under
// its own ID, with its own data) only when that is provably what it was:
// stopped by this attempt, never removed, its data dir intact.
func TestPutBackOnlyAMemberStoppedWithItsDataIntactAndNeverRemoved(t *testing.T) {
	stoppedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := func() (record.Record, observation.Observation) {
		j := record.Record{Phase: record.PhaseStarted, OldMemberID: 0xa1, StopAttemptedAt: stoppedAt}
		o := observation.Observation{Members: []observation.Member{{ID: 0xa1, Name: "m1"}, {ID: 0xa2, Serving: true}, {ID: 0xa3, Serving: true}},
			Local: observation.Local{Name: "m1", DataDirClass: "ok", DataDirVerified: true, Match: observation.MatchOK, ID: 0xa1}}
		return j, o
	}
	for _, c := range []struct {
		name    string
		mod     func(*record.Record, *observation.Observation)
		stopped bool
		restart bool
		says    string
	}{
		{"stop failed after parking, data intact", nil, true, true, "intact"},
		{"stopped, failed before the quarantine (e.g. the fence)", func(j *record.Record, _ *observation.Observation) { j.Phase = record.PhaseStarted }, true, true, "intact"},
		{"in-use data dir counts as intact", func(_ *record.Record, o *observation.Observation) { o.Local.DataDirClass = "in-use" }, true, true, "intact"},
		{"never tried to stop", func(j *record.Record, _ *observation.Observation) { j.StopAttemptedAt = time.Time{} }, true, false, "never stopped"},
		{"the runtime has it running", nil, false, false, "running"},
		{"data dir quarantined", func(j *record.Record, _ *observation.Observation) {
			j.Phase, j.QuarantinePath = record.PhaseSnapshotted, "/q/data-x"
		}, true, false, "quarantined"},
		{"data dir missing (why it was lost)", func(_ *record.Record, o *observation.Observation) { o.Local.DataDirClass = "missing" }, true, false, "missing"},
		{"data dir corrupt", func(_ *record.Record, o *observation.Observation) { o.Local.DataDirClass = "corrupt" }, true, false, "corrupt"},
		{"data dir ok by its layout only (deep check unfinished)", func(_ *record.Record, o *observation.Observation) { o.Local.DataDirVerified = false }, true, false, "not verified"},
		{"journal says removed", func(j *record.Record, _ *observation.Observation) { j.Phase = record.PhaseRemoved }, true, false, "removed"},
		{"old ID gone from the member list (a remove that timed out but was applied)", func(_ *record.Record, o *observation.Observation) {
			o.Members = o.Members[1:]
		}, true, false, "not in the member list"},
		{"member list unknown", func(_ *record.Record, o *observation.Observation) { o.MemberListError = "no quorum" }, true, false, "member list"},
		{"old ID unknown", func(j *record.Record, _ *observation.Observation) { j.OldMemberID = 0 }, true, false, "not in the member list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, o := base()
			if c.mod != nil {
				c.mod(&j, &o)
			}
			got := DecidePutBack(j, o, c.stopped)
			if got.Restart != c.restart || !strings.Contains(got.Reason, c.says) {
				t.Fatalf("DecidePutBack = %+v, want restart=%v with a reason saying %q", got, c.restart, c.says)
			}
		})
	}
}

// Review: put-back restarts on a data dir whose class is only the cheap
// layout verdict: the deep check (bbolt, in a child) did not finish within
// the put-back's 10 s budget, which the fresh observation shares with the
// start. A member lost for a corrupt db is then restarted on it.
func TestNoPutBackOnAnUnverifiedDataDir(t *testing.T) {
	in, _ := cluster(3, 2, local(localDown))
	in.Obs.Local.DataDirClass, in.Obs.Local.DataDirVerified = "ok", false
	j := record.Record{ID: "a1", Member: localName, OldMemberID: record.MemberID(id(1)), PeerURLs: []string{localPeer}, StopAttemptedAt: t0}
	j.Advance(record.PhaseStarted, t0)
	if pb := DecidePutBack(j, in.Obs, true); pb.Restart {
		t.Errorf("restarts the member on a data dir whose deep check did not finish: %s", pb.Reason)
	}
}
