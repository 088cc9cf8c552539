package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// walDirManifest is a kubeadm-style etcd static pod whose WAL is on a disk
// of its own (etcd's tuning guide): --wal-dir on a second hostPath volume,
// or ETCD_WAL_DIR when env is set.
func walDirManifest(t *testing.T, env bool) string {
	t.Helper()
	walFlag := "    - --wal-dir=/var/lib/etcd-wal/wal\n"
	walEnv := ""
	if env {
		walFlag, walEnv = "", "    env:\n    - name: ETCD_WAL_DIR\n      value: /var/lib/etcd-wal/wal\n"
	}
	m := `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  containers:
  - name: etcd
    command:
    - etcd
    - --name=cp-1
    - --data-dir=/var/lib/etcd
` + walFlag + `    - --advertise-client-urls=https://10.0.0.11:2379
    - --initial-advertise-peer-urls=https://10.0.0.11:2380
` + walEnv + `    volumeMounts:
    - {name: etcd-data, mountPath: /var/lib/etcd}
    - {name: etcd-wal, mountPath: /var/lib/etcd-wal}
  volumes:
  - {name: etcd-data, hostPath: {path: /mnt/data/etcd}}
  - {name: etcd-wal, hostPath: {path: /mnt/wal-disk}}
`
	path := filepath.Join(t.TempDir(), "etcd.yaml")
	if err := os.WriteFile(path, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Issue 38: the identity never carried --wal-dir, so the watchdog and the
// gate looked for the WAL in member/wal and judged a healthy member corrupt.
func TestTheIdentityCarriesTheDedicatedWALDirOnTheNode(t *testing.T) {
	for _, env := range []bool{false, true} {
		c := Config{StaticPodManifest: walDirManifest(t, env)}
		id, err := ResolveIdentity(c)
		if err != nil {
			t.Fatal(err)
		}
		if id.DataDir != "/mnt/data/etcd" || id.WALDir != "/mnt/wal-disk/wal" {
			t.Fatalf("env %v: data dir %q, WAL dir %q; want /mnt/data/etcd and /mnt/wal-disk/wal", env, id.DataDir, id.WALDir)
		}
		c.WALDir = "/mnt/wal-disk/wal" // the same dir, said twice: fine
		if id, err := ResolveIdentity(c); err != nil || id.WALDir != "/mnt/wal-disk/wal" {
			t.Fatalf("--wal-dir as the manifest says: %q, %v", id.WALDir, err)
		}
	}
}

// Review (issue 38): the agent's --wal-dir silently won over the
// manifest's. The heal then set aside one dir while the learner's etcd
// started on the other, the removed member's WAL. A conflict is an identity
// error naming both; a manifest whose WAL dir the agent cannot map (not on
// a hostPath) takes the flag.
func TestTheAgentsWALDirMustAgreeWithTheManifests(t *testing.T) {
	all := Config{MemberName: "cp-1", DataDir: "/mnt/data/etcd", ClientURL: "https://10.0.0.11:2379", PeerURLs: []string{"https://10.0.0.11:2380"}}
	for _, c := range []struct {
		name     string
		manifest string
		flag     string
		overall  bool
		want     string // "" an error
	}{
		{"another dir than the manifest's", walDirManifest(t, false), "/override/wal", false, ""},
		{"another dir, every override given", walDirManifest(t, true), "/override/wal", true, ""},
		{"a WAL dir etcd does not run with", plainManifest(t), "/override/wal", false, ""},
		{"a WAL dir etcd does not run with, every override given", plainManifest(t), "/override/wal", true, ""},
		{"the manifest's WAL dir off any hostPath", offHostPathWAL(t), "/host/wal", false, "/host/wal"},
	} {
		cfg := Config{StaticPodManifest: c.manifest, WALDir: c.flag}
		if c.overall {
			cfg.MemberName, cfg.DataDir, cfg.ClientURL, cfg.PeerURLs = all.MemberName, all.DataDir, all.ClientURL, all.PeerURLs
		}
		id, err := ResolveIdentity(cfg)
		switch {
		case c.want == "" && (err == nil || !strings.Contains(err.Error(), c.flag)):
			t.Errorf("%s: WAL dir %q, err %v; want an error naming %s", c.name, id.WALDir, err, c.flag)
		case c.want != "" && (err != nil || id.WALDir != c.want):
			t.Errorf("%s: WAL dir %q, err %v; want %s", c.name, id.WALDir, err, c.want)
		}
	}
}

// plainManifest is walDirManifest without any WAL dir.
func plainManifest(t *testing.T) string {
	t.Helper()
	path := walDirManifest(t, false)
	b, _ := os.ReadFile(path)
	return rewrite(t, path, strings.Replace(string(b), "    - --wal-dir=/var/lib/etcd-wal/wal\n", "", 1))
}

// offHostPathWAL is walDirManifest with a WAL dir on no hostPath volume.
func offHostPathWAL(t *testing.T) string {
	t.Helper()
	path := walDirManifest(t, false)
	b, _ := os.ReadFile(path)
	return rewrite(t, path, strings.Replace(string(b), "--wal-dir=/var/lib/etcd-wal/wal", "--wal-dir=/elsewhere/wal", 1))
}

func rewrite(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A WAL dir the agent cannot find on the node is never guessed: it would
// look missing, which reads as a wiped member.
func TestAWALDirOffAnyHostPathMountIsAnIdentityError(t *testing.T) {
	path := walDirManifest(t, false)
	b, _ := os.ReadFile(path)
	b = []byte(strings.Replace(string(b), "--wal-dir=/var/lib/etcd-wal/wal", "--wal-dir=/elsewhere/wal", 1))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ResolveIdentity(Config{StaticPodManifest: path})
	if err == nil || !strings.Contains(err.Error(), "/elsewhere/wal") {
		t.Fatalf("err = %v, want one naming the WAL dir", err)
	}
}

// Review (helper 4): a volume mounted right at --wal-dir is a mount point
// inside etcd's container though not on the host; etcd cannot create a new
// member's WAL there (etcd-io/etcd#20218). The identity says so, so the
// heal refuses before the Lease.
func TestAWALDirThatIsAContainerMountRootIsKnownAsOne(t *testing.T) {
	path := walDirManifest(t, false)
	b, _ := os.ReadFile(path)
	b = []byte(strings.Replace(string(b), "--wal-dir=/var/lib/etcd-wal/wal", "--wal-dir=/var/lib/etcd-wal", 1))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	id, err := ResolveIdentity(Config{StaticPodManifest: path})
	if err != nil || !id.WALDirMountRoot {
		t.Fatalf("WAL dir %q at the etcd-wal volume's mount path: mount root %v (%v), want true", id.WALDir, id.WALDirMountRoot, err)
	}
	if id, err := ResolveIdentity(Config{StaticPodManifest: walDirManifest(t, false)}); err != nil || id.WALDirMountRoot {
		t.Fatalf("WAL dir a subdir of its volume: mount root %v (%v), want false", id.WALDirMountRoot, err)
	}
}

// Review (helper 4): with every identity override given, the manifest's
// --wal-dir was never read: a healthy member's data dir (member/snap, no
// member/wal) read as corrupt.
func TestTheManifestsWALDirCountsWhenEveryOverrideIsGiven(t *testing.T) {
	c := Config{StaticPodManifest: walDirManifest(t, false), MemberName: "cp-1", DataDir: "/mnt/data/etcd",
		ClientURL: "https://10.0.0.11:2379", PeerURLs: []string{"https://10.0.0.11:2380"}}
	id, err := ResolveIdentity(c)
	if err != nil || id.WALDir != "/mnt/wal-disk/wal" {
		t.Fatalf("WAL dir %q (%v), want the manifest's /mnt/wal-disk/wal", id.WALDir, err)
	}
}
