// Package membersource finds the etcd members an agent serves on its node:
// the static-pod manifest (one member), or every etcd pod bound to the node
// that matches a selector (management nodes: many members of many
// clusters, docs/design.md §11). A static-pod manifest is a Pod, so one parser
// (package manifest) reads both; this package adds what only an API pod
// needs: the downward API, and volumes resolved through PVC → PV → host
// path.
package membersource

import (
	"errors"
	"fmt"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ClusterLabel names a member pod's etcd cluster when its controller does
// not (default: "<namespace>/<owning StatefulSet>").
const ClusterLabel = "etcd-agent.io/cluster"

// DefaultKubeletPodsDir is where the kubelet mounts pods' volumes; a CSI
// volume's files are under <pods dir>/<pod UID>/volumes/kubernetes.io~csi/<PV>/mount.
const DefaultKubeletPodsDir = "/var/lib/kubelet/pods"

// ErrNotReady: the pod cannot be read as a member yet (no IP yet, its PVC
// not bound yet); asking again later may succeed.
var ErrNotReady = errors.New("member pod not ready to be read")

// Volumes looks up the objects behind a pod's PVC volumes.
type Volumes interface {
	PVC(namespace, name string) (*corev1.PersistentVolumeClaim, error)
	PV(name string) (*corev1.PersistentVolume, error)
}

// PodMember is one etcd member pod on this node, as the agent serves it.
type PodMember struct {
	// Key is "<namespace>/<pod name>": unique on a node, stable across the
	// pod's re-creations (a StatefulSet member keeps its name).
	Key       string
	Namespace string
	Name      string
	UID       types.UID
	// Image is the etcd container's image: its tag names the etcd version
	// the member runs once its pod is re-created (etcdversion.FromImage).
	Image string
	// Cluster names the member's etcd cluster: the ClusterLabel, else
	// "<namespace>/<owning controller>".
	Cluster  string
	Identity watchdog.Identity // DataDir is the host path
	// Endpoints are the gate's --endpoints: the other members' client URLs.
	Endpoints []string
	// GateWrapped: etcd runs through the start gate; GateStateDir is the
	// host path of the gate's --state-dir ("" when not wrapped or unset).
	GateWrapped  bool
	GateStateDir string
	// GateMemberSource is the gate's --member-source ("pods": it waits for
	// the agent's word before a first bootstrap).
	GateMemberSource string
	// PVC and PV hold the data dir ("" for a hostPath volume); PVCUID
	// tells one incarnation of the claim from the next.
	PVC, PV string
	PVCUID  types.UID
	// Node is the node the pod is bound to; Controller the pod's owner
	// (its StatefulSet), nil when none.
	Node       string
	Controller *metav1.OwnerReference
	// DataDirPerPod: the data dir's host path depends on the pod's UID (a
	// CSI volume, mounted under the kubelet's pods dir): it moves when the
	// pod is re-created.
	DataDirPerPod bool
	// DataDirVolumeRoot: a volume (a claim or a hostPath, with or without
	// a subPath) is mounted right at etcd's --data-dir: the data dir is
	// never renamed (a PV's path could not be mounted again; a held pod's
	// bind mount would follow the rename), only its member/ set aside
	// inside it.
	DataDirVolumeRoot bool
	// MoveSeed is the PV's etcd-agent.io/move-seed: a pod move reserved it
	// and names the stored snapshot its learner is seeded from.
	MoveSeed string
	// ClientTLS is the client cert the pod's start gate reaches the
	// cluster with (its --cacert, --cert, --key), on the node: the agent
	// reaches this member with it (each cluster may have a CA of its own).
	// Zero when the gate has none: the agent's own flags then.
	ClientTLS ClientTLS
}

// FromPod reads pod as a member. kubeletPodsDir "" is DefaultKubeletPodsDir.
func FromPod(pod *corev1.Pod, vols Volumes, kubeletPodsDir string) (PodMember, error) {
	pm := PodMember{Key: pod.Namespace + "/" + pod.Name, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Cluster: ClusterOf(pod), Node: pod.Spec.NodeName,
		Controller: metav1.GetControllerOf(pod)}
	if pod.Status.PodIP == "" {
		return pm, fmt.Errorf("%w: pod %s has no IP yet", ErrNotReady, pm.Key)
	}
	fields := manifest.PodFields{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID), NodeName: pod.Spec.NodeName,
		ServiceAccount: pod.Spec.ServiceAccountName, PodIP: pod.Status.PodIP, HostIP: pod.Status.HostIP}
	m, c, argv, err := manifest.MemberOfPod(pod, fields)
	if err != nil {
		return pm, err
	}
	pm.Image = c.Image
	if len(m.PeerURLs) == 0 || len(m.ClientURLs) == 0 {
		return pm, fmt.Errorf("pod %s: etcd sets no --initial-advertise-peer-urls or --advertise-client-urls", pm.Key)
	}
	r := resolver{pod: pod, c: c, vols: vols, podsDir: kubeletPodsDir}
	if r.podsDir == "" {
		r.podsDir = DefaultKubeletPodsDir
	}
	dataDir, vol, err := r.hostPath(m.DataDir)
	if err != nil {
		return pm, fmt.Errorf("pod %s: the data dir %s: %w", pm.Key, m.DataDir, err)
	}
	pm.PVC, pm.PV, pm.PVCUID, pm.DataDirPerPod, pm.MoveSeed = vol.pvc, vol.pv, vol.pvcUID, vol.perPod, vol.moveSeed
	pm.DataDirVolumeRoot = vol.atRoot // a claim's or a hostPath's: a held pod's bind mount would follow a rename
	pm.Identity = watchdog.Identity{Name: m.Name, DataDir: dataDir, ClientURL: m.ClientURLs[0], PeerURLs: m.PeerURLs, DataDirMountRoot: vol.atRoot, EnableV2: m.EnableV2}
	if m.WALDir != "" {
		walDir, walVol, err := r.hostPath(m.WALDir)
		if err != nil {
			return pm, fmt.Errorf("pod %s: the WAL dir %s (--wal-dir): %w", pm.Key, m.WALDir, err)
		}
		if walVol.pvc != vol.pvc || walVol.perPod != vol.perPod {
			// The pod runtime, the steward and a move follow one claim per
			// member: a WAL on a claim of its own would be left behind.
			return pm, fmt.Errorf("pod %s: the WAL dir %s is on claim %q, the data dir on claim %q: a member's WAL on a claim of its own is not supported; "+
				"keep --wal-dir on the data dir's volume", pm.Key, m.WALDir, walVol.pvc, vol.pvc)
		}
		pm.Identity.WALDir, pm.Identity.WALDirMountRoot = walDir, walVol.atRoot
	}
	if eps, ok := manifest.GateFlag(argv, "endpoints"); ok {
		pm.Endpoints = manifest.SplitURLs(eps)
	}
	g, err := readGate(r, argv, m.GateWrapped, pm.Key)
	if err != nil {
		return pm, err
	}
	pm.GateWrapped, pm.GateStateDir, pm.GateMemberSource = g.Wrapped, g.StateDir, g.MemberSource
	if pm.ClientTLS, err = gateClientTLS(r, argv, pm.Key); err != nil {
		return pm, err
	}
	return pm, nil
}

