package manifest

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func hostedPod() *corev1.Pod {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-1", Namespace: "clusters-a"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:    "etcd",
			Command: []string{"/usr/bin/etcd-agent", "gate", "--state-dir=/var/lib/etcd-agent/members/$(POD_NAMESPACE)_$(POD_NAME)", "--endpoints", "http://e0:2379,http://e1:2379", "--", "/usr/local/bin/etcd"},
			Args: []string{"--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data", "--advertise-client-urls=http://$(POD_IP):2379",
				"--initial-advertise-peer-urls=http://$(POD_IP):2380", "--initial-cluster=etcd-0=http://a:2380,etcd-1=http://b:2380", "--initial-cluster-state=new"},
			Env: []corev1.EnvVar{field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"), field("POD_IP", "status.podIP")},
		}}},
	}
}

func TestMemberOfPodExpandsTheDownwardAPIAsTheKubeletDoes(t *testing.T) {
	m, c, argv, err := MemberOfPod(hostedPod(), PodFields{Name: "etcd-1", Namespace: "clusters-a", PodIP: "127.70.1.2"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "etcd-1" || m.DataDir != "/var/lib/etcd/data" || !slices.Equal(m.ClientURLs, []string{"http://127.70.1.2:2379"}) ||
		!slices.Equal(m.PeerURLs, []string{"http://127.70.1.2:2380"}) || !m.GateWrapped || m.InitialClusterState != "new" || c.Name != "etcd" {
		t.Fatalf("member %+v", m)
	}
	if v, ok := GateFlag(argv, "state-dir"); !ok || v != "/var/lib/etcd-agent/members/clusters-a_etcd-1" {
		t.Fatalf("gate --state-dir = %q %v", v, ok)
	}
	if v, ok := GateFlag(argv, "endpoints"); !ok || v != "http://e0:2379,http://e1:2379" {
		t.Fatalf("gate --endpoints = %q %v", v, ok)
	}
	if _, ok := GateFlag(argv, "name"); ok {
		t.Fatal("etcd's own --name was read as a gate flag")
	}
}

func TestMemberOfPodRefusesAPodWithoutItsIP(t *testing.T) {
	if _, _, _, err := MemberOfPod(hostedPod(), PodFields{Name: "etcd-1", Namespace: "clusters-a"}); err == nil {
		t.Fatal("a pod without status.podIP must not yield an identity (its URLs are unknown)")
	}
}

func TestGateFlagOnAnUnwrappedCommandLine(t *testing.T) {
	if _, ok := GateFlag([]string{"etcd", "--state-dir=/x"}, "state-dir"); ok {
		t.Fatal("not gate-wrapped: no gate flags")
	}
}

func TestSetArgvFlagsRewritesInPlaceSetsTheVariableOrAppends(t *testing.T) {
	argv := []string{"/bin/etcd", "--name=a", "--initial-cluster-state", "new", "-initial-cluster=a=http://x:2380"}
	env := []string{"PATH=/bin", "ETCD_INITIAL_CLUSTER_TOKEN=t1"}
	out, outEnv, err := SetArgvFlags(argv, env, map[string]string{"initial-cluster-state": "existing",
		"initial-cluster": "a=http://x:2380,b=http://y:2380", "initial-cluster-token": "t2", "snapshot-count": "5"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/bin/etcd", "--name=a", "--initial-cluster-state", "existing", "-initial-cluster=a=http://x:2380,b=http://y:2380", "--snapshot-count=5"}
	if !slices.Equal(out, want) {
		t.Fatalf("argv %q, want %q", out, want)
	}
	if !slices.Equal(outEnv, []string{"PATH=/bin", "ETCD_INITIAL_CLUSTER_TOKEN=t2"}) {
		t.Fatalf("env %q", outEnv)
	}
	if argv[3] != "new" || env[1] != "ETCD_INITIAL_CLUSTER_TOKEN=t1" {
		t.Fatal("the inputs were modified")
	}
	if _, _, err := SetArgvFlags(argv, nil, map[string]string{"initial-cluster-state": "-x"}); err == nil {
		t.Fatal("a two-token flag cannot take a value starting with -")
	}
}
