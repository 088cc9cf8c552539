package supervisor

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/manifest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodIP is the loopback address the lab kubelet gives a pod: derived from its
// namespace and name (and the lab's salt), so a StatefulSet member keeps its
// address when it moves to another node, as it keeps its DNS name in a real
// cluster; peers can be addressed without DNS. 127.64.0.0/10 stays clear of
// the node addresses (127.0.0.0/16).
func PodIP(salt, namespace, name string) string {
	h := sha256.Sum256([]byte(salt + "/" + namespace + "/" + name))
	return fmt.Sprintf("127.%d.%d.%d", 64+int(h[0])%128, h[1], 1+int(h[2])%254)
}

func podFields(pod *corev1.Pod, ip, hostIP string) manifest.PodFields {
	return manifest.PodFields{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID), NodeName: pod.Spec.NodeName,
		ServiceAccount: pod.Spec.ServiceAccountName, PodIP: ip, HostIP: hostIP}
}

// volumes maps the pod's volumes to node folders: hostPath as is, a PVC to
// the path of the local PV bound to it, emptyDir to a folder of the pod's.
func (k *kubelet) volumes(ctx context.Context, pod *corev1.Pod) (map[string]string, error) {
	dirs := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.HostPath != nil:
			dirs[v.Name] = v.HostPath.Path
		case v.EmptyDir != nil:
			d := filepath.Join(k.cfg.PodsDir, string(pod.UID), "volumes", v.Name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
			dirs[v.Name] = d
		case v.PersistentVolumeClaim != nil:
			p, err := k.localPVPath(ctx, pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			dirs[v.Name] = p
		case v.Secret != nil:
			d, err := k.secretVolume(ctx, pod, v.Name, v.Secret)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			dirs[v.Name] = d
		default:
			return nil, fmt.Errorf("volume %s: only hostPath, emptyDir, secret and PVCs on local PVs run in the lab", v.Name)
		}
	}
	return dirs, nil
}

// SecretVolumeDir is where a pod's Secret volume's files are on the node:
// as a real kubelet lays them out, <pods dir>/<pod UID>/volumes/
// kubernetes.io~secret/<volume>.
func SecretVolumeDir(podsDir string, pod *corev1.Pod, volume string) string {
	return filepath.Join(podsDir, string(pod.UID), "volumes", "kubernetes.io~secret", volume)
}

// secretVolume writes the Secret's keys (or its items, at their paths)
// into the pod's Secret volume dir, each file written whole and renamed
// into place (a container restarted meanwhile never reads half a key).
func (k *kubelet) secretVolume(ctx context.Context, pod *corev1.Pod, volume string, src *corev1.SecretVolumeSource) (string, error) {
	s, err := k.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, src.SecretName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	files := map[string][]byte{}
	for key, data := range s.Data {
		files[key] = data
	}
	if len(src.Items) > 0 {
		files = map[string][]byte{}
		for _, it := range src.Items {
			data, ok := s.Data[it.Key]
			if !ok {
				return "", fmt.Errorf("secret %s/%s has no key %s", pod.Namespace, src.SecretName, it.Key)
			}
			files[it.Path] = data
		}
	}
	d := SecretVolumeDir(k.cfg.PodsDir, pod, volume)
	for name, data := range files {
		p := filepath.Join(d, filepath.Clean("/"+name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return "", err
		}
		if err := os.WriteFile(p+".tmp", data, 0o600); err != nil {
			return "", err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return "", err
		}
	}
	return d, nil
}

// localPVPath is the node folder of the local PV bound to claim; it must be
// this node's (the scheduler's volume binding put the pod here for it).
func (k *kubelet) localPVPath(ctx context.Context, ns, claim string) (string, error) {
	pvc, err := k.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("PVC %s/%s is %s, not bound yet", ns, claim, pvc.Status.Phase)
	}
	pv, err := k.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if !pvOnNode(pv, k.cfg.NodeName) {
		return "", fmt.Errorf("PV %s is not on node %s (its node affinity says so)", pv.Name, k.cfg.NodeName)
	}
	var p string
	switch {
	case pv.Spec.Local != nil:
		p = pv.Spec.Local.Path
	case pv.Spec.HostPath != nil:
		p = pv.Spec.HostPath.Path
	default:
		return "", fmt.Errorf("PV %s is neither local nor hostPath", pv.Name)
	}
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return "", fmt.Errorf("PV %s: its path %s is not a folder on node %s", pv.Name, p, k.cfg.NodeName)
	}
	return p, nil
}

// pvOnNode reports whether the PV's node affinity admits the node by its
// hostname label (all lab nodes share one filesystem, so a folder that
// exists proves nothing). A PV without node affinity is anywhere.
func pvOnNode(pv *corev1.PersistentVolume, node string) bool {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil {
		return true
	}
	for _, term := range a.Required.NodeSelectorTerms {
		ok := len(term.MatchExpressions) > 0
		for _, e := range term.MatchExpressions {
			if e.Key != "kubernetes.io/hostname" || e.Operator != corev1.NodeSelectorOpIn || !slices.Contains(e.Values, node) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// apiLaunch runs an API pod's container: its env resolved with the pod's
// fields, $(VAR)s expanded, and every absolute path under one of its volume
// mounts rewritten to the node folder behind it (processes share the host's
// filesystem; there is no mount namespace in the lab).
func apiLaunch(c corev1.Container, fields manifest.PodFields, volumeDirs map[string]string) (launchSpec, error) {
	env, err := manifest.RuntimeEnv(c, fields)
	if err != nil {
		return launchSpec{}, err
	}
	var mounts []manifest.HostMount
	for _, vm := range c.VolumeMounts {
		d, ok := volumeDirs[vm.Name]
		if !ok {
			return launchSpec{}, fmt.Errorf("volume mount %s: no such volume", vm.Name)
		}
		if vm.SubPathExpr != "" {
			return launchSpec{}, fmt.Errorf("volume mount %s: subPathExpr is not supported in the lab", vm.Name)
		}
		mounts = append(mounts, manifest.HostMount{ContainerPath: filepath.Clean(vm.MountPath), HostPath: filepath.Join(d, vm.SubPath)})
	}
	ls := launchSpec{dir: translateArg(mounts, c.WorkingDir), ownEnv: true}
	for _, a := range env.Argv(c) {
		ls.argv = append(ls.argv, translateArg(mounts, a))
	}
	for _, kv := range env.Environ() {
		name, val, _ := strings.Cut(kv, "=")
		ls.env = append(ls.env, name+"="+translateArg(mounts, val))
	}
	return ls, nil
}

// translateArg rewrites a path ("/var/lib/etcd/x") or a flag's path value
// ("--data-dir=/var/lib/etcd/x") under a mount to the node's folder.
func translateArg(mounts []manifest.HostMount, a string) string {
	prefix, val := "", a
	if i := strings.IndexByte(a, '='); i >= 0 && strings.HasPrefix(a, "-") {
		prefix, val = a[:i+1], a[i+1:]
	}
	if hp, ok := manifest.TranslatePath(mounts, val); ok && strings.HasPrefix(val, "/") {
		return prefix + hp
	}
	return a
}