// gateClientTLS finds the start gate's --cacert, --cert and --key on the
// node.
func gateClientTLS(r resolver, argv []string, key string) (ClientTLS, error) {
	var t ClientTLS
	for _, f := range []struct {
		flag string
		dst  *NodeFile
	}{{"cacert", &t.CACert}, {"cert", &t.Cert}, {"key", &t.Key}} {
		v, ok := manifest.GateFlag(argv, f.flag)
		if !ok || v == "" {
			continue
		}
		_, vol, err := r.hostPath(v)
		if err != nil {
			return ClientTLS{}, fmt.Errorf("pod %s: the start gate's --%s %s, which the agent reaches this member with: %w", key, f.flag, v, err)
		}
		*f.dst = NodeFile{Root: vol.root, Rel: vol.rel}
	}
	return t, nil
}

// Gate is how a member pod starts etcd: through the agent's start gate
// (Wrapped), reading StateDir on the node, with --member-source
// MemberSource.
type Gate struct {
	Wrapped      bool
	StateDir     string
	MemberSource string
}

// GateOf reads only pod's start gate: it needs neither the pod's IP nor
// its data dir's claim (the steward judges the template of a pod whose
// claim it deleted).
func GateOf(pod *corev1.Pod) (Gate, error) {
	key := pod.Namespace + "/" + pod.Name
	fields := manifest.PodFields{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID), NodeName: pod.Spec.NodeName,
		ServiceAccount: pod.Spec.ServiceAccountName, PodIP: pod.Status.PodIP, HostIP: pod.Status.HostIP}
	m, c, argv, err := manifest.MemberOfPod(pod, fields)
	if err != nil {
		return Gate{}, err
	}
	return readGate(resolver{pod: pod, c: c, vols: noClaims{}}, argv, m.GateWrapped, key)
}

