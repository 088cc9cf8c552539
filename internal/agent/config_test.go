package agent

import (
	"strings"
	"testing"
	"time"
)

// From the review: a Lease only just longer than the longest step (11 s
// for 10 s steps) fails every fence after a renewal (its round trip eats
// the margin): the agent refuses such a --lease-ttl at start.
func TestLeaseTTLMustCoverTheLongestStepAndARenewal(t *testing.T) {
	base := Config{PollInterval: time.Second, StateDir: t.TempDir(), MemberRuntime: "exec"}
	for ttl, ok := range map[time.Duration]bool{11 * time.Second: false, 14 * time.Second: false, 15 * time.Second: true, 30 * time.Second: true} {
		c := base
		c.LeaseTTL = ttl
		err := c.Validate()
		if bad := err != nil && strings.Contains(err.Error(), "--lease-ttl"); bad == ok {
			t.Errorf("--lease-ttl=%s: Validate() = %v; want accepted %v", ttl, err, ok)
		}
	}
}
