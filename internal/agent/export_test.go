package agent

import (
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/metrics"
	dto "github.com/prometheus/client_model/go"
)

// Each observation in which an endpoint answered for another cluster counts
// once for that endpoint.
func TestForeignEndpointResponsesCounted(t *testing.T) {
	m := metrics.New()
	obs := observation.Observation{ForeignEndpoints: []string{"http://10.0.0.99:2379"}}
	for range 2 {
		exportMetrics(m, "node2", obs, memberstate.Healthy, time.Millisecond)
	}
	exportMetrics(m, "node2", observation.Observation{}, memberstate.Healthy, time.Millisecond)
	var d dto.Metric
	if err := m.ForeignEndpointResponses.WithLabelValues("node2", "http://10.0.0.99:2379").Write(&d); err != nil {
		t.Fatal(err)
	}
	if v := d.GetCounter().GetValue(); v != 2 {
		t.Fatalf("etcd_agent_foreign_endpoint_responses_total = %v, want 2", v)
	}
}