// readGate reads the start gate's flags from the etcd container's argv;
// its --state-dir must be on a hostPath volume.
func readGate(r resolver, argv []string, wrapped bool, key string) (Gate, error) {
	g := Gate{Wrapped: wrapped}
	g.MemberSource, _ = manifest.GateFlag(argv, "member-source")
	sd, ok := manifest.GateFlag(argv, "state-dir")
	if !ok {
		return g, nil
	}
	host, vol, err := r.hostPath(sd)
	switch {
	case errors.Is(err, errOnAClaim) || err == nil && vol.pvc != "":
		return g, fmt.Errorf("pod %s: the start gate's --state-dir %s is on PVC %s: it must be the node's (a hostPath), or it is lost with the data", key, sd, vol.pvc)
	case err != nil:
		return g, fmt.Errorf("pod %s: the start gate's --state-dir %s: %w", key, sd, err)
	}
	g.StateDir = host
	return g, nil
}

// noClaims answers no claim: GateOf needs only hostPath volumes.
type noClaims struct{}

var errOnAClaim = errors.New("on a claim")

func (noClaims) PVC(string, string) (*corev1.PersistentVolumeClaim, error) { return nil, errOnAClaim }
func (noClaims) PV(string) (*corev1.PersistentVolume, error)               { return nil, errOnAClaim }

// ClusterOf names the etcd cluster of a member pod.
func ClusterOf(pod *corev1.Pod) string {
	if c := pod.Labels[ClusterLabel]; c != "" {
		return c
	}
	if o := metav1.GetControllerOf(pod); o != nil {
		return pod.Namespace + "/" + o.Name
	}
	return pod.Namespace + "/" + pod.Name
}

type resolver struct {
	pod     *corev1.Pod
	c       corev1.Container
	vols    Volumes
	podsDir string
}

type volumeRef struct {
	pvc, pv string
	pvcUID  types.UID
	perPod  bool // under the kubelet's pods dir, by pod UID
	// atRoot: the path is a volume mount's own root in the container
	// (with or without a subPath).
	atRoot bool
	// moveSeed: the PV's nodereport.AnnotationMoveSeed (a pod move
	// reserved it).
	moveSeed string
	// root is the volume's node folder, rel the path inside it (its
	// subPath's and the mount's), for a file read inside the volume only.
	root, rel string
}

