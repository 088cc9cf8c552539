package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// EtcdVersionBinaries maps `lab up --etcd-version` to the binary under the
// bin dir (make tools builds all three).
var EtcdVersionBinaries = map[string]string{"3.5": "etcd-3.5", "3.6": "etcd", "3.7": "etcd-3.7"}

// EtcdBinaryForVersion is binDir's etcd of minor version v ("3.5", "3.6", "3.7").
func EtcdBinaryForVersion(binDir, v string) (string, error) {
	name, ok := EtcdVersionBinaries[strings.TrimPrefix(v, "v")]
	if !ok {
		return "", fmt.Errorf("etcd version %q: want 3.5, 3.6 or 3.7", v)
	}
	return filepath.Join(binDir, name), nil
}

// etcdVersions caches `<binary> --version` per binary path: every manifest
// the lab renders asks, and a binary does not change under a running lab.
var etcdVersions sync.Map // path → string

var etcdVersionLine = regexp.MustCompile(`(?m)^etcd Version:\s*v?(\d+\.\d+\.\d+\S*)\s*$`)

// parseEtcdVersion reads the version from `etcd --version`'s output
// ("etcd Version: 3.5.36").
func parseEtcdVersion(out string) (string, error) {
	m := etcdVersionLine.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no \"etcd Version: x.y.z\" line in %q", strings.TrimSpace(out))
	}
	return m[1], nil
}

// EtcdVersionOf is the version binary reports (cached per path).
func EtcdVersionOf(binary string) (string, error) {
	if v, ok := etcdVersions.Load(binary); ok {
		return v.(string), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "--version").Output() // #nosec G204: the lab's own etcd binary
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", binary, err)
	}
	v, err := parseEtcdVersion(string(out))
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", binary, err)
	}
	etcdVersions.Store(binary, v)
	return v, nil
}

// etcdImageFor is the image kubeadm would name for version v: the agent
// reads a member's etcd version from this tag, so it must be the binary's.
func etcdImageFor(v string) string { return "registry.k8s.io/etcd:" + v + "-0" }

// EtcdImageOf is the container image tag that tells the truth about binary.
func EtcdImageOf(binary string) (string, error) {
	v, err := EtcdVersionOf(binary)
	if err != nil {
		return "", err
	}
	return etcdImageFor(v), nil
}

// nodeEtcdBinary is the etcd node n's member runs: its own, else the lab's.
func (s *Spec) nodeEtcdBinary(n Node) string {
	if n.EtcdBinary != "" {
		return n.EtcdBinary
	}
	return s.etcdBinary()
}

// SetMemberVersion makes node's member run binary (another etcd version):
// its static-pod manifest (in place, or the copy StopMember moved aside)
// gets binary as etcd's command (after the start gate's "--" when etcd runs
// through it) and the image tag of binary's version, written atomically:
// the node's supervisor, like a kubelet, restarts a pod whose manifest
// changed, so this is a member upgrade (or downgrade) the way an operator
// does it on a kubeadm node.
func (l *Lab) SetMemberVersion(node, binary string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	if n.Member == "" {
		return fmt.Errorf("node %s has no etcd member", node)
	}
	abs, err := filepath.Abs(binary)
	if err != nil {
		return err
	}
	image, err := EtcdImageOf(abs)
	if err != nil {
		return err
	}
	path, b, err := readEtcdManifest(*n)
	if err != nil {
		return err
	}
	out, err := rewriteEtcdBinary(b, abs, image)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	n.EtcdBinary = abs // later manifests of this node (MoveMember, ...) keep it
	if err := l.Spec.save(); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, out, 0o644)
}

// rewriteEtcdBinary sets the etcd container's binary and image in the pod
// manifest b. The binary is command[0], or the word after "--" when the
// start gate wraps etcd ("etcd-agent gate ... -- etcd ...").
func rewriteEtcdBinary(b []byte, binary, image string) ([]byte, error) {
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return nil, err
	}
	found := false
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != "etcd" {
			continue
		}
		at := 0
		if dd := slices.Index(c.Command, "--"); dd >= 0 {
			at = dd + 1
		}
		if at >= len(c.Command) {
			return nil, fmt.Errorf("etcd container has no etcd binary in its command %q", c.Command)
		}
		c.Command[at] = binary
		c.Image = image
		found = true
	}
	if !found {
		return nil, errors.New("no etcd container")
	}
	return yaml.Marshal(&pod)
}

// ClusterVersion is the cluster version the members agree on (the
// "etcdcluster" field of GET /version; "not_decided" before the leader
// decided), asked of the first member that answers.
func (l *Lab) ClusterVersion(ctx context.Context) (string, error) {
	cfg, err := l.EtcdTLSConfig()
	if err != nil {
		return "", err
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	if cfg != nil {
		hc.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	defer hc.CloseIdleConnections()
	var errs []error
	for _, u := range l.Spec.ClientURLs() {
		v, err := versionAt(ctx, hc, u)
		if err == nil {
			return v, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("cluster version: %w", errors.Join(errs...))
}

func versionAt(ctx context.Context, hc *http.Client, clientURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s/version: %s", clientURL, resp.Status)
	}
	return parseClusterVersion(body)
}

// parseClusterVersion reads etcd's /version body
// ({"etcdserver":"3.6.16","etcdcluster":"3.6.0"}).
func parseClusterVersion(body []byte) (string, error) {
	var v struct {
		Cluster string `json:"etcdcluster"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("/version %q: %w", body, err)
	}
	if v.Cluster == "" {
		return "", fmt.Errorf("/version %q has no etcdcluster", body)
	}
	return v.Cluster, nil
}
