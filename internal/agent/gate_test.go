package agent

import (
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

func TestStartGate(t *testing.T) {
	started := observation.Observation{Members: []observation.Member{{ID: 7, Name: "node2", ClientURLs: []string{"http://x"}}},
		Local: observation.Local{Match: observation.MatchOK, ID: 7}}
	neverStarted := observation.Observation{Members: []observation.Member{{ID: 7, Name: "node2"}},
		Local: observation.Local{Match: observation.MatchOK, ID: 7}}
	notMember := observation.Observation{Local: observation.Local{Match: observation.MatchNotFound}}
	ambiguous := observation.Observation{Local: observation.Local{Match: observation.MatchAmbiguous}}
	prepared := journal.Record{Phase: journal.PhasePrepared, NewMemberID: 9}
	removed := journal.Record{Phase: journal.PhaseRemoved}
	for _, tc := range []struct {
		name      string
		class     localdisk.Class
		j         journal.Record
		obs       observation.Observation
		listed    bool
		bootstrap bool
		pass      bool
	}{
		{"healthy data dir passes at once", localdisk.ClassOK, journal.Record{}, started, true, false, true},
		{"empty data dir under the old member ID holds", localdisk.ClassEmpty, journal.Record{}, started, true, false, false},
		{"missing data dir under the old member ID holds", localdisk.ClassMissing, removed, started, true, false, false},
		{"data dir the agent prepared passes", localdisk.ClassEmpty, prepared, started, true, false, true},
		{"corrupt data dir holds even when not a member", localdisk.ClassCorrupt, journal.Record{}, notMember, true, false, false},
		{"foreign data dir holds", localdisk.ClassForeign, journal.Record{}, notMember, true, false, false},
		{"bootstrap with unreachable cluster passes", localdisk.ClassMissing, journal.Record{}, notMember, false, true, true},
		{"unreachable cluster without bootstrap holds", localdisk.ClassMissing, journal.Record{}, notMember, false, false, false},
		{"member added but never started passes", localdisk.ClassEmpty, journal.Record{}, neverStarted, true, false, true},
		{"not a member passes (etcd itself refuses to join)", localdisk.ClassEmpty, journal.Record{}, notMember, true, false, true},
		{"ambiguous identity holds", localdisk.ClassEmpty, journal.Record{}, ambiguous, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := DecideGate(tc.class, tc.j, tc.obs, tc.listed, tc.bootstrap)
			if v.Pass != tc.pass {
				t.Fatalf("pass=%v (%s), want %v", v.Pass, v.Reason, tc.pass)
			}
			if v.Reason == "" {
				t.Fatal("every gate verdict says why")
			}
		})
	}
}
