package lab

import (
	"strings"
	"testing"
)

// The lab's members run with the spec's --quota-backend-bytes, and with
// etcd's default when it sets none.
func TestEtcdPodManifestCarriesTheQuota(t *testing.T) {
	n := Node{Name: "node1", Member: "node1", IP: "127.0.0.11", DataDir: "/d", ClientURL: "http://127.0.0.11:1", PeerURL: "http://127.0.0.11:2"}
	dir := t.TempDir()
	fakeEtcd(t, dir, "etcd", "3.6.16")
	for quota, want := range map[int64]string{0: "", 4 << 30: "--quota-backend-bytes=4294967296"} {
		m, err := etcdPodManifest(&Spec{BinDir: dir, EtcdQuotaBytes: quota}, n, "node1=http://127.0.0.11:2", "new", "tok", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(m), "--quota-backend-bytes"); got != (want != "") || want != "" && !strings.Contains(string(m), want) {
			t.Errorf("quota %d: manifest %s, want %q", quota, m, want)
		}
	}
}