// hostPath maps a path inside the etcd container to the node through the
// deepest volume mount that holds it.
func (r resolver) hostPath(containerPath string) (string, volumeRef, error) {
	p := path.Clean(containerPath)
	if !path.IsAbs(p) {
		return "", volumeRef{}, fmt.Errorf("not an absolute path")
	}
	var best *corev1.VolumeMount
	for i, vm := range r.c.VolumeMounts {
		mp := path.Clean(vm.MountPath)
		if (p == mp || mp == "/" || len(p) > len(mp) && p[:len(mp)+1] == mp+"/") && (best == nil || len(mp) > len(path.Clean(best.MountPath))) {
			best = &r.c.VolumeMounts[i]
		}
	}
	if best == nil {
		return "", volumeRef{}, fmt.Errorf("not on any volume of container %s: the agent cannot find it on the node", r.c.Name)
	}
	if best.SubPathExpr != "" {
		return "", volumeRef{}, fmt.Errorf("volume mount %s uses subPathExpr, which the agent does not resolve", best.Name)
	}
	if leavesVolume(best.SubPath) {
		// Defence in depth: the API server refuses it.
		return "", volumeRef{}, fmt.Errorf("volume mount %s: subPath %q leaves its volume", best.Name, best.SubPath)
	}
	i := slices.IndexFunc(r.pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == best.Name })
	if i < 0 {
		return "", volumeRef{}, fmt.Errorf("volume mount %s: the pod has no such volume", best.Name)
	}
	root, ref, err := r.volumeRoot(r.pod.Spec.Volumes[i])
	if err != nil {
		return "", ref, err
	}
	rel := p[len(path.Clean(best.MountPath)):]
	// Right at the mount, with or without a subPath: the container's mount
	// root (a bind mount of <volume>/<subPath> itself), which the container
	// keeps if the dir is removed on the node.
	ref.atRoot = rel == ""
	ref.root, ref.rel = root, strings.TrimPrefix(path.Join("/", best.SubPath, rel), "/")
	if ref.rel == "" {
		ref.rel = "."
	}
	return filepath.Join(root, ref.rel), ref, nil
}

// leavesVolume: a subPath that is absolute or has a ".." element.
func leavesVolume(subPath string) bool {
	return path.IsAbs(subPath) || slices.Contains(strings.Split(subPath, "/"), "..")
}

// volumeRoot is the node folder behind a volume: a hostPath as is; a PVC
// through its bound PV (local or hostPath: the PV's path; CSI, e.g. an LVM
// local volume: the folder the kubelet mounts it on for this pod); a
// Secret, a ConfigMap (HyperShift's etcd CA) or a projected volume (certs)
// where the kubelet writes it for this pod.
func (r resolver) volumeRoot(v corev1.Volume) (string, volumeRef, error) {
	perPod := func(plugin string) (string, volumeRef, error) {
		return filepath.Join(r.podsDir, string(r.pod.UID), "volumes", plugin, v.Name), volumeRef{perPod: true}, nil
	}
	switch {
	case v.HostPath != nil:
		return v.HostPath.Path, volumeRef{}, nil
	case v.Secret != nil:
		return perPod("kubernetes.io~secret")
	case v.ConfigMap != nil:
		return perPod("kubernetes.io~configmap")
	case v.Projected != nil:
		return perPod("kubernetes.io~projected")
	case v.PersistentVolumeClaim != nil:
	default:
		return "", volumeRef{}, fmt.Errorf("volume %s is neither hostPath, a Secret, a ConfigMap, a projected volume nor a PVC", v.Name)
	}
	ref := volumeRef{pvc: v.PersistentVolumeClaim.ClaimName}
	pvc, err := r.vols.PVC(r.pod.Namespace, ref.pvc)
	if err != nil {
		return "", ref, fmt.Errorf("PVC %s: %w", ref.pvc, err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", ref, fmt.Errorf("%w: PVC %s is %s, not bound", ErrNotReady, ref.pvc, pvc.Status.Phase)
	}
	ref.pv, ref.pvcUID = pvc.Spec.VolumeName, pvc.UID
	pv, err := r.vols.PV(ref.pv)
	if err != nil {
		return "", ref, fmt.Errorf("PV %s: %w", ref.pv, err)
	}
	ref.moveSeed = pv.Annotations[nodereport.AnnotationMoveSeed]
	switch {
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path, ref, nil
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path, ref, nil
	case pv.Spec.CSI != nil:
		ref.perPod = true
		return filepath.Join(r.podsDir, string(r.pod.UID), "volumes", "kubernetes.io~csi", pv.Name, "mount"), ref, nil
	}
	return "", ref, fmt.Errorf("PV %s is neither local, hostPath nor CSI: the agent cannot find its files on the node", pv.Name)
}
