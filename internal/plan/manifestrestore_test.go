package plan

import (
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// restoreCase is a member whose manifest vanished 5 minutes ago in a
// three-voter cluster that still lists it, with a 3-minute delay: the
// checkpoint goes back. Each test changes one fact.
func restoreCase() ManifestRestoreInput {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	return ManifestRestoreInput{
		Now: now,
		Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{
			{ID: 1, Name: "node1", Serving: true}, {ID: 2, Name: "node2"}, {ID: 3, Name: "node3", Serving: true}},
			Local: observation.Local{Name: "node2", DataDirClass: observation.DataDirOK, DataDirVerified: true, DataDirClusterID: 0xc1, DataDirMemberID: 2,
				Match: observation.MatchOK, ID: 2}},
		Checkpoint:  &ManifestCheckpoint{Member: "node2", MemberID: 2, ClusterID: 0xc1, Voters: 3, SHA256: "aa", SavedAt: now.Add(-time.Hour)},
		LastLiveSHA: "aa",
		GoneSince:   now.Add(-5 * time.Minute),
		Delay:       3 * time.Minute,
		AutoHeal:    true,
	}
}

func TestAVanishedManifestOfAListedMemberIsRestoredAfterTheDelay(t *testing.T) {
	if d := DecideManifestRestore(restoreCase()); !d.Restore || !d.Missing {
		t.Fatalf("got %+v, want a restore", d)
	}
	lone := restoreCase()
	lone.Obs = observation.Observation{MemberListError: "context deadline exceeded", Members: []observation.Member{{ID: 2, Name: "node2"}},
		Local: lone.Obs.Local}
	lone.Checkpoint.Voters = 1
	if d := DecideManifestRestore(lone); !d.Restore {
		t.Fatalf("a one-member cluster with no list (its only member is the one down): got %+v, want a restore", d)
	}
	lone.Obs.Members = nil // the agent restarted while etcd was down
	if d := DecideManifestRestore(lone); !d.Restore {
		t.Fatalf("a one-member cluster, no list ever seen by this agent: got %+v, want a restore", d)
	}
}

