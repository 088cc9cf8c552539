package etcdversion

import "testing"

func TestFromImageReadsTheTagsRealClustersRun(t *testing.T) {
	for image, want := range map[string]string{
		"registry.k8s.io/etcd:3.5.21-0":                     "3.5.21", // kubeadm
		"registry.k8s.io/etcd:3.6.16-0@sha256:0123456789ab": "3.6.16",
		"gcr.io/etcd-development/etcd:v3.6.0":               "3.6.0",
		"quay.io/coreos/etcd:v3.5.17":                       "3.5.17",
		"docker.io/bitnami/etcd:3.5.17-debian-12-r0":        "3.5.17",
		"localhost:5000/etcd:3.7.3":                         "3.7.3",
		"etcd:3.5":                                          "3.5",
		// Unknown: the learner's version cannot be read from these.
		"quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:abc": "",
		"localhost:5000/etcd":         "",
		"etcd:latest":                 "",
		"etcd-agent.invalid/etcd:lab": "",
		"etcd:3":                      "",
		"quay.io/openshift/etcd:4.18": "", // OpenShift's release, not etcd's
		"etcd:2.3.8":                  "",
		"registry.k8s.io/etcd-manager-slim:v3.0.20240618": "", // kops' manager, not etcd
		"quay.io/coreos/etcd:v3.3.27":                     "", // no learners before 3.4
		"":                                                "",
	} {
		if got := FromImage(image); got != want {
			t.Errorf("FromImage(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestParseAndOrder(t *testing.T) {
	for v, want := range map[string]Minor{"3.5.36": {3, 5}, "v3.6.0": {3, 6}, "3.5": {3, 5}, "3.7.0-rc.1": {3, 7}, "": {}, "3": {}, "x.y": {}, "0.4.9": {}} {
		if got := Parse(v); got != want {
			t.Errorf("Parse(%q) = %v, want %v", v, got, want)
		}
	}
	if !(Minor{3, 5}).Less(Minor{3, 6}) || (Minor{3, 6}).Less(Minor{3, 6}) || !(Minor{3, 9}).Less(Minor{4, 0}) {
		t.Error("Less misorders minors")
	}
	if (Minor{3, 5}).Next() != (Minor{3, 6}) || (Minor{}).Known() || (Minor{3, 6}).String() != "3.6" {
		t.Error("Next/Known/String")
	}
}
