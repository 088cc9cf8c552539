package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// rbacUse is where the agent's code calls the API with a verb its RBAC
// grants: a file and a call in it. A grant with no row here, or a row whose
// call is gone from the code, fails TestRBACGrantsOnlyWhatCodeUses.
type rbacUse struct{ file, call string }

// rbacUses, by "group/resource/verb" (core group: "").
var rbacUses = map[string]rbacUse{
	// The recovery Lease: resourcelock.LeaseLock's Get, Create, Update.
	"coordination.k8s.io/leases/get":    {"internal/lease/record.go", "l.lock.Get("},
	"coordination.k8s.io/leases/create": {"internal/lease/record.go", "l.lock.Create("},
	"coordination.k8s.io/leases/update": {"internal/lease/record.go", "l.lock.Update("},
	// Its Node: the reporter, the request informer (list+watch by name),
	// the pins; a member pod's move lists Nodes as the scheduler would.
	"/nodes/get":   {"internal/nodereport/reporter.go", "Nodes().Get("},
	"/nodes/list":  {"internal/nodereport/watch.go", "Core().V1().Nodes().Informer()"},
	"/nodes/watch": {"internal/nodereport/watch.go", "Core().V1().Nodes().Informer()"},
	"/nodes/patch": {"internal/nodereport/reporter.go", "Nodes().Patch("},
	// Events through client-go's recorder (its sink creates and patches).
	"/events/create": {"internal/nodereport/reporter.go", "EventSink.Create("},
	"/events/patch":  {"internal/nodereport/reporter.go", "EventSink.Patch("},
	// Management nodes (deploy/overlays/management/rbac-management.yaml).
	"/pods/get":                      {"internal/agent/podstop.go", "Pods(cur.Namespace).Get("},
	"/pods/list":                     {"internal/agent/podmove_fit.go", `Pods("").List(`},
	"/pods/watch":                    {"internal/agent/pods.go", "pods.Informer().AddEventHandler("},
	"/pods/delete":                   {"internal/agent/podstop.go", "Pods(d.ns).Delete("},
	"/pods/patch":                    {"internal/controller/steward/steward.go", "Pods(p.Namespace).Patch("},
	"/namespaces/list":               {"internal/agent/podmove_fit.go", "Namespaces().List("},
	"/persistentvolumeclaims/get":    {"internal/agent/podstop.go", "PersistentVolumeClaims(pod.Namespace).Get("},
	"/persistentvolumeclaims/delete": {"internal/controller/steward/steward.go", "PersistentVolumeClaims(p.Namespace).Delete("},
	"/persistentvolumes/get":         {"internal/controller/steward/steward.go", "PersistentVolumes().Get("},
	"/persistentvolumes/list":        {"internal/agent/podmove.go", "PersistentVolumes().List("},
	"/persistentvolumes/patch":       {"internal/controller/steward/steward.go", "PersistentVolumes().Patch("},
	"apps/statefulsets/get":          {"internal/podfacts/statefulset.go", "StatefulSets(pod.Namespace).Get("},
	"/configmaps/get":                {"internal/clusterrecord/clusterrecord.go", "cms.Get("},
	"/configmaps/create":             {"internal/clusterrecord/clusterrecord.go", "cms.Create("},
	"/configmaps/update":             {"internal/clusterrecord/clusterrecord.go", "cms.Update("},
	// The node Leases of kube-node-lease (the steward's evidence).
	"coordination.k8s.io/leases/get@kube-node-lease": {"internal/controller/steward/steward.go", "Leases(nodeLeaseNamespace).Get("},
	// OpenShift: the pod's admission through its SCC (no API call).
	"security.openshift.io/securitycontextconstraints/use": {"deploy/overlays/openshift/scc.yaml", "kind: SecurityContextConstraints"},
}

// TestRBACGrantsOnlyWhatCodeUses: every verb the shipped roles grant the
// agent (base, management and OpenShift overlays) is one its code calls.
// (Roles for others, such as OpenShift's Prometheus, are not the agent's.)
func TestRBACGrantsOnlyWhatCodeUses(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range []string{"daemonset", "overlays/management", "overlays/openshift"} {
		objs, err := render(repoPath("deploy", dir))
		if err != nil {
			t.Fatalf("render %s: %v", dir, err)
		}
		agentRoles := map[string]bool{}
		for _, o := range objs {
			if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
				continue
			}
			var rb rbacv1.RoleBinding
			if err := typed(o, &rb); err != nil {
				t.Fatal(err)
			}
			for _, s := range rb.Subjects {
				if s.Kind == "ServiceAccount" && s.Name == "etcd-agent" && s.Namespace == agentNamespace {
					agentRoles[rb.RoleRef.Kind+"/"+rb.RoleRef.Name] = true
				}
			}
		}
		for _, o := range objs {
			// etcd-agent-member-writer is bound by the user, per hosted
			// namespace (rbac-management.yaml), so no binding renders.
			agents := agentRoles[o.GetKind()+"/"+o.GetName()] || o.GetName() == "etcd-agent-member-writer"
			if (o.GetKind() != "Role" && o.GetKind() != "ClusterRole") || !agents {
				continue
			}
			var r rbacv1.ClusterRole // same rules as a Role
			if err := typed(o, &r); err != nil {
				t.Fatal(err)
			}
			suffix := ""
			if o.GetNamespace() == "kube-node-lease" {
				suffix = "@kube-node-lease"
			}
			for _, rule := range r.Rules {
				scc := slices.Equal(rule.Resources, []string{"securitycontextconstraints"}) && slices.Equal(rule.ResourceNames, []string{"etcd-agent"})
				if len(rule.ResourceNames) > 0 && !scc || len(rule.NonResourceURLs) > 0 {
					t.Errorf("%s %s (%s): a rule with resourceNames or URLs: add it to this test", dir, o.GetName(), o.GetKind())
				}
				for _, g := range rule.APIGroups {
					for _, res := range rule.Resources {
						for _, v := range rule.Verbs {
							key := g + "/" + res + "/" + v + suffix
							used[key] = true
							if _, ok := rbacUses[key]; !ok {
								t.Errorf("%s: %s %s grants %s, which no code path of the agent uses (or add the call to rbacUses)", dir, o.GetKind(), o.GetName(), key)
							}
						}
					}
				}
			}
		}
	}
	for key, u := range rbacUses {
		if !used[key] {
			t.Errorf("rbacUses lists %s, which no shipped role grants: remove the row", key)
			continue
		}
		b, err := os.ReadFile(repoPath(u.file))
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		if !strings.Contains(string(b), u.call) {
			t.Errorf("%s is granted for %q in %s, which is no longer there: drop the verb from the role, or point the row at the call that needs it", key, u.call, u.file)
		}
	}
}
