// Package manifest reads and edits the etcd static-pod manifest that the
// kubelet runs on a control-plane node.
//
// The manifest is the source of truth for the local member's identity (name,
// data dir, URLs, TLS files): the agent never guesses them. It is also how the
// static-pod member runtime restarts etcd with new flags (SetFlags), e.g.
// --initial-cluster-state=existing after a rejoin.
//
// Values are read the way etcd itself reads them: command-line flags (Command
// then Args, "--flag=value" or "--flag value", one or two dashes) win over the
// ETCD_* environment variable of the same flag, and an empty environment
// variable counts as unset. Kubernetes "$(VAR)" references in command, args
// and env values are expanded as the kubelet does.
package manifest

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// EtcdContainerName is the container name that identifies the etcd container
// outright (kubeadm and OpenShift both use it).
const EtcdContainerName = "etcd"

// ErrNoEtcdContainer is returned when no container of the pod runs etcd.
var ErrNoEtcdContainer = errors.New("no etcd container")

// ErrAmbiguousEtcdContainer is returned when several containers run an etcd
// binary and none is named "etcd".
var ErrAmbiguousEtcdContainer = errors.New("ambiguous etcd container")

// ErrIncompleteIdentity is returned when the manifest does not say the
// member's name or data dir (or says it only through values the manifest
// alone cannot resolve).
var ErrIncompleteIdentity = errors.New("incomplete member identity")

// Member is the local etcd member as its static-pod manifest describes it.
// Paths are as seen inside the etcd container; use HostPath to translate them
// to the node's filesystem.
type Member struct {
	Name    string
	DataDir string
	// WALDir is --wal-dir (ETCD_WAL_DIR): a dedicated WAL dir, "" when the
	// WAL lives in DataDir's member/wal.
	WALDir string

	ClientURLs       []string // --advertise-client-urls
	PeerURLs         []string // --initial-advertise-peer-urls
	ListenClientURLs []string // --listen-client-urls
	MetricsURLs      []string // --listen-metrics-urls
	// ListenClientHTTPURLs: --listen-client-http-urls (etcd 3.6: HTTP
	// apart from gRPC).
	ListenClientHTTPURLs []string

	// Empty when the manifest does not set them (etcd then uses its defaults,
	// e.g. "new" for the cluster state).
	InitialCluster      string
	InitialClusterState string
	InitialClusterToken string

	// Client TLS (--cert-file, --key-file, --trusted-ca-file).
	CertFile, KeyFile, TrustedCAFile string
	// Peer TLS (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file).
	PeerCertFile, PeerKeyFile, PeerTrustedCAFile string

	ContainerName string
	// Image is the etcd container's image: its tag names the etcd version a
	// member started from this manifest runs (etcdversion.FromImage).
	Image string
	// GateWrapped: the etcd container runs etcd through the agent's start
	// gate ("etcd-agent gate ... -- etcd ..."), so every start, container
	// restarts included, is checked first.
	GateWrapped bool

	// HostMounts are the etcd container's hostPath mounts.
	HostMounts []HostMount

	// EnableV2: etcd 3.5's v2 API is on (--enable-v2, ETCD_ENABLE_V2; an
	// unreadable or runtime-only value counts as on). Its data is not in a
	// v3 snapshot, so such a member is never seeded from one.
	EnableV2 bool
}

// HostMount maps a directory inside the etcd container to the node's
// filesystem (a hostPath volume mount).
type HostMount struct {
	ContainerPath string
	HostPath      string
	ReadOnly      bool
}

// HostPath translates a path inside the etcd container (e.g. DataDir) to the
// node's filesystem through the deepest hostPath mount that contains it. It
// reports false when the path is not on a hostPath volume: the agent must not
// inspect or replace a directory it cannot locate on the node (a data dir
// mounted at /var/lib/etcd from /mnt/disks/etcd is "missing" at
// /var/lib/etcd on the host, which would look like a wiped member).
func (m Member) HostPath(containerPath string) (string, bool) {
	return TranslatePath(m.HostMounts, containerPath)
}

