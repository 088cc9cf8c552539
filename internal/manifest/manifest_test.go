package manifest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadsKubeadmManifest(t *testing.T) {
	m, err := LoadMember("testdata/kubeadm-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Member{
		Name:                "cp-2",
		DataDir:             "/var/lib/etcd",
		ClientURLs:          []string{"https://10.0.0.12:2379"},
		PeerURLs:            []string{"https://10.0.0.12:2380"},
		ListenClientURLs:    []string{"https://127.0.0.1:2379", "https://10.0.0.12:2379"},
		MetricsURLs:         []string{"http://127.0.0.1:2381"},
		InitialCluster:      "cp-1=https://10.0.0.11:2380,cp-2=https://10.0.0.12:2380",
		InitialClusterState: "existing",
		CertFile:            "/etc/kubernetes/pki/etcd/server.crt",
		KeyFile:             "/etc/kubernetes/pki/etcd/server.key",
		TrustedCAFile:       "/etc/kubernetes/pki/etcd/ca.crt",
		PeerCertFile:        "/etc/kubernetes/pki/etcd/peer.crt",
		PeerKeyFile:         "/etc/kubernetes/pki/etcd/peer.key",
		PeerTrustedCAFile:   "/etc/kubernetes/pki/etcd/ca.crt",
		ContainerName:       "etcd",
		Image:               "registry.k8s.io/etcd:3.6.4-0",
		HostMounts: []HostMount{
			{ContainerPath: "/var/lib/etcd", HostPath: "/var/lib/etcd"},
			{ContainerPath: "/etc/kubernetes/pki/etcd", HostPath: "/etc/kubernetes/pki/etcd"},
		},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got  %#v\nwant %#v", m, want)
	}
}

