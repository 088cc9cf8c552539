package gate

import (
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// armWait is the request the gate holds etcd for until the node's agent
// arms it, and since when (plan.ForceArmWaitFor bounds the wait). The
// request is read again at every look: the same request must keep its
// start of wait, whatever offset its time was written with.
type armWait struct {
	req   plan.ForceNewClusterRequest
	since time.Time
}

// sinceFor is when the gate began to wait for req ("" if it did not).
func (w armWait) sinceFor(req plan.ForceNewClusterRequest) time.Time {
	if w.req.Is(req) {
		return w.since
	}
	return time.Time{}
}
