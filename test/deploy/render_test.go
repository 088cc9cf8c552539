package deploy

import (
	"os/exec"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// variant is one shipped kustomization and the node layout it is for.
type variant struct {
	name string
	dir  string // under deploy/
	// Where the platform puts etcd's files on the node.
	dataDir     string // the etcd data dir
	manifest    string // the etcd static-pod manifest
	certHostDir string // host folder with etcd's client certificates
	// certFilesOnly: the CA and the client pair are mounted as single
	// files, not their folder (kubeadm's holds the CA key and the
	// members' keys; OpenShift's paths name the node, which a hostPath
	// cannot).
	certFilesOnly bool
	image         string
	extraObjects  []string // kind/name beyond the base's
}

var variants = []variant{
	{name: "kubeadm", dir: "daemonset", dataDir: "/var/lib/etcd", manifest: "/etc/kubernetes/manifests/etcd.yaml",
		certHostDir: "/etc/kubernetes/pki/etcd", certFilesOnly: true, image: "ghcr.io/etcd-agent/etcd-agent:latest"},
	{name: "openshift", dir: "overlays/openshift", dataDir: "/var/lib/etcd", manifest: "/etc/kubernetes/manifests/etcd-pod.yaml",
		certHostDir: "/etc/kubernetes/static-pod-resources/etcd-certs", image: "quay.io/example/etcd-agent:v0.1.0",
		extraObjects: []string{"SecurityContextConstraints/etcd-agent", "ClusterRole/etcd-agent-scc", "RoleBinding/etcd-agent-scc",
			"Role/prometheus-k8s", "RoleBinding/prometheus-k8s"}},
}

const agentNamespace = "etcd-agent"

// hiddenHostDirs hold other components' secrets under /var/lib: the
// kubelet's (its client certificate, every pod's Secret and token volumes)
// and the container runtimes' (containerd, Docker, CRI-O).
var hiddenHostDirs = []string{"/var/lib/kubelet", "/var/lib/kubelet/pods", "/var/lib/kubelet/pki", "/var/lib/containerd", "/var/lib/docker", "/var/lib/containers"}

var baseObjects = []string{"Namespace/etcd-agent", "ServiceAccount/etcd-agent", "Role/etcd-agent", "RoleBinding/etcd-agent",
	"ClusterRole/etcd-agent", "ClusterRoleBinding/etcd-agent", "ValidatingAdmissionPolicy/etcd-agent-node-scope",
	"ValidatingAdmissionPolicyBinding/etcd-agent-node-scope", "ValidatingAdmissionPolicy/etcd-agent-lease-scope",
	"ValidatingAdmissionPolicyBinding/etcd-agent-lease-scope", "DaemonSet/etcd-agent", "Service/etcd-agent",
	"ServiceMonitor/etcd-agent", "PrometheusRule/etcd-agent"}

func renderVariant(t *testing.T, v variant) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(repoPath("deploy", v.dir))
	if err != nil {
		t.Fatalf("render %s: %v", v.dir, err)
	}
	return objs
}

// TestRenderObjects: each kustomization renders exactly the expected objects,
// every namespaced one in the agent's namespace.
func TestRenderObjects(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			objs := renderVariant(t, v)
			var got []string
			for _, o := range objs {
				got = append(got, o.GetKind()+"/"+o.GetName())
				switch o.GetKind() {
				case "Namespace", "ClusterRole", "ClusterRoleBinding", "SecurityContextConstraints", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
					if o.GetNamespace() != "" {
						t.Errorf("%s/%s is cluster-scoped but has namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
					}
				default:
					if o.GetNamespace() != agentNamespace {
						t.Errorf("%s/%s: namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), agentNamespace)
					}
				}
				if o.GetLabels()["app.kubernetes.io/name"] != "etcd-agent" {
					t.Errorf("%s/%s lacks label app.kubernetes.io/name=etcd-agent", o.GetKind(), o.GetName())
				}
			}
			want := append(slices.Clone(baseObjects), v.extraObjects...)
			sort.Strings(got)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("rendered objects:\n got %v\nwant %v", got, want)
			}
			ns := find(objs, "Namespace", agentNamespace)
			if ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("namespace must admit the agent's hostPath/hostNetwork pod: pod-security.kubernetes.io/enforce=privileged, got %v", ns.GetLabels())
			}
		})
	}
}

// runFlags are the flags of `etcd-agent run` (and the global ones), read
// from the built binary's help.
func runFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(agent(t), "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("etcd-agent run --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["static-pod-manifest"] || !flags["log-format"] {
		t.Fatalf("could not read the flags of `etcd-agent run --help`:\n%s", out)
	}
	return flags
}

