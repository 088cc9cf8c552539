package lab

import "testing"

// Counters read per etcd process never give a negative growth: a member
// restarted (a new PID) counts from 0, one gone counts nothing more.
func TestCounterGrowthHandlesRestartedMembers(t *testing.T) {
	before := map[string]float64{"node1/10": 4, "node2/20": 3, "node3/30": 1}
	after := map[string]float64{"node1/10": 5, "node2/21": 0, "node3/30": 1}
	if got := CounterGrowth(before, after); got != 1 {
		t.Fatalf("growth %v, want 1 (node2's restart took its 3 with it; naively %v)", got, 6.0-8.0)
	}
	after["node2/21"] = 2
	if got := CounterGrowth(before, after); got != 3 {
		t.Fatalf("growth %v, want 3", got)
	}
}
