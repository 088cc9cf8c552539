package watchdog

import (
	"testing"
)

func TestRelevantEventsAreInsideTheDataDir(t *testing.T) {
	for path, want := range map[string]bool{
		"/var/lib/etcd":                   true,
		"/var/lib/etcd/member":            true,
		"/var/lib/etcd/member/snap/db":    true,
		"/var/lib/etcd-agent-quarantine":  false,
		"/var/lib/other":                  false,
		"/var/lib/etcd/../etcd-agent/foo": false,
	} {
		if got := relevant(path, "/var/lib/etcd"); got != want {
			t.Errorf("relevant(%s) = %v, want %v", path, got, want)
		}
	}
}
