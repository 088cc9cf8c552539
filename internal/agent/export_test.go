package agent

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/memberstate/memberstatetest"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/metrics"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// The state gauges are set only when one of them changes, and then follow
// every change: a poll that changes nothing leaves them as they are.
func TestStateGaugesFollowEveryChange(t *testing.T) {
	m := metrics.New()
	r := &reporter{log: zap.NewNop(), metrics: m, member: "node2", statusPath: filepath.Join(t.TempDir(), StatusFile)}
	member := func(id uint64, serving bool) observation.Member {
		return observation.Member{ID: id, Serving: serving}
	}
	healthy := observation.Observation{At: time.Now(), Members: []observation.Member{member(1, true), member(2, true), member(3, true)},
		Local: observation.Local{ID: 1, Match: observation.MatchOK, Serving: true, DataDirClass: "ok"}}
	peerDown := healthy
	peerDown.Members = []observation.Member{member(1, true), member(2, true), member(3, false)}
	wiped := healthy
	wiped.Local.DataDirClass = "missing"
	gauge := func(g interface {
		Write(*dto.Metric) error
	}) float64 {
		var d dto.Metric
		if err := g.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetGauge().GetValue()
	}
	for i, c := range []struct {
		obs     observation.Observation
		state   memberstate.State
		healthy float64
		dataDir string
	}{
		{healthy, memberstate.Healthy, 3, "ok"},
		{healthy, memberstate.Healthy, 3, "ok"},
		{peerDown, memberstate.Healthy, 2, "ok"},
		{wiped, memberstate.Lost, 2, "missing"},
		{healthy, memberstate.Healthy, 3, "ok"},
	} {
		r.export(memberstate.Result{Observation: c.obs, Verdict: memberstate.Verdict{State: c.state}}, false)
		if got := gauge(m.HealthyVotingMembers.WithLabelValues("node2")); got != c.healthy {
			t.Errorf("poll %d: healthy voters %v, want %v", i, got, c.healthy)
		}
		for _, s := range memberstate.AllStates() {
			if got, want := gauge(m.MemberState.WithLabelValues("node2", string(s))), metrics.Bool(s == c.state); got != want {
				t.Errorf("poll %d: state %s = %v, want %v", i, s, got, want)
			}
		}
		if got := gauge(m.DataDirStatus.WithLabelValues("node2", c.dataDir)); got != 1 {
			t.Errorf("poll %d: data dir %s = %v, want 1", i, c.dataDir, got)
		}
	}
}

// Each observation in which an endpoint answered for another cluster counts
// once for that endpoint.
func TestForeignEndpointResponsesCounted(t *testing.T) {
	m := metrics.New()
	obs := observation.Observation{ForeignEndpoints: []string{"http://10.0.0.99:2379"}}
	r := &reporter{log: zap.NewNop(), metrics: m, member: "node2", statusPath: filepath.Join(t.TempDir(), StatusFile)}
	for range 2 {
		r.export(memberstate.Result{Observation: obs, Verdict: memberstate.Verdict{State: memberstate.Healthy}}, false)
	}
	r.export(memberstate.Result{Verdict: memberstate.Verdict{State: memberstate.Healthy}}, false)
	var d dto.Metric
	if err := m.ForeignEndpointResponses.WithLabelValues("node2", "http://10.0.0.99:2379").Write(&d); err != nil {
		t.Fatal(err)
	}
	if v := d.GetCounter().GetValue(); v != 2 {
		t.Fatalf("etcd_agent_foreign_endpoint_responses_total = %v, want 2", v)
	}
}

// Issue 42: the quorum margin was computed twice, differently: `status`
// (NewReport) and the metric (stateGauges) must say the same for every
// observation, a member list that did not answer included (the metric's -1:
// no quorum answered; the report counted the members it still listed).
func TestStatusAndTheMetricSayTheSameQuorumMargin(t *testing.T) {
	for _, c := range []struct {
		name string
		obs  observation.Observation
	}{
		{"three healthy", memberstatetest.Healthy3().Observation},
		{"one down", func() observation.Observation {
			o := memberstatetest.Healthy3().Observation
			o.Members[2].Serving = false
			return o
		}()},
		{"the member list did not answer", func() observation.Observation {
			o := memberstatetest.Healthy3().Observation
			o.MemberListError = "context deadline exceeded"
			return o
		}()},
		{"the majority lost (the last list seen: 3 voters, none serves)", func() observation.Observation {
			o := memberstatetest.Healthy3().Observation
			o.MemberListError = "context deadline exceeded"
			for i := range o.Members {
				o.Members[i].Serving = false
			}
			return o
		}()},
	} {
		rep := NewReport(memberstate.Result{Observation: c.obs})
		if g := newStateGauges(c.obs, memberstate.Healthy); rep.QuorumMargin != g.margin {
			t.Errorf("%s: status says margin %d, the metric %d", c.name, rep.QuorumMargin, g.margin)
		}
		t.Logf("%s: margin %d", c.name, rep.QuorumMargin)
	}
	// A list that did not answer is no quorum, whatever the last one said;
	// none serving of 3 is -2 (TestCorruptAndForeignDataDirsAndMajorityLost).
	o := memberstatetest.Healthy3().Observation
	o.MemberListError = "x"
	if m := memberstate.QuorumMargin(o); m != -1 {
		t.Errorf("3 serving, the list unanswered: margin %d, want -1", m)
	}
	for i := range o.Members {
		o.Members[i].Serving = false
	}
	if m := memberstate.QuorumMargin(o); m != -2 {
		t.Errorf("none serving of 3, the list unanswered: margin %d, want -2", m)
	}
}
