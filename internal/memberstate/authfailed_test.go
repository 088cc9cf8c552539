package memberstate

import (
	"testing"
	"time"
)

func authFailed(s *Sample) { s.Serving, s.AuthFailed = false, true }

// A member whose TLS handshake fails on trust (its serving cert from a CA
// the agent does not know yet, mid CA rotation; the agent's client cert
// refused) may serve everyone else: the agent cannot tell, so it is never
// lost, however long it lasts, whatever the data dir looks like (review of
// session 27: a rotated CA got a healthy member healed after the grace).
func TestAMemberWhoseTLSHandshakeFailsOnTrustIsNeverLost(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []func(*Sample)
	}{
		{"data dir in use", []func(*Sample){authFailed, dataDir("in-use")}},
		{"data dir ok", []func(*Sample){authFailed}},
		{"data dir missing", []func(*Sample){authFailed, dataDir("missing")}},
		{"data dir empty, verified", []func(*Sample){authFailed, deepDir("empty")}},
		{"not in the member list either", []func(*Sample){authFailed, notMember}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tr Tracker
			for at := time.Duration(0); at <= 4*grace; at += grace / 3 {
				v := tr.Observe(sample(at, c.opts...), Config{GracePeriod: grace})
				if v.State == Lost || v.State == Down {
					t.Fatalf("at %s: %s (%s: %s), want never down or lost while the handshake fails on trust", at, v.State, v.Reason, v.Detail)
				}
				if v.Reason != "tls-auth-failed" {
					t.Fatalf("at %s: reason %q, want tls-auth-failed first", at, v.Reason)
				}
			}
			// Once the handshake works again and it does not serve, the
			// grace period starts from there.
			v := tr.Observe(sample(5*grace, notServing), Config{GracePeriod: grace})
			if v.State != Down {
				t.Fatalf("not serving after the trust came back: %s, want down (the grace starts now)", v.State)
			}
		})
	}
}
