package plan

import (
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/record"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// versions sets the members' etcd versions (member i+1 runs vs[i]; the
// local member is member 1), the cluster version and the learner's.
func versions(clusterV, learnerV string, vs ...string) opt {
	return func(s *spec) {
		s.in.Obs.ClusterVersion, s.in.LearnerVersion = clusterV, learnerV
		s.post = append(s.post, func(o *observation.Observation) {
			for i := range o.Members {
				if i < len(vs) {
					o.Members[i].Version = vs[i]
				}
			}
		})
	}
}

// Rule: the learner runs the etcd its manifest names; etcd must be able to
// take it (docs/recovery.md, "etcd versions"). Each refusal comes before
// any change: the member is not stopped, not removed.
func TestVersionRuleRefusesALearnerTheClusterCannotTake(t *testing.T) {
	for _, c := range []struct {
		name             string
		cluster, learner string
		members          []string // member 1 is the local, lost member
		want             Reason   // "" allowed
	}{
		{"uniform 3.5, learner 3.5", "3.5.0", "3.5.36", []string{"", "3.5.36", "3.5.36"}, ""},
		{"uniform 3.6, learner unknown (as before the rule)", "3.6.0", "", []string{"", "3.6.16", "3.6.16"}, ""},
		{"nothing known", "", "", []string{"", "", ""}, ""},
		{"3.6 learner into a 3.5 cluster (upgrade)", "3.5.0", "3.6.16", []string{"", "3.5.36", "3.5.36"}, ""},
		{"mixed: 3.5 learner, one 3.6 and one 3.5 stay", "3.5.0", "3.5.36", []string{"", "3.6.16", "3.5.36"}, ""},
		// The rolling upgrade's hazard: both that stay run 3.6; once the
		// 3.5 member is removed the cluster version becomes 3.6.
		{"3.5 learner, both that stay run 3.6", "3.5.0", "3.5.36", []string{"", "3.6.16", "3.6.16"}, ReasonLearnerVersionBelowCluster},
		{"3.5 learner, cluster version 3.6", "3.6.0", "3.5.36", []string{"", "3.6.16", "3.6.16"}, ReasonLearnerVersionBelowCluster},
		{"3.5 learner, cluster 3.6, the others' versions unknown", "3.6.0", "3.5.36", []string{"", "", ""}, ReasonLearnerVersionBelowCluster},
		{"3.7 learner into a 3.5 cluster", "3.5.0", "3.7.3", []string{"", "3.5.36", "3.5.36"}, ReasonVersionSkew},
		// The lost member holds the cluster version at 3.5; once removed it
		// rises to 3.6, and a 3.7 learner joins a 3.6 cluster.
		{"3.7 learner, others 3.6 but cluster still 3.5", "3.5.0", "3.7.3", []string{"", "3.6.16", "3.6.16"}, ""},
		{"3.7 learner into 3.6", "3.6.0", "3.7.3", []string{"", "3.6.16", "3.6.16"}, ""},
		{"unknown learner, the others mix minors", "3.5.0", "", []string{"", "3.6.16", "3.5.36"}, ReasonLearnerVersionUnknown},
		{"unknown learner, the others newer than the cluster version", "3.5.0", "", []string{"", "3.6.16", "3.6.16"}, ReasonLearnerVersionUnknown},
		{"unknown learner, cluster version unknown, others uniform", "", "", []string{"", "3.6.16", "3.6.16"}, ""},
		// etcd's initial 3.0.0, never raised (CI, the real node's lab):
		// no upgrade etcd supports, so no sign of one.
		{"unknown learner, cluster version 3.0 never raised, others uniform", "3.0.0", "", []string{"", "3.6.16", "3.6.16"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, cfg := cluster(3, 2, versions(c.cluster, c.learner, c.members...))
			d := Decide(in, cfg)
			if c.want == "" {
				if d.Action != Begin {
					t.Fatalf("got %v, want begin", d)
				}
				return
			}
			if d.Action != Refuse || d.Reason != c.want {
				t.Fatalf("got %v, want a refusal %s", d, c.want)
			}
			t.Log(d.Detail)
		})
	}
}

// The rule holds on the re-check after the Lease, before the stop: a
// cluster version raised meanwhile ends the attempt with nothing changed.
func TestVersionRuleIsCheckedAgainBeforeTheStop(t *testing.T) {
	in, cfg := cluster(3, 2, versions("3.6.0", "3.5.36", "", "3.6.16", "3.6.16"), held(record.PhaseStarted))
	d := Decide(in, cfg)
	if d.Action != Finish || d.Reason != ReasonLearnerVersionBelowCluster {
		t.Fatalf("got %v, want finish (learner-version-below-cluster)", d)
	}
}

// While a downgrade is enabled (etcd 3.6's Status), only the target minor
// may join and the cluster version moves with the downgrade: no learner
// of any version is added (the reviewer's case: B already 3.5, C 3.6).
func TestVersionRuleRefusesDuringADowngrade(t *testing.T) {
	for _, learnerV := range []string{"3.5.36", "3.6.16", ""} {
		in, cfg := cluster(3, 2, versions("3.5.0", learnerV, "", "3.5.36", "3.6.16"), func(s *spec) {
			s.post = append(s.post, func(o *observation.Observation) { o.Members[2].DowngradeEnabled = true })
		})
		if d := Decide(in, cfg); d.Action != Refuse || d.Reason != ReasonDowngradeInProgress {
			t.Fatalf("learner %q: got %v, want a refusal downgrade-in-progress", learnerV, d)
		}
	}
}

// A move-out retires the source and adds no learner: the source's own
// image has no say. A move-in adds before the source is removed: the
// learner then holds the cluster version itself, so only the cluster
// version is its floor (a 3.5 learner replacing a 3.5 source beside two
// 3.6 members keeps the cluster at 3.5, as etcd allows).
func TestVersionRuleForMoves(t *testing.T) {
	in, _ := cluster(3, 2, versions("3.5.0", "3.5.36", "", "3.6.16", "3.6.16"))
	in.Request = &Request{Action: ActionMoveOut, Target: "node9"}
	if d, ok := checkVersions(in); !ok {
		t.Fatalf("move-out refused: %v", d)
	}
	in.Request = &Request{Action: ActionMoveIn, Replaces: id(1)}
	if d, ok := checkVersions(in); !ok {
		t.Fatalf("move-in of a 3.5 learner into a 3.5-version cluster refused: %v", d)
	}
	in.Obs.ClusterVersion = "3.6.0"
	if d, ok := checkVersions(in); ok || d.Reason != ReasonLearnerVersionBelowCluster {
		t.Fatalf("move-in of a 3.5 learner into a 3.6-version cluster: %v, want learner-version-below-cluster", d)
	}
	in.Request, in.Journal.Request = nil, ActionMoveOut // a move-out resumed from its journal
	if d, ok := checkVersions(in); !ok {
		t.Fatalf("resumed move-out refused: %v", d)
	}
}
