package pin

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestSavedPinLoadsBackAndABrokenOneIsAnErrorNotNeverSeen(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := Load(dir, "node1"); ok || err != nil {
		t.Fatalf("no file: ok=%v err=%v", ok, err)
	}
	p := Pin{Member: "node1", ClusterID: 0xc1, MemberID: 0xabc, PeerURLs: []string{"http://p"}, FirstSeenAt: time.Unix(5, 0).UTC(), SeenAt: time.Unix(6, 0).UTC()}
	if err := Save(dir, p); err != nil {
		t.Fatal(err)
	}
	got, ok, err := Load(dir, "node1")
	if err != nil || !ok || got.MemberID != p.MemberID || got.ClusterID != p.ClusterID || !got.FirstSeenAt.Equal(p.FirstSeenAt) {
		t.Fatalf("loaded %+v ok=%v err=%v", got, ok, err)
	}
	b, _ := os.ReadFile(Path(dir, "node1"))
	if !strings.Contains(string(b), `"memberID": "abc"`) {
		t.Fatalf("IDs are written in hex as etcdctl shows them: %s", b)
	}
	for name, content := range map[string]string{
		"garbage":        "{not json",
		"no IDs":         `{"member":"node1"}`,
		"another member": `{"member":"node9","clusterID":"c1","memberID":"abc"}`,
	} {
		if err := os.WriteFile(Path(dir, "node1"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := Load(dir, "node1"); err == nil || ok {
			t.Fatalf("%s: ok=%v err=%v, want an error", name, ok, err)
		}
	}
	if err := Save(dir, Pin{Member: "node1"}); err == nil {
		t.Fatal("an incomplete pin was saved")
	}
}
