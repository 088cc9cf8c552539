package plan

import (
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

func TestTheStopNamesWhereThePreChangeBackupStreamsMeanwhile(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		in, cfg := cluster(n, q(n), held(record.PhaseStarted))
		d := Decide(in, cfg)
		want(t, d, StopMember, ReasonNone)
		src, _, err := PickSource(in.Obs, id(1))
		if err != nil || d.SourceID != src.ID || d.SourceID == id(1) {
			t.Fatalf("SourceID = %x, want PickSource's %x (%v), never the member stopped", d.SourceID, src.ID, err)
		}
	})
	// A move-away streamed its snapshot before the stop; a move-out takes
	// none; and with no serving peer there is nothing to stream from.
	for _, req := range []string{ActionMoveAway, ActionMoveOut} {
		in, _ := cluster(3, 2, held(record.PhaseStarted, func(r *record.Record) { r.Request = req }))
		if d := stopWithBackup(in); d.Action != StopMember || d.SourceID != 0 {
			t.Errorf("%s: %+v, want a stop without a backup source", req, d)
		}
	}
	in, _ := cluster(1, 1, local(localHealthy), held(record.PhaseStarted))
	if d := stopWithBackup(in); d.Action != StopMember || d.SourceID != 0 {
		t.Errorf("no peer: %+v, want a stop without a backup source", d)
	}
	// The member stopped leads: it hands leadership to the follower the
	// backup would stream from; the backup streams after the stop.
	in, _ = cluster(3, 3, local(localHealthy), held(record.PhaseStarted))
	setLeader(&in, id(1))
	if d := stopWithBackup(in); d.Action != StopMember || d.SourceID != 0 {
		t.Errorf("the member stopped leads: %+v, want a stop without a backup source", d)
	}
}

func TestTheBackupStreamedDuringTheStopIsTakenWhileItsSourceServes(t *testing.T) {
	in, cfg := cluster(5, 4, held(record.PhaseStopped))
	picked, _, err := PickSource(in.Obs, id(1))
	if err != nil {
		t.Fatal(err)
	}
	var other uint64 // a serving follower PickSource does not choose now
	for _, m := range in.Obs.Members {
		if m.Serving && !m.IsLeader && m.ID != picked.ID && m.ID != id(1) {
			other = m.ID
		}
	}
	if other == 0 {
		t.Fatal("the cluster has no second serving follower")
	}
	in.BackupStreamingFrom = other
	d := Decide(in, cfg)
	want(t, d, TakeSnapshot, ReasonNone)
	if d.SourceID != other {
		t.Fatalf("SourceID = %x, want the streaming backup's %x (PickSource would say %x)", d.SourceID, other, picked.ID)
	}

	// Not taken: its source no longer serves, became a learner, or is the
	// member replaced; a fresh one streams from PickSource's choice.
	for name, mod := range map[string]func(in *Input){
		"source stopped serving": func(in *Input) { setMember(in, other, func(s *bool, _ *bool) { *s = false }) },
		"source is a learner":    func(in *Input) { setMember(in, other, func(_ *bool, l *bool) { *l = true }) },
		"source is the old one":  func(in *Input) { in.BackupStreamingFrom = id(1) },
		"source leads now":       func(in *Input) { setLeader(in, other) },
	} {
		t.Run(name, func(t *testing.T) {
			in, cfg := cluster(5, 4, held(record.PhaseStopped))
			in.BackupStreamingFrom = other
			mod(&in)
			picked, _, err := PickSource(in.Obs, id(1))
			if err != nil || picked.ID == other {
				t.Fatalf("PickSource: %x, %v; want another member", picked.ID, err)
			}
			d := Decide(in, cfg)
			want(t, d, TakeSnapshot, ReasonNone)
			if d.SourceID != picked.ID {
				t.Fatalf("SourceID = %x, want PickSource's %x", d.SourceID, picked.ID)
			}
		})
	}
}

// setLeader makes member id the leader.
func setLeader(in *Input, id uint64) {
	in.Obs.LeaderID = id
	for i := range in.Obs.Members {
		in.Obs.Members[i].IsLeader = in.Obs.Members[i].ID == id
	}
}

// setMember changes member id's serving and learner flags.
func setMember(in *Input, id uint64, f func(serving, learner *bool)) {
	for i := range in.Obs.Members {
		if in.Obs.Members[i].ID == id {
			f(&in.Obs.Members[i].Serving, &in.Obs.Members[i].IsLearner)
		}
	}
}
