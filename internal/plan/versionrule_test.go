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
		{"3.7 learner, others 3.6 but cluster still 3.5", "3.5.0", "3.7.3", []string{"", "3.6.16", "3.6.16"}, ReasonVersionSkew},
		{"3.7 learner into 3.6", "3.6.0", "3.7.3", []string{"", "3.6.16", "3.6.16"}, ""},
		{"unknown learner, the others mix minors", "3.5.0", "", []string{"", "3.6.16", "3.5.36"}, ReasonLearnerVersionUnknown},
		{"unknown learner, the others newer than the cluster version", "3.5.0", "", []string{"", "3.6.16", "3.6.16"}, ReasonLearnerVersionUnknown},
		{"unknown learner, cluster version unknown, others uniform", "", "", []string{"", "3.6.16", "3.6.16"}, ""},
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
