package manifest

import (
	"strings"
	"testing"
)

const wrapped = `apiVersion: v1
kind: Pod
metadata: {name: etcd-cp1, namespace: kube-system}
spec:
  containers:
  - name: etcd
    command: ["/opt/etcd-agent/etcd-agent", "gate", "--state-dir=/var/lib/etcd-agent", "--endpoints=https://10.0.0.2:2379",
              "--", "etcd", "--name=cp1", "--data-dir=/var/lib/etcd",
              "--advertise-client-urls=https://10.0.0.1:2379", "--initial-advertise-peer-urls=https://10.0.0.1:2380",
              "--initial-cluster=cp1=https://10.0.0.1:2380"]
    volumeMounts: [{name: etcd-data, mountPath: /var/lib/etcd}]
  volumes: [{name: etcd-data, hostPath: {path: /var/lib/etcd}}]
`

func TestGateWrappedManifestIsReadAndEditedOnEtcdsOwnFlags(t *testing.T) {
	m, err := ParseMember([]byte(wrapped))
	if err != nil {
		t.Fatal(err)
	}
	if !m.GateWrapped || m.Name != "cp1" || m.DataDir != "/var/lib/etcd" || m.InitialClusterState != "" ||
		len(m.ClientURLs) != 1 || m.ClientURLs[0] != "https://10.0.0.1:2379" {
		t.Fatalf("%+v", m)
	}
	out, err := SetFlags([]byte(wrapped), map[string]string{"initial-cluster-state": "existing", "initial-cluster": "cp1=https://10.0.0.1:2380,cp2=https://10.0.0.2:2380"})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := ParseMember(out)
	if err != nil {
		t.Fatal(err)
	}
	if !m2.GateWrapped || m2.InitialClusterState != "existing" || !strings.Contains(m2.InitialCluster, "cp2=") {
		t.Fatalf("after SetFlags: %+v", m2)
	}
	// The gate's own flags stay before the "--", untouched.
	if !strings.Contains(string(out), "--endpoints=https://10.0.0.2:2379") || strings.Index(string(out), "initial-cluster-state") < strings.Index(string(out), "- --\n") {
		t.Fatalf("the edit left the wrapper's part: %s", out)
	}
}

func TestUnwrappedManifestIsNotGateWrapped(t *testing.T) {
	plain := strings.Replace(wrapped, `"/opt/etcd-agent/etcd-agent", "gate", "--state-dir=/var/lib/etcd-agent", "--endpoints=https://10.0.0.2:2379",
              "--", `, "", 1)
	m, err := ParseMember([]byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	if m.GateWrapped || m.Name != "cp1" {
		t.Fatalf("%+v", m)
	}
}

func TestMemberFromArgvReadsEtcdsFlagsAndEnvironment(t *testing.T) {
	m, err := MemberFromArgv([]string{"etcd", "--name=cp1", "--advertise-client-urls=http://a:2379", "--initial-advertise-peer-urls=http://a:2380"},
		[]string{"PATH=/bin", "ETCD_DATA_DIR=/data/$(x)", "ETCD_INITIAL_CLUSTER_STATE=existing"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "cp1" || m.DataDir != "/data/$(x)" || m.InitialClusterState != "existing" || m.PeerURLs[0] != "http://a:2380" {
		t.Fatalf("%+v", m)
	}
}
