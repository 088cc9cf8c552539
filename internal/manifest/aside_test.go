package manifest

import (
	"os"
	"strings"
	"testing"
)

// A 3.5 learner's start sets the member's client URLs aside and the
// restore after its promotion puts exactly them back (issue 40).
func TestClientURLsSetAsideComeBackAsTheyWere(t *testing.T) {
	orig, err := os.ReadFile("testdata/kubeadm-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	before, err := ParseMember(orig)
	if err != nil {
		t.Fatal(err)
	}
	const private = "https://192.168.0.10:12379"
	aside, err := SetClientURLsAside(orig, private)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseMember(aside)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(m.ListenClientURLs, ",") != private {
		t.Errorf("set aside: listens on %v, want only %s", m.ListenClientURLs, private)
	}
	if len(m.ClientURLs) != len(before.ClientURLs)+1 || m.ClientURLs[0] != before.ClientURLs[0] || m.ClientURLs[len(m.ClientURLs)-1] != private {
		t.Errorf("set aside: advertises %v, want %v then %s (the identity's first client URL kept)", m.ClientURLs, before.ClientURLs, private)
	}
	a, ok, err := ClientURLsAsideOf(aside)
	if err != nil || !ok || a.Private != private || a.Listen != strings.Join(before.ListenClientURLs, ",") {
		t.Fatalf("annotation: %+v %v %v", a, ok, err)
	}
	// A second start set aside (a resume, another port) keeps the originals.
	again, err := SetClientURLsAside(aside, "https://192.168.0.10:22379")
	if err != nil {
		t.Fatal(err)
	}
	back, changed, err := RestoreClientURLs(again)
	if err != nil || !changed {
		t.Fatalf("restore: changed %v, %v", changed, err)
	}
	after, err := ParseMember(back)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(after.ListenClientURLs, ",") != strings.Join(before.ListenClientURLs, ",") || strings.Join(after.ClientURLs, ",") != strings.Join(before.ClientURLs, ",") {
		t.Errorf("restored: listen %v advertise %v, want %v %v", after.ListenClientURLs, after.ClientURLs, before.ListenClientURLs, before.ClientURLs)
	}
	if _, ok, _ := ClientURLsAsideOf(back); ok || strings.Contains(string(back), ClientURLsAsideAnnotation) {
		t.Errorf("restored manifest still carries the annotation:\n%s", back)
	}
	if same, changed, err := RestoreClientURLs(orig); err != nil || changed || string(same) != string(orig) {
		t.Errorf("restore of a manifest never set aside: changed %v, %v", changed, err)
	}
}

// etcd's defaults are not written in a manifest: a member that relies on
// them is not set aside (nothing exact to put back).
func TestClientURLsAreNotSetAsideWhenTheManifestLeavesThemToEtcd(t *testing.T) {
	orig, err := os.ReadFile("testdata/kubeadm-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(orig), "\n") {
		if !strings.Contains(l, "--listen-client-urls") {
			kept = append(kept, l)
		}
	}
	if _, err := SetClientURLsAside([]byte(strings.Join(kept, "\n")), "https://192.168.0.10:12379"); err == nil {
		t.Error("a manifest without --listen-client-urls was set aside")
	}
}
