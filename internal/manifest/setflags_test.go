package manifest

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// genericDoc decodes a manifest the way SetFlags must preserve it.
func genericDoc(t *testing.T, data []byte) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(j, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// etcdContainer returns the generic etcd container of a decoded manifest.
func etcdContainer(t *testing.T, doc map[string]any, name string) map[string]any {
	t.Helper()
	for _, c := range doc["spec"].(map[string]any)["containers"].([]any) {
		if c := c.(map[string]any); c["name"] == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func TestSetFlagsRoundTripOnKubeadmManifest(t *testing.T) {
	orig := readTestdata(t, "kubeadm-etcd.yaml")
	cluster := "cp-1=https://10.0.0.11:2380,cp-2=https://10.0.0.12:2380,cp-3=https://10.0.0.13:2380"
	out, err := SetFlags(orig, map[string]string{
		"initial-cluster":       cluster,
		"initial-cluster-state": "existing",
		"initial-cluster-token": "etcd-cluster-1", // absent: appended
	})
	if err != nil {
		t.Fatal(err)
	}

	m, err := ParseMember(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.InitialCluster != cluster || m.InitialClusterState != "existing" || m.InitialClusterToken != "etcd-cluster-1" {
		t.Errorf("after SetFlags: cluster %q state %q token %q", m.InitialCluster, m.InitialClusterState, m.InitialClusterToken)
	}
	before, _ := ParseMember(orig)
	before.InitialCluster, before.InitialClusterToken = m.InitialCluster, m.InitialClusterToken
	if !reflect.DeepEqual(m, before) {
		t.Errorf("identity changed beyond the set flags:\n got  %#v\n want %#v", m, before)
	}

	// Only the etcd container's command differs; initContainers, probes,
	// volumes, annotations and status survive.
	origDoc, outDoc := genericDoc(t, orig), genericDoc(t, out)
	oc, nc := etcdContainer(t, origDoc, "etcd"), etcdContainer(t, outDoc, "etcd")
	oldCmd, newCmd := oc["command"].([]any), nc["command"].([]any)
	if len(newCmd) != len(oldCmd)+1 || newCmd[len(newCmd)-1] != "--initial-cluster-token=etcd-cluster-1" {
		t.Errorf("want the missing flag appended to the command, got %v", newCmd)
	}
	for i, tok := range oldCmd {
		want := tok
		if strings.HasPrefix(tok.(string), "--initial-cluster=") {
			want = "--initial-cluster=" + cluster
		}
		if newCmd[i] != want {
			t.Errorf("command[%d] = %v, want %v (flags keep their place)", i, newCmd[i], want)
		}
	}
	oc["command"], nc["command"] = nil, nil
	if !reflect.DeepEqual(origDoc, outDoc) {
		t.Errorf("unrelated content changed:\n got  %v\n want %v", outDoc, origDoc)
	}
}

func TestSetFlagsUpdatesEtcdVariableInsteadOfShadowingIt(t *testing.T) {
	orig := readTestdata(t, "openshift-etcd.yaml")
	cluster := "master-0.example.com=https://10.0.0.21:2380,master-1.example.com=https://10.0.0.22:2380"
	out, err := SetFlags(orig, map[string]string{"initial-cluster": cluster, "initial-cluster-state": "existing"})
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := yaml.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers[1]
	if c.Name != "etcd" {
		t.Fatalf("container order changed: %q", c.Name)
	}
	if want := []string{"--logger=zap", "--log-level=info", "--quota-backend-bytes=8589934592"}; !reflect.DeepEqual(c.Args, want) {
		t.Errorf("args = %q, want %q (etcd exits when a flag shadows its ETCD_* variable)", c.Args, want)
	}
	var got string
	for _, e := range c.Env {
		if e.Name == "ETCD_INITIAL_CLUSTER" {
			got = e.Value
		}
	}
	if got != cluster {
		t.Errorf("ETCD_INITIAL_CLUSTER = %q, want %q", got, cluster)
	}
	if p.Spec.Containers[1].Env[0].ValueFrom == nil {
		t.Error("valueFrom of POD_NAME was lost")
	}
}

func TestSetFlagsKeepsEachFlagForm(t *testing.T) {
	tests := []struct {
		name      string
		container string
		flags     map[string]string
		wantCmd   []string
		wantArgs  []string
	}{
		{
			name:      "space separated value replaced in place",
			container: "  - name: etcd\n    command: [etcd, --name, m1, --data-dir, /data, --initial-cluster-state, new]\n",
			flags:     map[string]string{"initial-cluster-state": "existing"},
			wantCmd:   []string{"etcd", "--name", "m1", "--data-dir", "/data", "--initial-cluster-state", "existing"},
		},
		{
			name:      "every occurrence rewritten so no stale copy wins",
			container: "  - name: etcd\n    command: [etcd, --name=m1, -data-dir=/data, --initial-cluster-state=new]\n    args: [--initial-cluster-state=new]\n",
			flags:     map[string]string{"initial-cluster-state": "existing"},
			wantCmd:   []string{"etcd", "--name=m1", "-data-dir=/data", "--initial-cluster-state=existing"},
			wantArgs:  []string{"--initial-cluster-state=existing"},
		},
		{
			name:      "flag without value gets one",
			container: "  - name: etcd\n    command: [etcd, --name=m1, --data-dir=/data, --initial-cluster-state, --snapshot-count=5]\n",
			flags:     map[string]string{"initial-cluster-state": "existing"},
			wantCmd:   []string{"etcd", "--name=m1", "--data-dir=/data", "--initial-cluster-state=existing", "--snapshot-count=5"},
		},
		{
			name:      "appended to args when the container has args, sorted",
			container: "  - name: etcd\n    command: [etcd]\n    args: [--name=m1, --data-dir=/data]\n",
			flags:     map[string]string{"initial-cluster-state": "existing", "initial-cluster": "m1=https://a:2380"},
			wantCmd:   []string{"etcd"},
			wantArgs:  []string{"--name=m1", "--data-dir=/data", "--initial-cluster=m1=https://a:2380", "--initial-cluster-state=existing"},
		},
		{
			name:      "dollar signs escaped from kubelet expansion",
			container: "  - name: etcd\n    command: [etcd, --name=m1, --data-dir=/data]\n",
			flags:     map[string]string{"initial-cluster-token": "a$(B)c"},
			wantCmd:   []string{"etcd", "--name=m1", "--data-dir=/data", "--initial-cluster-token=a$$(B)c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := SetFlags(pod(tt.container), tt.flags)
			if err != nil {
				t.Fatal(err)
			}
			var p corev1.Pod
			if err := yaml.Unmarshal(out, &p); err != nil {
				t.Fatal(err)
			}
			c := p.Spec.Containers[0]
			if !reflect.DeepEqual(c.Command, tt.wantCmd) || !reflect.DeepEqual(c.Args, tt.wantArgs) {
				t.Errorf("command %q args %q; want %q %q", c.Command, c.Args, tt.wantCmd, tt.wantArgs)
			}
		})
	}
}

func TestSetFlagsRefusesEditsEtcdWouldNotSee(t *testing.T) {
	tests := []struct {
		name      string
		container string
		flags     map[string]string
		wantText  string
	}{
		{
			name:      "shell wrapper",
			container: "  - name: etcd\n    command: [/bin/sh, -c, exec etcd --name=m1 --data-dir=/data]\n",
			flags:     map[string]string{"initial-cluster-state": "existing"},
			wantText:  "does not run etcd directly",
		},
		{
			name:      "variable from valueFrom",
			container: "  - name: etcd\n    command: [etcd, --name=m1, --data-dir=/data]\n    env: [{name: ETCD_INITIAL_CLUSTER_STATE, valueFrom: {configMapKeyRef: {name: etcd-config, key: state}}}]\n",
			flags:     map[string]string{"initial-cluster-state": "existing"},
			wantText:  "takes ETCD_INITIAL_CLUSTER_STATE from valueFrom",
		},
		{
			name:      "empty value through a variable",
			container: "  - name: etcd\n    command: [etcd, --name=m1, --data-dir=/data]\n    env: [{name: ETCD_INITIAL_CLUSTER_TOKEN, value: tok}]\n",
			flags:     map[string]string{"initial-cluster-token": ""},
			wantText:  "etcd ignores an empty variable",
		},
		{
			name:      "flag name with dashes",
			container: "  - name: etcd\n    command: [etcd, --name=m1, --data-dir=/data]\n",
			flags:     map[string]string{"--initial-cluster-state": "existing"},
			wantText:  "invalid etcd flag name",
		},
		{
			name:      "dash value in two-token form",
			container: "  - name: etcd\n    command: [etcd, --name=m1, --data-dir=/data, --initial-cluster-token, tok]\n",
			flags:     map[string]string{"initial-cluster-token": "-tok"},
			wantText:  "as two tokens",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SetFlags(pod(tt.container), tt.flags)
			if err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %v, want one mentioning %q", err, tt.wantText)
			}
		})
	}
}

func TestSetFlagsRejectsManifestsParseRejects(t *testing.T) {
	if _, err := SetFlags([]byte("kind: ["), map[string]string{"name": "x"}); err == nil {
		t.Error("garbage YAML accepted")
	}
	if _, err := SetFlags(pod("  - name: web\n    command: [nginx]\n"), map[string]string{"name": "x"}); err == nil {
		t.Error("pod without etcd container accepted")
	}
}