// envRef is a $(VAR) reference in an env value (not $$(VAR), an escape).
var envRef = regexp.MustCompile(`(?:^|[^$])\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestDaemonSetContract checks the DaemonSet against what the agent needs
// and what the issue asks, for each variant.
func TestDaemonSetContract(t *testing.T) {
	flags := runFlags(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			objs := renderVariant(t, v)
			var ds appsv1.DaemonSet
			if err := typed(find(objs, "DaemonSet", "etcd-agent"), &ds); err != nil {
				t.Fatalf("DaemonSet does not decode strictly: %v", err)
			}
			checkDaemonSet(t, v, ds, flags)
			var sa corev1.ServiceAccount
			if err := typed(find(objs, "ServiceAccount", "etcd-agent"), &sa); err != nil {
				t.Fatal(err)
			}
			if ds.Spec.Template.Spec.ServiceAccountName != sa.Name {
				t.Errorf("serviceAccountName %q, want the shipped ServiceAccount %q", ds.Spec.Template.Spec.ServiceAccountName, sa.Name)
			}
			checkServiceAndMonitor(t, objs, ds)
		})
	}
}

func checkDaemonSet(t *testing.T, v variant, ds appsv1.DaemonSet, flags map[string]bool) {
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v dnsPolicy %q: the agent reaches etcd on the node IP (want hostNetwork with ClusterFirstWithHostNet)", pod.HostNetwork, pod.DNSPolicy)
	}
	if pod.HostPID || pod.HostIPC {
		t.Errorf("hostPID/hostIPC are not needed")
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName %q, want system-node-critical", pod.PriorityClassName)
	}
	if _, ok := pod.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("nodeSelector %v: want control-plane nodes only", pod.NodeSelector)
	}
	tolerates := func(key string) bool {
		for _, tol := range pod.Tolerations {
			if tol.Key == key && tol.Operator == corev1.TolerationOpExists && (tol.Effect == "" || tol.Effect == corev1.TaintEffectNoSchedule) {
				return true
			}
		}
		return false
	}
	for _, key := range []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"} {
		if !tolerates(key) {
			t.Errorf("no toleration for %s:NoSchedule", key)
		}
	}
	if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccompProfile: want RuntimeDefault")
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("updateStrategy %q, want RollingUpdate", ds.Spec.UpdateStrategy.Type)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != v.image {
		t.Errorf("image %q, want %q", c.Image, v.image)
	}
	if len(c.Command) != 0 || len(c.Args) != 1 || c.Args[0] != "run" {
		t.Errorf("command %v args %v: want the image's entrypoint with args [run]", c.Command, c.Args)
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
		if name, ok := strings.CutPrefix(e.Name, "ETCD_AGENT_"); ok {
			flag := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
			if !flags[flag] {
				t.Errorf("env %s: `etcd-agent run` has no flag --%s", e.Name, flag)
			}
		}
	}
	// The kubelet expands $(VAR) in a value only from variables defined
	// earlier in the list; a later one stays a literal "$(VAR)" (a
	// certificate path with "$(NODE_NAME)" in it). Patches can reorder the
	// list: check the rendered order.
	for i, e := range c.Env {
		for _, m := range envRef.FindAllStringSubmatch(e.Value, -1) {
			if j := slices.IndexFunc(c.Env, func(d corev1.EnvVar) bool { return d.Name == m[1] }); j < 0 || j > i {
				t.Errorf("env %s (#%d) uses $(%s), defined at #%d: the kubelet leaves it unexpanded (define it first)", e.Name, i, m[1], j)
			}
		}
	}
	fieldRef := func(name string) string {
		if e, ok := env[name]; ok && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
		return ""
	}
	if fieldRef("NODE_NAME") != "spec.nodeName" {
		t.Errorf("NODE_NAME must come from the downward API (spec.nodeName)")
	}
	if fieldRef("POD_NAMESPACE") != "metadata.namespace" {
		t.Errorf("POD_NAMESPACE must come from the downward API (metadata.namespace): the Lease lives there")
	}
	// $(NODE_NAME) in a value is expanded by the kubelet; use a node name.
	value := func(name string) string {
		return strings.ReplaceAll(env[name].Value, "$(NODE_NAME)", "node1")
	}

	// Mounts: where each host folder is, writable or not.
	hostPaths := map[string]string{}
	for _, vol := range pod.Volumes {
		if vol.HostPath != nil {
			hostPaths[vol.Name] = vol.HostPath.Path
		}
	}
	type mount struct {
		path, host string
		readOnly   bool
	}
	var mounts []mount
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, mount{path: m.MountPath, host: hostPaths[m.Name], readOnly: m.ReadOnly})
	}
	// deepest mount containing p (as the container sees it)
	mountOf := func(p string) (mount, bool) {
		best, found := mount{}, false
		for _, m := range mounts {
			if (p == m.path || strings.HasPrefix(p, strings.TrimSuffix(m.path, "/")+"/")) && len(m.path) >= len(best.path) {
				best, found = m, true
			}
		}
		return best, found
	}
	wantHostMount := func(what, p string, writable, samePath bool) {
		m, ok := mountOf(p)
		switch {
		case !ok || m.host == "":
			t.Errorf("%s %s is not on a hostPath mount", what, p)
		case writable && m.readOnly:
			t.Errorf("%s %s is on a read-only mount (%s); the agent writes there", what, p, m.path)
		case !writable && !m.readOnly:
			t.Errorf("%s %s is on a writable mount (%s); read-only is enough", what, p, m.path)
		case samePath && m.path != m.host:
			t.Errorf("%s: mount %s shows host %s; paths must be the same inside as on the node (the agent reads them from the etcd manifest)", what, m.path, m.host)
		}
	}

	// The data dir is renamed into <parent>/etcd-agent-quarantine: both on
	// one mount, and the data dir must not be a mount point itself.
	parent := path.Dir(v.dataDir)
	wantHostMount("the etcd data dir's parent", parent, true, true)
	if m, ok := mountOf(v.dataDir); ok && m.path == v.dataDir {
		t.Errorf("the data dir %s is mounted on its own: it could not be renamed into quarantine", v.dataDir)
	}
	quarantine := path.Join(parent, "etcd-agent-quarantine")
	if q, _ := mountOf(quarantine); q.path != func() string { m, _ := mountOf(v.dataDir); return m.path }() {
		t.Errorf("the default quarantine dir %s is on mount %s, the data dir on another: rename(2) cannot cross mounts", quarantine, q.path)
	}

	if got := value("ETCD_AGENT_STATIC_POD_MANIFEST"); got != v.manifest {
		t.Errorf("ETCD_AGENT_STATIC_POD_MANIFEST %q, want %q", got, v.manifest)
	}
	wantHostMount("the kubelet manifests dir", path.Dir(v.manifest), true, true)

	certHosts := map[string]bool{}
	for _, name := range []string{"ETCD_AGENT_CACERT", "ETCD_AGENT_CERT", "ETCD_AGENT_KEY"} {
		p := value(name)
		if p == "" {
			t.Errorf("%s is not set: the agent needs etcd client TLS", name)
			continue
		}
		wantHostMount(name, p, false, false)
		m, _ := mountOf(p)
		switch {
		case v.certFilesOnly && (m.path != p || m.host != path.Join(v.certHostDir, path.Base(p))):
			t.Errorf("%s %s is on a mount of host %s at %s: want the file alone (%s), not its folder (the CA key, the members' keys)",
				name, p, m.host, m.path, path.Join(v.certHostDir, path.Base(p)))
		case !v.certFilesOnly && m.host != v.certHostDir:
			t.Errorf("%s %s is on a mount of host %s, want %s", name, p, m.host, v.certHostDir)
		}
		certHosts[m.host] = true
	}
	stateDir := value("ETCD_AGENT_STATE_DIR")
	if stateDir == "" {
		stateDir = "/var/lib/etcd-agent"
	}
	wantHostMount("the agent state dir", stateDir, true, true)
	if m, _ := mountOf("/tmp"); m.path != "/tmp" {
		t.Errorf("/tmp needs a writable mount with a read-only root filesystem")
	}

	// What lies under the data dir's parent but is none of the agent's: the
	// kubelet's credentials and every pod's Secrets and tokens, the
	// container runtimes' filesystems. Each is covered by an empty
	// read-only mount (docs/security.md).
	for _, secret := range hiddenHostDirs {
		if m, ok := mountOf(secret); ok && (m.host != "" || !m.readOnly) {
			t.Errorf("%s is visible to the agent through mount %s (host %q, read-only %v): cover it with an empty read-only mount", secret, m.path, m.host, m.readOnly)
		}
	}

	// Only these host folders, nothing broader.
	allowed := map[string]bool{parent: true, path.Dir(v.manifest): true, stateDir: true}
	for h := range certHosts {
		allowed[h] = true
	}
	for name, hp := range hostPaths {
		if !allowed[hp] {
			t.Errorf("volume %s mounts host path %s, which the agent does not need", name, hp)
		}
	}

	// Probes and metrics port.
	port := map[string]int32{}
	for _, p := range c.Ports {
		port[p.Name] = p.ContainerPort
	}
	if port["metrics"] != 9793 {
		t.Errorf("container port metrics = %d, want 9793", port["metrics"])
	}
	if addr := value("ETCD_AGENT_METRICS_ADDR"); addr != "" && addr != ":9793" {
		t.Errorf("ETCD_AGENT_METRICS_ADDR %q does not match the metrics port 9793", addr)
	}
	for _, pr := range []struct {
		name string
		p    *corev1.Probe
		path string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe: want httpGet %s on port metrics, got %+v", pr.name, pr.path, pr.p)
		}
	}

	// Resources.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() {
			t.Errorf("%s: want both a request and a limit", r)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s: request %s above limit %s", r, req.String(), lim.String())
		}
	}

	// securityContext: uid 0, nothing else.
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("container securityContext missing")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: the agent needs no privileged container")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities: want drop [ALL] and nothing added, got %+v", sc.Capabilities)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("runAsUser must be 0: the etcd data dir, manifests and PKI are root-owned 0700/0600")
	}
}

func checkServiceAndMonitor(t *testing.T, objs []*unstructured.Unstructured, ds appsv1.DaemonSet) {
	var svc corev1.Service
	if err := typed(find(objs, "Service", "etcd-agent"), &svc); err != nil {
		t.Fatal(err)
	}
	podLabels := ds.Spec.Template.Labels
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service selector %s=%s does not select the DaemonSet's pods (%v)", k, v, podLabels)
		}
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("DaemonSet selector %s=%s does not match its template labels", k, v)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("Service ports %+v: want one port named metrics targeting the container port metrics", svc.Spec.Ports)
	}
	sm := find(objs, "ServiceMonitor", "etcd-agent")
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%s does not select the Service (%v)", k, v, svc.Labels)
		}
	}
	nss, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if !slices.Contains(nss, svc.Namespace) {
		t.Errorf("ServiceMonitor namespaceSelector %v does not include %s", nss, svc.Namespace)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
		t.Errorf("ServiceMonitor endpoints %v: want one on port metrics", eps)
	}
	// The alerts select job="etcd-agent": the job label is the Service name
	// unless the ServiceMonitor sets jobLabel.
	if svc.Name != "etcd-agent" {
		t.Errorf("Service name %q: the alerts expect job=\"etcd-agent\"", svc.Name)
	}
	if jl, ok, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel"); ok && jl != "" {
		t.Errorf("ServiceMonitor sets jobLabel %q: the alerts expect job=\"etcd-agent\"", jl)
	}
}

// TestRBACRules: the shipped roles grant exactly what the agent needs (the
// lab test TestRBACEnforced checks the API server agrees).
func TestRBACRules(t *testing.T) {
	objs := renderVariant(t, variants[0])
	var role rbacv1.Role
	var crole rbacv1.ClusterRole
	if err := typed(find(objs, "Role", "etcd-agent"), &role); err != nil {
		t.Fatal(err)
	}
	if err := typed(find(objs, "ClusterRole", "etcd-agent"), &crole); err != nil {
		t.Fatal(err)
	}
	wantRole := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "create", "update"}}}
	if !reflect.DeepEqual(role.Rules, wantRole) {
		t.Errorf("Role rules:\n got %+v\nwant %+v", role.Rules, wantRole)
	}
	wantCluster := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !reflect.DeepEqual(crole.Rules, wantCluster) {
		t.Errorf("ClusterRole rules:\n got %+v\nwant %+v", crole.Rules, wantCluster)
	}
	for _, b := range []struct{ kind, role string }{{"RoleBinding", "Role"}, {"ClusterRoleBinding", "ClusterRole"}} {
		o := find(objs, b.kind, "etcd-agent")
		var rb rbacv1.RoleBinding // same shape as ClusterRoleBinding
		if err := typed(o, &rb); err != nil {
			t.Fatal(err)
		}
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "etcd-agent", Namespace: agentNamespace}}
		if rb.RoleRef.Kind != b.role || rb.RoleRef.Name != "etcd-agent" || !reflect.DeepEqual(rb.Subjects, want) {
			t.Errorf("%s: roleRef %+v subjects %+v; want %s etcd-agent bound to %+v", b.kind, rb.RoleRef, rb.Subjects, b.role, want)
		}
	}
}

// TestOpenShiftOverlay: the SCC admits the pod and nothing broader.
func TestOpenShiftOverlay(t *testing.T) {
	objs := renderVariant(t, variants[1])
	scc := find(objs, "SecurityContextConstraints", "etcd-agent").Object
	for field, want := range map[string]any{"allowPrivilegedContainer": false, "allowPrivilegeEscalation": false,
		"allowHostPID": false, "allowHostIPC": false, "allowHostNetwork": true, "allowHostDirVolumePlugin": true} {
		if scc[field] != want {
			t.Errorf("SCC %s = %v, want %v", field, scc[field], want)
		}
	}
	if drop, _, _ := unstructured.NestedStringSlice(scc, "requiredDropCapabilities"); !slices.Contains(drop, "ALL") {
		t.Errorf("SCC requiredDropCapabilities %v, want ALL", drop)
	}
	if add, _, _ := unstructured.NestedStringSlice(scc, "allowedCapabilities"); len(add) > 0 {
		t.Errorf("SCC allowedCapabilities %v, want none", add)
	}
	var ds appsv1.DaemonSet
	if err := typed(find(objs, "DaemonSet", "etcd-agent"), &ds); err != nil {
		t.Fatal(err)
	}
	vols, _, _ := unstructured.NestedStringSlice(scc, "volumes")
	for _, v := range ds.Spec.Template.Spec.Volumes {
		kind := "other"
		switch {
		case v.HostPath != nil:
			kind = "hostPath"
		case v.EmptyDir != nil:
			kind = "emptyDir"
		}
		if !slices.Contains(vols, kind) {
			t.Errorf("volume %s (%s) is not allowed by the SCC (%v)", v.Name, kind, vols)
		}
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if c.SecurityContext.SELinuxOptions == nil || c.SecurityContext.SELinuxOptions.Type != "spc_t" {
		t.Errorf("the OpenShift agent needs SELinux type spc_t to write etcd's host files")
	}
	var cr rbacv1.ClusterRole
	if err := typed(find(objs, "ClusterRole", "etcd-agent-scc"), &cr); err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"security.openshift.io"}, Resources: []string{"securitycontextconstraints"},
		ResourceNames: []string{"etcd-agent"}, Verbs: []string{"use"}}}
	if !reflect.DeepEqual(cr.Rules, want) {
		t.Errorf("etcd-agent-scc rules %+v, want %+v", cr.Rules, want)
	}
}

// The admission policies match the agent by its ServiceAccount's user name,
// written out: in every shipped variant it must be the rendered
// ServiceAccount's, or the policies match nothing and fail open.
func TestPoliciesMatchTheRenderedServiceAccount(t *testing.T) {
	for _, dir := range []string{"daemonset", "overlays/openshift", "overlays/management"} {
		objs, err := render(repoPath("deploy", dir))
		if err != nil {
			t.Fatalf("render %s: %v", dir, err)
		}
		var user string
		for _, o := range objs {
			if o.GetKind() == "ServiceAccount" {
				user = "system:serviceaccount:" + o.GetNamespace() + ":" + o.GetName()
			}
		}
		n := 0
		for _, o := range objs {
			if o.GetKind() != "ValidatingAdmissionPolicy" {
				continue
			}
			n++
			// The API server gathers a policy's parameters for every request
			// its resources match, before its matchConditions: with Fail, a
			// parameter cache not synced yet would deny everyone's request.
			// A policy without parameters denies the agent when in doubt.
			_, params, _ := unstructured.NestedMap(o.Object, "spec", "paramKind")
			fp, _, _ := unstructured.NestedString(o.Object, "spec", "failurePolicy")
			if want := map[bool]string{true: "Ignore", false: "Fail"}[params]; fp != want {
				t.Errorf("%s: policy %s (parameters %v) has failurePolicy %q, want %q", dir, o.GetName(), params, fp, want)
			}
			conds, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
			want := "request.userInfo.username == '" + user + "'"
			if len(conds) != 1 || conds[0].(map[string]any)["expression"] != want {
				t.Errorf("%s: policy %s matches %v, want the one condition %q", dir, o.GetName(), conds, want)
			}
		}
		want := 2 // the node scope and the lease scope
		if dir == "overlays/management" {
			want = 5 // and the member pods', the PVs' and the claims' scope
		}
		if n != want {
			t.Errorf("%s: %d admission policies, want %d", dir, n, want)
		}
	}
}