// TranslatePath maps a path inside a container to the node's filesystem
// through the deepest of mounts that contains it; false when none does.
func TranslatePath(mounts []HostMount, containerPath string) (string, bool) {
	p := path.Clean(containerPath)
	if !path.IsAbs(p) {
		return "", false
	}
	best := -1
	for i, mnt := range mounts {
		if !pathContains(mnt.ContainerPath, p) {
			continue
		}
		if best < 0 || len(mnt.ContainerPath) > len(mounts[best].ContainerPath) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	mnt := mounts[best]
	rel := strings.TrimPrefix(p, mnt.ContainerPath)
	return path.Join(mnt.HostPath, rel), true
}

// pathContains reports whether p is dir or below it (both clean and absolute).
func pathContains(dir, p string) bool {
	if dir == "/" || p == dir {
		return true
	}
	return strings.HasPrefix(p, dir+"/")
}

// LoadMember reads the static-pod manifest at path and returns its member.
func LoadMember(path string) (Member, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Member{}, fmt.Errorf("static pod manifest %s not found: %w (is the member runtime pointed at the kubelet's manifests dir, or was the manifest moved away to stop etcd?)", path, err)
	}
	if err != nil {
		return Member{}, fmt.Errorf("read static pod manifest %s: %w", path, err)
	}
	m, err := ParseMember(data)
	if err != nil {
		return Member{}, fmt.Errorf("static pod manifest %s: %w", path, err)
	}
	return m, nil
}

// ParseMember returns the member described by a static-pod manifest (YAML or
// JSON). It refuses to guess: a manifest without a member name or data dir is
// an error, not etcd's defaults ("default", "${name}.etcd").
func ParseMember(data []byte) (Member, error) {
	pod, err := decodePod(data)
	if err != nil {
		return Member{}, err
	}
	idx, err := findEtcdContainer(pod)
	if err != nil {
		return Member{}, err
	}
	return memberOf(pod.Spec.Containers[idx], hostMounts(pod, pod.Spec.Containers[idx]))
}

// MemberFromArgv is the member an etcd command line describes, with etcd's
// ETCD_* variables from environ ("KEY=value"): what the start gate, as
// etcd's wrapper, is about to exec. Paths are as this process sees them.
func MemberFromArgv(argv, environ []string) (Member, error) {
	c := corev1.Container{Name: EtcdContainerName}
	for _, tok := range argv {
		c.Command = append(c.Command, escapeExpansion(tok)) // the kubelet expanded them already
	}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "ETCD_") {
			c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: escapeExpansion(v)})
		}
	}
	return memberOf(c, nil)
}

func memberOf(c corev1.Container, mounts []HostMount) (Member, error) {
	cfg := newEtcdConfig(c)

	var errs []error
	get := func(flag string) string {
		v, err := cfg.Value(flag)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	m := Member{
		Name:                 get("name"),
		DataDir:              get("data-dir"),
		WALDir:               get("wal-dir"),
		ClientURLs:           SplitURLs(get("advertise-client-urls")),
		PeerURLs:             SplitURLs(get("initial-advertise-peer-urls")),
		ListenClientURLs:     SplitURLs(get("listen-client-urls")),
		MetricsURLs:          SplitURLs(get("listen-metrics-urls")),
		ListenClientHTTPURLs: SplitURLs(get("listen-client-http-urls")),
		InitialCluster:       get("initial-cluster"),
		InitialClusterState:  get("initial-cluster-state"),
		InitialClusterToken:  get("initial-cluster-token"),
		CertFile:             get("cert-file"),
		KeyFile:              get("key-file"),
		TrustedCAFile:        get("trusted-ca-file"),
		PeerCertFile:         get("peer-cert-file"),
		PeerKeyFile:          get("peer-key-file"),
		PeerTrustedCAFile:    get("peer-trusted-ca-file"),
		ContainerName:        c.Name,
		Image:                c.Image,
		GateWrapped:          etcdArgvStart(cfg.argv) > 0,
		HostMounts:           mounts,
		EnableV2:             cfg.BoolOn("enable-v2"),
	}
	if len(errs) > 0 {
		return Member{}, fmt.Errorf("%w: etcd container %q: %w", ErrIncompleteIdentity, c.Name, errors.Join(errs...))
	}
	if m.Name == "" {
		return Member{}, fmt.Errorf("%w: etcd container %q sets neither --name nor ETCD_NAME; refusing to guess the member name (etcd would use %q)", ErrIncompleteIdentity, c.Name, "default")
	}
	if m.DataDir == "" {
		return Member{}, fmt.Errorf("%w: etcd container %q sets neither --data-dir nor ETCD_DATA_DIR; refusing to guess (etcd would use %q relative to its working directory)", ErrIncompleteIdentity, c.Name, m.Name+".etcd")
	}
	return m, nil
}

// decodePod parses a manifest and checks that it is a core/v1 Pod.
func decodePod(data []byte) (*corev1.Pod, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse manifest as YAML: %w", err)
	}
	if s := strings.TrimSpace(string(j)); s == "null" || s == "" {
		return nil, errors.New("manifest is empty")
	}
	// Field names are matched exactly, as the kubelet's decoder does: a
	// key such as "Env" is no field of a Pod (encoding/json would take it
	// for "env", and SetFlags's edit, made on the document's exact keys,
	// would miss it).
	var pod corev1.Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &pod); err != nil {
		return nil, fmt.Errorf("manifest is not a Pod: %w", err)
	}
	if pod.Kind != "Pod" || pod.APIVersion != "v1" {
		return nil, fmt.Errorf("manifest is not a Pod (apiVersion %q, kind %q; want v1 Pod)", pod.APIVersion, pod.Kind)
	}
	return &pod, nil
}

