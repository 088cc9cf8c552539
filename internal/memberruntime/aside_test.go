package memberruntime

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/manifest"
)

// A 3.5 learner starts with its client URLs set aside: etcd listens only
// on a private port of its client URL's host; the next plain Start (the
// restart once promoted, or a put-back) restores the member's own URLs.
func TestStaticPodStartAsideListensPrivatelyUntilTheNextStart(t *testing.T) {
	f := newPodFixture(t)
	own := "http://127.0.0.1:2379"
	b, _ := os.ReadFile(f.manifestPath)
	b = []byte(strings.Replace(string(b), "    - --initial-cluster-state=new\n",
		"    - --initial-cluster-state=new\n    - --listen-client-urls="+own+"\n    - --advertise-client-urls="+own+"\n", 1))
	if err := os.WriteFile(f.manifestPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rt := f.runtime(t)
	setter, ok := rt.(ClientURLsSetter)
	if !ok {
		t.Fatal("the static-pod runtime cannot set client URLs aside")
	}
	if err := rt.Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	const ic = "cp-1=http://127.0.0.1:2380,cp-2=http://127.0.0.2:2380"
	private, err := setter.StartAside(ctxWithTimeout(t, 10*time.Second), ic)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(private, "http://127.0.0.1:") || private == own {
		t.Fatalf("private URL %q: want another port of %s", private, own)
	}
	m, err := manifest.LoadMember(f.manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.ListenClientURLs, ",") != private || m.InitialClusterState != "existing" || m.ClientURLs[0] != own {
		t.Fatalf("started aside: listen %v, advertise %v, state %q", m.ListenClientURLs, m.ClientURLs, m.InitialClusterState)
	}
	if got, ok, err := setter.ClientURLsAside(); err != nil || !ok || got != private {
		t.Fatalf("ClientURLsAside: %q %v %v, want %q", got, ok, err, private)
	}
	if err := rt.Start(ctxWithTimeout(t, 10*time.Second), ic); err != nil {
		t.Fatal(err)
	}
	m, err = manifest.LoadMember(f.manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.ListenClientURLs, ",") != own || strings.Join(m.ClientURLs, ",") != own {
		t.Fatalf("started again: listen %v advertise %v, want %s", m.ListenClientURLs, m.ClientURLs, own)
	}
	if _, ok, err := setter.ClientURLsAside(); ok || err != nil {
		t.Fatalf("still set aside after Start: %v %v", ok, err)
	}
}

// The private port is the own one + 10000 when free (below the ephemeral
// range on the usual 2379), and only an IP of this node is ever used: etcd
// binds no host name, and no address of another host (helper 26's review).
func TestThePrivateClientURLIsAFreePortOfAnIPOfThisNode(t *testing.T) {
	got, err := freeURLOn("https://127.0.0.1:2379")
	if err != nil || got != "https://127.0.0.1:12379" {
		t.Errorf("own port 2379: %q, %v; want https://127.0.0.1:12379", got, err)
	}
	for _, u := range []string{"https://etcd-0.example.com:2379", "https://localhost:2379", "https://192.0.2.10:2379"} {
		if got, err := freeURLOn(u); err == nil {
			t.Errorf("%s: private URL %q, want a refusal", u, got)
		}
	}
	f := newPodFixture(t)
	rt := f.runtime(t).(ClientURLsSetter)
	if err := rt.CanSetClientURLsAside(); err == nil {
		t.Error("a manifest that leaves the client URLs to etcd's defaults can be set aside")
	}
}
