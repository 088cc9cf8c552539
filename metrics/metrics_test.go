package metrics

import (
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series gathers name from m's registry, each series by its labels.
func series(t *testing.T, m *Metrics, name string) []*dto.Metric {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// find returns the one series of name with exactly the labels want.
func find(t *testing.T, m *Metrics, name string, want map[string]string) *dto.Metric {
	t.Helper()
	var got []map[string]string
	for _, s := range series(t, m, name) {
		l := labels(s)
		got = append(got, l)
		if len(l) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if l[k] != v {
				match = false
			}
		}
		if match {
			return s
		}
	}
	t.Fatalf("%s: no series %v among %v", name, want, got)
	return nil
}

func TestMetricsClusterLabel(t *testing.T) {
	m := New()
	a, b := m.ForCluster("clusters-a/etcd"), m.ForCluster("clusters-b/etcd")
	if a.Registry != m.Registry || b.Registry != m.Registry {
		t.Fatal("ForCluster: not the same Registry")
	}
	a.MemberState.WithLabelValues("etcd-0", "healthy").Set(1)
	b.MemberState.WithLabelValues("etcd-0", "healthy").Set(0)
	b.MemberState.WithLabelValues("etcd-0", "down").Set(1)
	a.RecoveriesTotal.WithLabelValues("etcd-0", "succeeded").Add(2)
	b.RecoveriesTotal.WithLabelValues("etcd-0", "succeeded").Add(5)
	a.RecoveryDuration.WithLabelValues("etcd-0").Observe(3)
	b.RecoveryDuration.WithLabelValues("etcd-0").Observe(7)
	b.RecoveryDuration.WithLabelValues("etcd-0").Observe(9)
	m.MemberState.WithLabelValues("etcd-0", "lost").Set(1)

	lbl := func(cluster string, kv ...string) map[string]string {
		l := map[string]string{"cluster": cluster, "member": "etcd-0"}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	const state = "etcd_agent_member_state"
	if n := len(series(t, m, state)); n != 4 {
		t.Errorf("%s: %d series, want 4 (a healthy, b healthy, b down, default lost)", state, n)
	}
	for _, c := range []struct {
		cluster, state string
		want           float64
	}{{"clusters-a/etcd", "healthy", 1}, {"clusters-b/etcd", "healthy", 0}, {"clusters-b/etcd", "down", 1}, {"", "lost", 1}} {
		if v := find(t, m, state, lbl(c.cluster, "state", c.state)).GetGauge().GetValue(); v != c.want {
			t.Errorf("%s{cluster=%q,state=%q} = %v, want %v", state, c.cluster, c.state, v, c.want)
		}
	}

	const rec = "etcd_agent_recoveries_total"
	if n := len(series(t, m, rec)); n != 2 {
		t.Errorf("%s: %d series, want 2", rec, n)
	}
	for cluster, want := range map[string]float64{"clusters-a/etcd": 2, "clusters-b/etcd": 5} {
		if v := find(t, m, rec, lbl(cluster, "result", "succeeded")).GetCounter().GetValue(); v != want {
			t.Errorf("%s{cluster=%q} = %v, want %v", rec, cluster, v, want)
		}
	}

	const dur = "etcd_agent_recovery_duration_seconds"
	if n := len(series(t, m, dur)); n != 2 {
		t.Errorf("%s: %d series, want 2", dur, n)
	}
	for cluster, want := range map[string]struct {
		n   uint64
		sum float64
	}{"clusters-a/etcd": {1, 3}, "clusters-b/etcd": {2, 16}} {
		h := find(t, m, dur, lbl(cluster)).GetHistogram()
		if h.GetSampleCount() != want.n || h.GetSampleSum() != want.sum {
			t.Errorf("%s{cluster=%q}: count %d sum %v, want %d %v", dur, cluster, h.GetSampleCount(), h.GetSampleSum(), want.n, want.sum)
		}
	}

	// ForCluster of a cluster's Metrics is that cluster, not a nested curry.
	a.ForCluster("clusters-b/etcd").RecoveriesTotal.WithLabelValues("etcd-0", "succeeded").Inc()
	if v := find(t, m, rec, lbl("clusters-b/etcd", "result", "succeeded")).GetCounter().GetValue(); v != 6 {
		t.Errorf("%s{cluster=clusters-b/etcd} after ForCluster of a's = %v, want 6", rec, v)
	}
}

// TestMetricsDefaultCluster: New's metrics (the static-pod member source)
// write cluster="", and Init works on any cluster's Metrics.
func TestMetricsDefaultCluster(t *testing.T) {
	m := New()
	m.Init("node-1", []string{"no-quorum"}, nil)
	m.ForCluster("ns/etcd").Init("etcd-0", []string{"no-quorum"}, nil)
	find(t, m, "etcd_agent_recoveries_total", map[string]string{"cluster": "", "member": "node-1", "result": "failed"})
	find(t, m, "etcd_agent_recoveries_total", map[string]string{"cluster": "ns/etcd", "member": "etcd-0", "result": "failed"})
	find(t, m, "etcd_agent_recovery_refused_since_timestamp_seconds", map[string]string{"cluster": "", "member": "node-1", "reason": "no-quorum"})
	m.ObservationDuration.WithLabelValues("node-1").Observe(0.01)
	find(t, m, "etcd_agent_observation_duration_seconds", map[string]string{"cluster": "", "member": "node-1"})
	if n := len(series(t, m, "etcd_agent_lease_held")); n != 2 {
		t.Errorf("etcd_agent_lease_held: %d series, want 2", n)
	}
}

// TestMetricsStepDeletePartialMatch: deleting a member's step series by
// partial match leaves the same-named member of another cluster alone
// (prometheus' own, on a curried vector, ignores the cluster).
func TestMetricsStepDeletePartialMatch(t *testing.T) {
	m := New()
	a, b := m.ForCluster("clusters-a/etcd"), m.ForCluster("clusters-b/etcd")
	a.StepStarted.WithLabelValues("etcd-0", "stop-member").Set(1)
	b.StepStarted.WithLabelValues("etcd-0", "stop-member").Set(2)
	a.StepExpected.WithLabelValues("etcd-0", "stop-member").Set(3)
	b.StepExpected.WithLabelValues("etcd-0", "stop-member").Set(4)
	if n := a.StepStarted.DeletePartialMatch(prometheus.Labels{"member": "etcd-0"}); n != 1 {
		t.Errorf("StepStarted.DeletePartialMatch: deleted %d, want 1", n)
	}
	a.StepExpected.DeletePartialMatch(prometheus.Labels{"member": "etcd-0"})
	for _, name := range []string{"etcd_agent_recovery_step_started_timestamp_seconds", "etcd_agent_recovery_step_expected_seconds"} {
		s := series(t, m, name)
		if len(s) != 1 || labels(s[0])["cluster"] != "clusters-b/etcd" {
			t.Errorf("%s after deleting clusters-a's etcd-0: %d series, want only clusters-b's", name, len(s))
		}
	}
}

// TestInitCreatesEveryPhasesDuration: the per-phase duration histogram
// exists (count 0) before the first heal, so that the dashboard's
// increase(...[$__range]) over it sees the first heal's phases (a series
// born at count 1 has no increase: "Recovery phase durations" said "no
// data" for an agent's first heal).
func TestInitCreatesEveryPhasesDuration(t *testing.T) {
	m := New()
	m.Init("node-1", nil, []string{"stopped", "promoted"})
	for _, phase := range []string{"stopped", "promoted"} {
		s := find(t, m, "etcd_agent_recovery_phase_duration_seconds", map[string]string{"cluster": "", "member": "node-1", "phase": phase})
		if s != nil && s.GetHistogram().GetSampleCount() != 0 {
			t.Errorf("phase %s: count %d before any heal, want 0", phase, s.GetHistogram().GetSampleCount())
		}
	}
	find(t, m, "etcd_agent_recovery_duration_seconds", map[string]string{"cluster": "", "member": "node-1"})
}

// TestForgetDeletesOnlyThatMembersSeries: a member that left this node (a
// pod moved, the static member retired) takes its series with it; a stale
// quorum margin of 0 or a "lost" state would keep alerts firing. The same
// member name in another cluster, and the other members, keep theirs.
func TestForgetDeletesOnlyThatMembersSeries(t *testing.T) {
	m := New()
	a, b := m.ForCluster("clusters-a/etcd"), m.ForCluster("clusters-b/etcd")
	for _, x := range []*Metrics{a, b} {
		x.Init("etcd-0", []string{"majority-lost"}, []string{"stopped"})
		x.Init("etcd-1", []string{"majority-lost"}, []string{"stopped"})
		x.QuorumMargin.WithLabelValues("etcd-0").Set(0)
		x.QuorumMargin.WithLabelValues("etcd-1").Set(1)
		x.MemberState.WithLabelValues("etcd-0", "lost").Set(1)
		x.StepProgress.WithLabelValues("etcd-0", "pre-change stream").Set(0.5)
	}
	m.KubeAPIDenied.WithLabelValues("pods", "get").Inc()
	if n := a.Forget("etcd-0"); n == 0 {
		t.Fatal("Forget deleted nothing")
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			l := labels(s)
			if l["cluster"] == "clusters-a/etcd" && l["member"] == "etcd-0" {
				t.Errorf("%s%v left after Forget", mf.GetName(), l)
			}
		}
	}
	find(t, m, "etcd_agent_cluster_quorum_margin", map[string]string{"cluster": "clusters-b/etcd", "member": "etcd-0"})
	find(t, m, "etcd_agent_cluster_quorum_margin", map[string]string{"cluster": "clusters-a/etcd", "member": "etcd-1"})
	find(t, m, "etcd_agent_kube_api_denied_total", map[string]string{"cluster": "", "resource": "pods", "verb": "get"})
}

// TestAllNamesEveryVector: vectors.all (what New registers and Forget
// deletes from) holds every vector field.
func TestAllNamesEveryVector(t *testing.T) {
	typ := reflect.TypeFor[vectors]()
	fields := 0
	for i := range typ.NumField() {
		switch typ.Field(i).Type {
		case reflect.TypeFor[*prometheus.GaugeVec](), reflect.TypeFor[*prometheus.CounterVec](), reflect.TypeFor[*prometheus.HistogramVec]():
			fields++
		}
	}
	if n := len(New().base.all()); n != fields || fields < 30 {
		t.Fatalf("vectors.all() has %d vectors, the struct %d", n, fields)
	}
}
