package deploy

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// TestScopePoliciesKnowTheAgentsMemberLabels: the member-scope and
// claim-scope policies let the agent touch only pods and claims with the
// member labels, and those must be the labels the DaemonSet's
// ETCD_AGENT_POD_SELECTOR selects, or the agent is denied its own members
// (a narrower policy) or may touch pods it never selects (a wider one).
func TestScopePoliciesKnowTheAgentsMemberLabels(t *testing.T) {
	objs, err := render(repoPath("deploy", "overlays", "management"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := typed(find(objs, "DaemonSet", "etcd-agent"), &ds); err != nil {
		t.Fatal(err)
	}
	var selector string
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "ETCD_AGENT_POD_SELECTOR" {
			selector = e.Value
		}
	}
	set, err := labels.ConvertSelectorToLabelsMap(selector)
	if err != nil || len(set) == 0 {
		t.Fatalf("ETCD_AGENT_POD_SELECTOR %q: want key=value labels a policy can hold a pod to (%v)", selector, err)
	}
	want := celMap(set)
	for _, name := range []string{"etcd-agent-member-scope", "etcd-agent-claim-scope"} {
		p := find(objs, "ValidatingAdmissionPolicy", name)
		vars, _, _ := unstructured.NestedSlice(p.Object, "spec", "variables")
		got := ""
		for _, v := range vars {
			if m := v.(map[string]any); m["name"] == "memberLabels" {
				got, _ = m["expression"].(string)
			}
		}
		if strings.TrimSpace(got) != want {
			t.Errorf("policy %s: variable memberLabels %q, want %q (the DaemonSet's ETCD_AGENT_POD_SELECTOR %q)", name, got, want, selector)
		}
	}
}

// celMap writes set as a CEL map literal, keys sorted.
func celMap(set labels.Set) string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("'%s': '%s'", k, set[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