func TestLoadsOpenShiftEnvStyleManifest(t *testing.T) {
	m, err := LoadMember("testdata/openshift-etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	certs := "/etc/kubernetes/static-pod-certs/"
	want := Member{
		Name:                "master-0.example.com",
		DataDir:             "/var/lib/etcd",
		ClientURLs:          []string{"https://10.0.0.21:2379"},
		PeerURLs:            []string{"https://10.0.0.21:2380"},
		ListenClientURLs:    []string{"https://0.0.0.0:2379", "unixs://10.0.0.21:0"},
		InitialCluster:      "master-0.example.com=https://10.0.0.21:2380,master-1.example.com=https://10.0.0.22:2380,master-2.example.com=https://10.0.0.23:2380",
		InitialClusterState: "existing",
		CertFile:            certs + "secrets/etcd-all-certs/etcd-serving-master-0.crt",
		KeyFile:             certs + "secrets/etcd-all-certs/etcd-serving-master-0.key",
		TrustedCAFile:       certs + "configmaps/etcd-serving-ca/ca-bundle.crt",
		PeerCertFile:        certs + "secrets/etcd-all-certs/etcd-peer-master-0.crt",
		PeerKeyFile:         certs + "secrets/etcd-all-certs/etcd-peer-master-0.key",
		PeerTrustedCAFile:   certs + "configmaps/etcd-peer-client-ca/ca-bundle.crt",
		ContainerName:       "etcd",
		Image:               "quay.io/openshift/etcd:4.18",
		HostMounts: []HostMount{
			{ContainerPath: "/etc/kubernetes/static-pod-resources", HostPath: "/etc/kubernetes/static-pod-resources/etcd-pod-7"},
			{ContainerPath: "/etc/kubernetes/static-pod-certs", HostPath: "/etc/kubernetes/static-pod-resources/etcd-certs"},
			{ContainerPath: "/var/lib/etcd", HostPath: "/var/lib/etcd"},
		},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got  %#v\nwant %#v", m, want)
	}
}

// pod builds a minimal manifest around one container spec (YAML indented
// for a list item under "containers:").
func pod(container string) []byte {
	return []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\nspec:\n  containers:\n" + container)
}

func TestReadsFlagValues(t *testing.T) {
	tests := []struct {
		name      string
		container string
		want      Member
	}{
		{
			name: "space separated values",
			container: `  - name: etcd
    command: [etcd, --name, m1, --data-dir, /data, --client-cert-auth, --advertise-client-urls, "https://a:2379, https://b:2379"]
`,
			want: Member{Name: "m1", DataDir: "/data", ClientURLs: []string{"https://a:2379", "https://b:2379"}, ContainerName: "etcd"},
		},
		{
			name: "single dash flags as Go's flag package accepts",
			container: `  - name: etcd
    command: [/usr/local/bin/etcd, -name=m1, -data-dir, /data]
`,
			want: Member{Name: "m1", DataDir: "/data", ContainerName: "etcd"},
		},
		{
			name: "flags split between command and args",
			container: `  - name: etcd
    command: [etcd, --name=m1]
    args: [--data-dir=/data, --initial-cluster-token=tok]
`,
			want: Member{Name: "m1", DataDir: "/data", InitialClusterToken: "tok", ContainerName: "etcd"},
		},
		{
			name: "image entrypoint with args only",
			container: `  - name: etcd
    args: [--name=m1, --data-dir=/data]
`,
			want: Member{Name: "m1", DataDir: "/data", ContainerName: "etcd"},
		},
		{
			name: "last occurrence wins",
			container: `  - name: etcd
    command: [etcd, --name=old, --data-dir=/data, --name=new]
`,
			want: Member{Name: "new", DataDir: "/data", ContainerName: "etcd"},
		},
		{
			name: "flags win over env",
			container: `  - name: etcd
    command: [etcd, --data-dir=/flag]
    env: [{name: ETCD_DATA_DIR, value: /env}, {name: ETCD_NAME, value: m1}]
`,
			want: Member{Name: "m1", DataDir: "/flag", ContainerName: "etcd"},
		},
		{
			name: "empty env counts as unset and later env definitions win",
			container: `  - name: etcd
    command: [etcd, --data-dir=/data]
    env: [{name: ETCD_NAME, value: first}, {name: ETCD_NAME, value: m1}, {name: ETCD_INITIAL_CLUSTER_STATE, value: ""}]
`,
			want: Member{Name: "m1", DataDir: "/data", ContainerName: "etcd"},
		},
		{
			name: "kubelet expansion in args, escapes and unknown references",
			container: `  - name: etcd
    command: [etcd, "--name=$(HOST)", "--data-dir=/data/$$(HOST)", "--initial-cluster-token=$(UNDEFINED)"]
    env: [{name: HOST, value: cp-1}]
`,
			want: Member{Name: "cp-1", DataDir: "/data/$(HOST)", InitialClusterToken: "$(UNDEFINED)", ContainerName: "etcd"},
		},
		{
			name: "only container running an etcd binary, after sh -c sidecar",
			container: `  - name: sidecar
    command: [/bin/sh, -c, "exec etcd --name=wrong"]
  - name: member
    command: [/usr/local/bin/etcd, --name=m1, --data-dir=/data]
`,
			want: Member{Name: "m1", DataDir: "/data", ContainerName: "member"},
		},
		{
			name: "container named etcd wins over other etcd binaries",
			container: `  - name: proxy
    command: [etcd, grpc-proxy, start]
  - name: etcd
    command: [/bin/sh, -c, "exec etcd"]
    env: [{name: ETCD_NAME, value: m1}, {name: ETCD_DATA_DIR, value: /data}]
`,
			want: Member{Name: "m1", DataDir: "/data", ContainerName: "etcd"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMember(pod(tt.container))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, tt.want) {
				t.Errorf("got  %#v\nwant %#v", m, tt.want)
			}
		})
	}
}

