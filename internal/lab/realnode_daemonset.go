package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// ShippedDaemonSet is the DaemonSet as deploy/daemonset ships it.
const ShippedDaemonSet = "etcd-agent"

// realNodeOverlay is the kustomize overlay a user writes for the shipped
// deploy/daemonset (`kustomize edit set image`, a node selector): only the
// image and the node selector change. The stand-ins are control-plane
// Nodes too, but no kubelet of theirs would run the pod.
// env (Options.RealNodeAgentEnv) are ETCD_AGENT_* settings, merged by name
// into the container's env as the DaemonSet's comments tell users to.
func realNodeOverlay(deployDir, node string, env map[string]string) string {
	envPatch := ""
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envPatch += fmt.Sprintf("                - {name: %s, value: %q}\n", k, env[k])
	}
	if envPatch != "" {
		envPatch = fmt.Sprintf(`- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: %s, namespace: %s}
    spec:
      template:
        spec:
          containers:
          - name: etcd-agent
            env:
%s`, ShippedDaemonSet, AgentNamespace, envPatch)
	}
	return fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: ghcr.io/etcd-agent/etcd-agent
  newName: etcd-agent.invalid/etcd-agent
  newTag: lab
patches:
- target: {kind: DaemonSet, name: %s}
  patch: |-
    - op: add
      path: /spec/template/spec/nodeSelector/kubernetes.io~1hostname
      value: %s
%s`, deployDir, ShippedDaemonSet, node, envPatch)
}

// renderShippedDaemonSet builds the overlay over deployDir with kubectl's
// kustomize (what `kubectl apply -k` uses).
func renderShippedDaemonSet(kubectl, deployDir, overlayDir, node string, env map[string]string) ([]*unstructured.Unstructured, error) {
	if err := os.MkdirAll(overlayDir, 0o755); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(overlayDir, deployDir) // kustomize takes no absolute base
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(overlayDir, "kustomization.yaml"), []byte(realNodeOverlay(rel, node, env)), 0o644); err != nil {
		return nil, err
	}
	return RenderKustomization(kubectl, overlayDir)
}

// RenderKustomization is `kubectl kustomize dir` (the kustomize built into
// the kubectl `make tools` builds, what `kubectl apply -k` runs): the
// objects a cluster would receive. Not kustomize's Go API: the product's
// go.mod carries no lab-only dependency (issue 42).
func RenderKustomization(kubectl, dir string) ([]*unstructured.Unstructured, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %v: %s", dir, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("kubectl kustomize %s: %w", dir, err)
		}
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &o.Object); err != nil {
			return nil, fmt.Errorf("kubectl kustomize %s: %w", dir, err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}

// deployDir is the repo's deploy/daemonset, beside bin/.
func (s *Spec) deployDir() string {
	return filepath.Join(filepath.Dir(filepath.Clean(s.BinDir)), "deploy", "daemonset")
}

// applyShippedDaemonSet makes the real node a kubeadm control-plane node
// (its role label and taint, which its kubelet may not set itself) and
// applies the shipped DaemonSet with server-side apply. Kinds this API
// does not serve (the Prometheus Operator's) are left out, with a log line.
func (l *Lab) applyShippedDaemonSet(ctx context.Context, n Node) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	patch := `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}},"spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}]}}`
	if _, err := kc.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label node %s as control plane: %w", n.Name, err)
	}
	objs, err := renderShippedDaemonSet(filepath.Join(l.Spec.BinDir, "kubectl"), l.Spec.deployDir(), filepath.Join(l.Spec.Dir, "deploy"), n.Name, l.Spec.RealNode.AgentEnv)
	if err != nil {
		return err
	}
	rc, err := l.RESTConfig()
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kc.Discovery()))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			l.log.Info("not applied: the lab's API does not serve this kind", zap.String("kind", gvk.String()), zap.String("name", o.GetName()))
			continue
		}
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dc.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dc.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "etcd-agent-lab", Force: true}); err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	b, _ := yaml.Marshal(objs)
	return os.WriteFile(filepath.Join(l.Spec.Dir, "deploy", "applied.yaml"), b, 0o644)
}

// waitDaemonSetReady waits until the shipped DaemonSet has its pod ready on
// the real node.
func (l *Lab) waitDaemonSetReady(ctx context.Context, timeout time.Duration) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	var ds *appsv1.DaemonSet
	for {
		ds, err = kc.AppsV1().DaemonSets(AgentNamespace).Get(ctx, ShippedDaemonSet, metav1.GetOptions{})
		if err == nil && ds.Status.DesiredNumberScheduled == 1 && ds.Status.NumberReady == 1 && ds.Status.ObservedGeneration == ds.Generation {
			return nil
		}
		if time.Now().After(deadline) {
			pods, _ := kc.CoreV1().Pods(AgentNamespace).List(ctx, metav1.ListOptions{})
			var phases []string
			for _, p := range pods.Items {
				phases = append(phases, fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, podWaitReason(p)))
			}
			return fmt.Errorf("DaemonSet %s not ready after %s (status %+v, err %v, pods %v)", ShippedDaemonSet, timeout, statusOf(ds), err, phases)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func statusOf(ds *appsv1.DaemonSet) any {
	if ds == nil {
		return nil
	}
	return ds.Status
}

func podWaitReason(p corev1.Pod) string {
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			return cs.Name + ": " + w.Reason + " " + w.Message
		}
	}
	return ""
}
