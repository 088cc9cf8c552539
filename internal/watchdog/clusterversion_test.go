package watchdog

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The observation carries the cluster version real etcd serves at /version
// (plan's version rule reads it), on 3.5 and on 3.6.
func TestObservationCarriesTheClusterVersion(t *testing.T) {
	for _, c := range []struct{ binary, want string }{{"etcd-3.5", "3.5."}, {"etcd", "3.6."}} {
		t.Run(c.binary, func(t *testing.T) {
			m := startOneMemberOf(t, "a", c.binary)
			w, err := New(Config{Identity: Identity{Name: "b", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURL: freeURL(t), DataDir: t.TempDir()},
				Endpoints: []string{m.clientURL}, ProbeTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			// etcd decides the cluster version shortly after its first
			// election ("not_decided" until then): poll, bounded.
			deadline := time.Now().Add(20 * time.Second)
			for {
				o := w.Observe(context.Background(), time.Now())
				if strings.HasPrefix(o.ClusterVersion, c.want) && strings.HasPrefix(o.Members[0].Version, c.want) {
					t.Logf("%s: cluster version %s, member %s", c.binary, o.ClusterVersion, o.Members[0].Version)
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("cluster version %q, member version %q after 20s, want %s*", o.ClusterVersion, o.Members[0].Version, c.want)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}
