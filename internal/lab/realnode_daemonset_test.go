package lab

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The real node runs the shipped DaemonSet changed only where a user's
// overlay changes it: the image, the node selector, and ETCD_AGENT_* env
// entries merged by name. Everything else (securityContext, mounts, probes,
// RBAC) is what deploy/daemonset ships.
func TestTheRealNodesDaemonSetIsTheShippedOneWithImageAndNodeSelector(t *testing.T) {
	deploy, err := filepath.Abs("../../deploy/daemonset")
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := filepath.Abs("../../bin/kubectl") // make tools
	if err != nil {
		t.Fatal(err)
	}
	objs, err := renderShippedDaemonSet(kubectl, deploy, t.TempDir(), "node3", map[string]string{"ETCD_AGENT_MANIFEST_RESTORE_DELAY": "10s"})
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := RenderKustomization(kubectl, deploy)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(shipped) {
		t.Fatalf("%d objects, the shipped kustomization has %d", len(objs), len(shipped))
	}
	ds, base := podSpecOf(t, objs), podSpecOf(t, shipped)
	container := ds["containers"].([]any)[0].(map[string]any)
	if container["image"] != AgentImage {
		t.Fatalf("image %v, want %s", container["image"], AgentImage)
	}
	sel := ds["nodeSelector"].(map[string]any)
	if sel["kubernetes.io/hostname"] != "node3" || sel["node-role.kubernetes.io/control-plane"] != "" {
		t.Fatalf("node selector %v: want the shipped one and kubernetes.io/hostname=node3", sel)
	}
	env := container["env"].([]any)
	i := slices.IndexFunc(env, func(e any) bool { return e.(map[string]any)["name"] == "ETCD_AGENT_MANIFEST_RESTORE_DELAY" })
	if i < 0 || env[i].(map[string]any)["value"] != "10s" {
		t.Fatalf("env %v: want the overlay's entry merged in", env)
	}
	// Undo the three changes: what is left must equal the shipped DaemonSet.
	container["image"] = "ghcr.io/etcd-agent/etcd-agent:latest"
	container["env"] = slices.Delete(env, i, i+1)
	delete(sel, "kubernetes.io/hostname")
	if !reflect.DeepEqual(ds, base) {
		t.Fatalf("the rendered DaemonSet differs from the shipped one beyond image, node selector and env:\n%v\n%v", ds, base)
	}
}

func podSpecOf(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			return o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		}
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}