func TestRefusesManifestsItCannotTrust(t *testing.T) {
	tests := []struct {
		name     string
		data     string
		wantErr  error  // checked with errors.Is when set
		wantText string // substring of the message
	}{
		{name: "garbage YAML", data: "spec: [unclosed\n  : {{", wantText: "parse manifest as YAML"},
		{name: "empty file", data: "\n", wantText: "manifest is empty"},
		{name: "scalar document", data: "hello world\n", wantText: "not a Pod"},
		{name: "a Deployment", data: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: etcd}\n", wantText: `not a Pod (apiVersion "apps/v1", kind "Deployment"`},
		{
			name:    "pod without etcd container",
			data:    string(pod("  - name: apiserver\n    command: [kube-apiserver, --etcd-servers=https://127.0.0.1:2379]\n")),
			wantErr: ErrNoEtcdContainer, wantText: `none of its containers ["apiserver"] runs an etcd binary`,
		},
		{
			name:    "etcd only in an init container",
			data:    "apiVersion: v1\nkind: Pod\nmetadata: {name: etcd}\nspec:\n  initContainers: [{name: etcd, command: [etcd, --name=a, --data-dir=/d]}]\n  containers: [{name: pause, image: pause}]\n",
			wantErr: ErrNoEtcdContainer,
		},
		{
			name:    "two unnamed etcd containers",
			data:    string(pod("  - name: a\n    command: [etcd, --name=a, --data-dir=/a]\n  - name: b\n    command: [etcd, --name=b, --data-dir=/b]\n")),
			wantErr: ErrAmbiguousEtcdContainer, wantText: `containers ["a" "b"] all run etcd`,
		},
		{
			name:    "no name",
			data:    string(pod("  - name: etcd\n    command: [etcd, --data-dir=/data]\n")),
			wantErr: ErrIncompleteIdentity, wantText: "neither --name nor ETCD_NAME",
		},
		{
			name:    "no data dir",
			data:    string(pod("  - name: etcd\n    command: [etcd, --name=m1]\n")),
			wantErr: ErrIncompleteIdentity, wantText: `neither --data-dir nor ETCD_DATA_DIR; refusing to guess (etcd would use "m1.etcd"`,
		},
		{
			name:    "name from valueFrom",
			data:    string(pod("  - name: etcd\n    command: [etcd, --data-dir=/data]\n    env: [{name: ETCD_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]\n")),
			wantErr: ErrIncompleteIdentity, wantText: "ETCD_NAME is set at runtime",
		},
		{
			name:    "flag refers to a valueFrom variable",
			data:    string(pod("  - name: etcd\n    command: [etcd, --name=$(NODE), --data-dir=/data]\n    env: [{name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]\n")),
			wantErr: ErrIncompleteIdentity, wantText: "refers to $(NODE)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseMember([]byte(tt.data))
			if err == nil {
				t.Fatal("want an error, got none")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %q is not %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not mention %q", err, tt.wantText)
			}
		})
	}
}

func TestMissingManifestSaysNotFound(t *testing.T) {
	p := filepath.Join(t.TempDir(), "etcd.yaml")
	_, err := LoadMember(p)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v is not fs.ErrNotExist", err)
	}
	if want := "static pod manifest " + p + " not found"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v does not say %q", err, want)
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "etcd.yaml")
	if err := os.WriteFile(p, []byte("kind: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadMember(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("error %v does not name %s", err, p)
	}
}

func TestHostPathFollowsTheDeepestHostPathMount(t *testing.T) {
	m, err := ParseMember(pod(`  - name: etcd
    command: [etcd, --name=m1, --data-dir=/var/lib/etcd/member-data]
    volumeMounts:
    - {name: root, mountPath: /var/lib}
    - {name: data, mountPath: /var/lib/etcd}
    - {name: sub, mountPath: /certs, subPath: etcd/pki, readOnly: true}
    - {name: scratch, mountPath: /tmp}
  volumes:
  - {name: root, hostPath: {path: /host/var-lib}}
  - {name: data, hostPath: {path: /mnt/disks/etcd0}}
  - {name: sub, hostPath: {path: /etc/kubernetes}}
  - {name: scratch, emptyDir: {}}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in     string
		want   string
		wantOK bool
	}{
		{in: m.DataDir, want: "/mnt/disks/etcd0/member-data", wantOK: true},
		{in: "/var/lib/etcd", want: "/mnt/disks/etcd0", wantOK: true},
		{in: "/var/lib/etcd2", want: "/host/var-lib/etcd2", wantOK: true},
		{in: "/certs/ca.crt", want: "/etc/kubernetes/etcd/pki/ca.crt", wantOK: true},
		{in: "/tmp/x", wantOK: false},    // emptyDir: not on the node's filesystem
		{in: "/opt/data", wantOK: false}, // not mounted at all
		{in: "relative", wantOK: false},  // relative to an unknown working dir
		{in: "/var/lib/../lib/etcd", want: "/mnt/disks/etcd0", wantOK: true},
	}
	for _, tt := range tests {
		got, ok := m.HostPath(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("HostPath(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}
