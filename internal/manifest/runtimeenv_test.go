package manifest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func TestRuntimeEnvResolvesFieldRefsInOrderAndExpandsArgs(t *testing.T) {
	c := corev1.Container{
		Command: []string{"etcd", "--name=$(POD_NAME)"},
		Args:    []string{"--listen-peer-urls=https://$(POD_IP):2380", "--literal=$$(POD_IP)", "--unknown=$(NOPE)"},
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_IP", "status.podIP"),
			{Name: "PEER", Value: "$(POD_NAME).etcd-discovery.$(NS)"}, // NS not defined yet: kept as written
			fieldEnv("NS", "metadata.namespace"),
			{Name: "POD_NAME", Value: "again-$(POD_NAME)"}, // a later definition wins, in the first one's place
		},
	}
	e, err := RuntimeEnv(c, PodFields{Name: "etcd-1", Namespace: "clusters-a", PodIP: "127.1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	wantArgv := []string{"etcd", "--name=again-etcd-1", "--listen-peer-urls=https://127.1.2.3:2380", "--literal=$(POD_IP)", "--unknown=$(NOPE)"}
	if got := e.Argv(c); !slices.Equal(got, wantArgv) {
		t.Fatalf("argv %q, want %q", got, wantArgv)
	}
	wantEnv := []string{"POD_NAME=again-etcd-1", "POD_IP=127.1.2.3", "PEER=etcd-1.etcd-discovery.$(NS)", "NS=clusters-a"}
	if got := e.Environ(); !slices.Equal(got, wantEnv) {
		t.Fatalf("environ %q, want %q", got, wantEnv)
	}
}

func TestRuntimeEnvRefusesWhatItCannotKnow(t *testing.T) {
	for name, env := range map[string]corev1.EnvVar{
		"secret":       {Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}},
		"unknown path": fieldEnv("X", "metadata.labels['a']"),
		"no IP yet":    fieldEnv("X", "status.podIP"),
	} {
		_, err := RuntimeEnv(corev1.Container{Env: []corev1.EnvVar{env}}, PodFields{Name: "p"})
		if err == nil || !strings.Contains(err.Error(), "env X") {
			t.Errorf("%s: err %v, want a refusal naming env X", name, err)
		}
	}
}