func TestAManifestRestoreIsRefusedForEachReason(t *testing.T) {
	for name, c := range map[string]struct {
		change  func(*ManifestRestoreInput)
		reason  Reason
		missing bool
	}{
		"live":          {func(in *ManifestRestoreInput) { in.Live = true }, ReasonNone, false},
		"parked":        {func(in *ManifestRestoreInput) { in.Parked = true }, ReasonNone, false},
		"recovery open": {func(in *ManifestRestoreInput) { in.Journal = record.Record{ID: "r1", Phase: record.PhaseStopped} }, ReasonRecoveryInProgress, false},
		"moved away": {func(in *ManifestRestoreInput) {
			in.Journal = record.Record{ID: "r1", Request: ActionMoveOut, Phase: record.PhaseDone, Result: record.ResultSucceeded, MoveTarget: "node4"}
		}, ReasonMovedAway, false},
		"restore off":                {func(in *ManifestRestoreInput) { in.Delay = 0 }, ReasonNoCheckpoint, true},
		"no checkpoint":              {func(in *ManifestRestoreInput) { in.Checkpoint = nil }, ReasonNoCheckpoint, true},
		"other member":               {func(in *ManifestRestoreInput) { in.Checkpoint.Member = "node9" }, ReasonNoCheckpoint, true},
		"decommissioned":             {func(in *ManifestRestoreInput) { in.Decommissioned = "the Node's annotation" }, ReasonDecommissioned, true},
		"auto-heal off":              {func(in *ManifestRestoreInput) { in.AutoHeal = false }, ReasonAutoHealDisabled, true},
		"etcd answers":               {func(in *ManifestRestoreInput) { in.PortInUse = "127.0.0.2:2379" }, ReasonMemberRunning, true},
		"etcd serves":                {func(in *ManifestRestoreInput) { in.Obs.Local.Serving = true }, ReasonMemberRunning, true},
		"data dir in use":            {func(in *ManifestRestoreInput) { in.Obs.Local.DataDirClass = observation.DataDirInUse }, ReasonDataDirUnusable, true},
		"data dir unverified":        {func(in *ManifestRestoreInput) { in.Obs.Local.DataDirVerified = false }, ReasonDataDirUnusable, true},
		"data dir of another member": {func(in *ManifestRestoreInput) { in.Obs.Local.DataDirMemberID = 9 }, ReasonDataDirUnusable, true},
		"another manifest runs etcd": {func(in *ManifestRestoreInput) { in.OtherEtcd = "etcd-restore.yaml" }, ReasonMemberRunning, true},
		"the checkpoint is not the manifest last live": {func(in *ManifestRestoreInput) { in.LastLiveSHA = "bb" }, ReasonNoCheckpoint, true},
		"restored too often":                           {func(in *ManifestRestoreInput) { in.RecentRestores = MaxRestores }, ReasonRestoreLimit, true},
		"the restore log unusable":                     {func(in *ManifestRestoreInput) { in.RestoreLogErr = "write: no space left on device" }, ReasonRestoreLogUnusable, true},
		"data dir wiped":                               {func(in *ManifestRestoreInput) { in.Obs.Local.DataDirClass = observation.DataDirMissing }, ReasonDataDirUnusable, true},
		"data dir stale":                               {func(in *ManifestRestoreInput) { in.Obs.Local.DataDirClass = observation.DataDirStale }, ReasonDataDirUnusable, true},
		"data dir of another cluster":                  {func(in *ManifestRestoreInput) { in.Obs.Local.DataDirClusterID = 0xc2 }, ReasonForeignCluster, true},
		"endpoints of another cluster":                 {func(in *ManifestRestoreInput) { in.Obs.ClusterID = 0xc2 }, ReasonForeignCluster, true},
		"removed": {func(in *ManifestRestoreInput) {
			in.Obs.Members = in.Obs.Members[:1]
			in.Obs.Local.Match, in.Obs.Local.ID = observation.MatchNotFound, 0
		}, ReasonMemberRemoved, true},
		"no quorum in a cluster of three": {func(in *ManifestRestoreInput) { in.Obs.MemberListError = "no leader" }, ReasonMembershipUnknown, true},
		"a reused probe":                  {func(in *ManifestRestoreInput) { in.Obs.PeersReused = true }, ReasonMembershipUnknown, true},
		"a lone member that another list names otherwise": {func(in *ManifestRestoreInput) {
			in.Obs.MemberListError, in.Checkpoint.Voters = "no leader", 1
		}, ReasonMembershipUnknown, true},
		"within the delay":  {func(in *ManifestRestoreInput) { in.GoneSince = in.Now.Add(-time.Minute) }, ReasonInRestoreDelay, true},
		"just seen missing": {func(in *ManifestRestoreInput) { in.GoneSince = time.Time{} }, ReasonInRestoreDelay, true},
		"dry run":           {func(in *ManifestRestoreInput) { in.DryRun = true }, ReasonDryRun, true},
	} {
		t.Run(name, func(t *testing.T) {
			in := restoreCase()
			c.change(&in)
			d := DecideManifestRestore(in)
			if d.Restore || d.Reason != c.reason || d.Missing != c.missing {
				t.Fatalf("got %+v, want no restore, reason %q, missing %v", d, c.reason, c.missing)
			}
		})
	}
}

// A lost member whose manifest is gone is not healed: no step could stop
// or start it (today's heal failed at its stop, again and again), and a
// removed member's manifest must stay gone. Rules about the cluster come
// first.
func TestALostMemberWithoutItsManifestIsNotHealed(t *testing.T) {
	in := Input{Now: time.Now(), APIAvailable: true, ManifestMissing: true, FreeBytes: 1 << 40,
		Obs: observation.Observation{ClusterID: 1, LeaderID: 1, Members: []observation.Member{
			{ID: 1, Name: "node1", Serving: true}, {ID: 2, Name: "node2"}, {ID: 3, Name: "node3", Serving: true}},
			Local: observation.Local{Name: "node2", DataDirClass: observation.DataDirOK, Match: observation.MatchOK, ID: 2}},
		Verdict: memberstate.Verdict{State: memberstate.Lost, Reason: "not-serving"}}
	cfg := Config{AutoHeal: true}
	if d := Decide(in, cfg); d.Action != Refuse || d.Reason != ReasonManifestMissing {
		t.Fatalf("got %+v, want refused manifest-missing", d)
	}
	in.Request = &Request{Action: "rejoin"}
	if d := Decide(in, cfg); d.Action != Refuse || d.Reason != ReasonManifestMissing {
		t.Fatalf("a rejoin request: got %+v, want refused manifest-missing", d)
	}
	in.Request = nil
	in.Obs.Members[0].Serving = false
	if d := Decide(in, cfg); d.Reason != ReasonMajorityLost {
		t.Fatalf("the majority lost too: got %+v, want majority-lost first", d)
	}
	in.Obs.Members[0].Serving, in.ManifestMissing = true, false
	if d := Decide(in, cfg); d.Action != Begin {
		t.Fatalf("with its manifest: got %+v, want begin", d)
	}
}