// findEtcdContainer returns the index in pod.Spec.Containers of the container
// named "etcd" or, failing that, of the only container that runs an etcd
// binary. Init containers never count: they are not the member (e.g. the
// agent's own start gate).
func findEtcdContainer(pod *corev1.Pod) (int, error) {
	for i, c := range pod.Spec.Containers {
		if c.Name == EtcdContainerName {
			return i, nil
		}
	}
	var found []int
	for i, c := range pod.Spec.Containers {
		if runsEtcdBinary(c) {
			found = append(found, i)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		names := make([]string, 0, len(pod.Spec.Containers))
		for _, c := range pod.Spec.Containers {
			names = append(names, c.Name)
		}
		return 0, fmt.Errorf("%w: pod %q has no container named %q and none of its containers %q runs an etcd binary", ErrNoEtcdContainer, pod.Name, EtcdContainerName, names)
	default:
		names := make([]string, 0, len(found))
		for _, i := range found {
			names = append(names, pod.Spec.Containers[i].Name)
		}
		return 0, fmt.Errorf("%w: pod %q has no container named %q and containers %q all run etcd; name the member's container %q", ErrAmbiguousEtcdContainer, pod.Name, EtcdContainerName, names, EtcdContainerName)
	}
}

// runsEtcdBinary reports whether the container executes an etcd binary
// directly (command[0], or args[0] when the image entrypoint is used).
func runsEtcdBinary(c corev1.Container) bool {
	argv := append(append([]string{}, c.Command...), c.Args...)
	return len(argv) > 0 && path.Base(argv[etcdArgvStart(argv)]) == "etcd"
}

// hostMounts lists the container's mounts that come from hostPath volumes.
func hostMounts(pod *corev1.Pod, c corev1.Container) []HostMount {
	hostPaths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	var mounts []HostMount
	for _, vm := range c.VolumeMounts {
		hp, ok := hostPaths[vm.Name]
		// A subPathExpr is expanded by the kubelet at runtime; skip rather
		// than point at the wrong directory. A hostPath without an
		// absolute path (none at all: found by FuzzParseMember) is no
		// mount the kubelet would make: it must not map a data dir to ""
		// or to a path relative to the agent's working dir.
		if !ok || vm.SubPathExpr != "" || !path.IsAbs(vm.MountPath) || !path.IsAbs(hp) {
			continue
		}
		mounts = append(mounts, HostMount{
			ContainerPath: path.Clean(vm.MountPath),
			HostPath:      path.Join(hp, vm.SubPath),
			ReadOnly:      vm.ReadOnly,
		})
	}
	return mounts
}

// SplitURLs splits etcd's comma-separated URL lists.
func SplitURLs(s string) []string {
	var urls []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}
