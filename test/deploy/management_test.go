package deploy

import (
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestManagementOverlay: the management-node overlay runs the agent on
// pod members (--member-source=pods) with what that needs mounted (the
// local-storage root and the kubelet's pods dir, both HostToContainer) and
// without the static-pod base's manifests dir and etcd PKI; its extra RBAC
// reads cluster-wide and writes only where a RoleBinding puts it.
func TestManagementOverlay(t *testing.T) {
	objs, err := render(repoPath("deploy", "overlays", "management"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	want := append(slices.Clone(baseObjects), "ClusterRole/etcd-agent-members", "ClusterRoleBinding/etcd-agent-members",
		"ClusterRole/etcd-agent-member-writer", "Role/etcd-agent-node-leases", "RoleBinding/etcd-agent-node-leases",
		"ValidatingAdmissionPolicy/etcd-agent-member-scope", "ValidatingAdmissionPolicyBinding/etcd-agent-member-scope",
		"ValidatingAdmissionPolicy/etcd-agent-pv-scope", "ValidatingAdmissionPolicyBinding/etcd-agent-pv-scope",
		"ValidatingAdmissionPolicy/etcd-agent-claim-scope", "ValidatingAdmissionPolicyBinding/etcd-agent-claim-scope")
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("rendered objects:\n got %v\nwant %v", got, want)
	}
	if ns := find(objs, "Role", "etcd-agent-node-leases").GetNamespace(); ns != "kube-node-lease" {
		t.Errorf("the node-lease Role is in %q, want kube-node-lease", ns)
	}
	var ds appsv1.DaemonSet
	if err := typed(find(objs, "DaemonSet", "etcd-agent"), &ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if _, ok := pod.NodeSelector["node-role.kubernetes.io/control-plane"]; ok || pod.NodeSelector["etcd-agent.io/management-node"] != "true" {
		t.Errorf("nodeSelector %v: want management nodes, not control-plane nodes", pod.NodeSelector)
	}
	c := pod.Containers[0]
	flags := runFlags(t)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if name, ok := strings.CutPrefix(e.Name, "ETCD_AGENT_"); ok && !flags[strings.ToLower(strings.ReplaceAll(name, "_", "-"))] {
			t.Errorf("env %s names no flag of `etcd-agent run`", e.Name)
		}
	}
	if env["ETCD_AGENT_MEMBER_SOURCE"] != "pods" || env["ETCD_AGENT_POD_SELECTOR"] == "" {
		t.Errorf("env %v: want --member-source=pods and a pod selector", env)
	}
	for _, gone := range []string{"ETCD_AGENT_STATIC_POD_MANIFEST", "ETCD_AGENT_CERT"} {
		if _, ok := env[gone]; ok {
			t.Errorf("%s is the static-pod base's; pod members do not use it", gone)
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	for _, p := range []string{"/mnt/disks", "/var/lib/kubelet/pods"} {
		m, ok := mounts[p]
		if !ok || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
			t.Errorf("mount %s: %+v, want it with HostToContainer propagation", p, m)
		}
	}
	// The kubelet's pods dir holds every pod's Secrets: read (a TLS
	// member's client cert, a CSI member's files), never written.
	if m := mounts["/var/lib/kubelet/pods"]; !m.ReadOnly {
		t.Error("mount /var/lib/kubelet/pods is writable: the agent only reads there")
	}
	for _, p := range []string{"/etc/kubernetes/manifests", "/etc/kubernetes/pki/etcd", "/var/lib", "/var/lib/kubelet", "/var/lib/containerd"} {
		if _, ok := mounts[p]; ok {
			t.Errorf("mount %s is the static-pod base's; not needed on management nodes", p)
		}
	}
	// Nor anything of the node's /etc/kubernetes (the base's etcd PKI
	// files are mounted one by one).
	for _, v := range pod.Volumes {
		if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, "/etc/kubernetes/") {
			t.Errorf("volume %s mounts the node's %s: the static-pod base's; not needed on management nodes", v.Name, v.HostPath.Path)
		}
	}
	if _, ok := mounts["/var/lib/etcd-agent"]; !ok {
		t.Error("the agent's state dir (read by the pods' start gates) is not mounted")
	}
	for _, v := range pod.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/etc/kubernetes/manifests" {
			t.Error("the kubelet manifests volume is still there")
		}
	}
	var reader, writer rbacv1.ClusterRole
	if err := typed(find(objs, "ClusterRole", "etcd-agent-members"), &reader); err != nil {
		t.Fatal(err)
	}
	if err := typed(find(objs, "ClusterRole", "etcd-agent-member-writer"), &writer); err != nil {
		t.Fatal(err)
	}
	for _, r := range reader.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" && !(v == "patch" && slices.Equal(r.Resources, []string{"persistentvolumes"})) {
				t.Errorf("the cluster-wide role may only read (and patch PVs: Retain, a move's reservation): %+v", r)
			}
		}
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") {
			t.Errorf("the cluster-wide role reads %v", r.Resources)
		}
	}
	// A move judges pod affinity terms that pick namespaces by label.
	if !slices.ContainsFunc(reader.Rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "namespaces") && slices.Contains(r.Verbs, "list")
	}) {
		t.Error("the cluster-wide role does not list namespaces (a pod move's pod affinity terms with a namespace selector)")
	}
	for _, r := range writer.Rules {
		// It creates nothing but the clusters' records of pins (ConfigMaps).
		creates := slices.Contains(r.Verbs, "create") && !slices.Equal(r.Resources, []string{"configmaps"})
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || creates || slices.Contains(r.Resources, "secrets") {
			t.Errorf("the writer role is too wide: %+v", r)
		}
	}
	// The writer is bound per namespace by the operator, never cluster-wide.
	for _, o := range objs {
		if o.GetKind() == "ClusterRoleBinding" && strings.Contains(string(mustJSON(t, o)), "etcd-agent-member-writer") {
			t.Errorf("%s binds the writer cluster-wide", o.GetName())
		}
	}
}

func mustJSON(t *testing.T, o interface{ MarshalJSON() ([]byte, error) }) []byte {
	t.Helper()
	b, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
