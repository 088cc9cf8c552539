package lab

import (
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"
)

// PlaceNewMember gives node (added by AddNode, no member yet) the etcd
// static-pod manifest of a new member named after it, with its own URLs,
// as the provisioning of a new control-plane node would: joining an
// existing cluster, through the start gate (which holds it until the
// agent has added it and prepared its data dir: `etcd-agent move`).
func (l *Lab) PlaceNewMember(node string) (*Node, error) {
	n, m, err := l.newMember(node)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(n.NodeDir, ".etcd.yaml.tmp")
	if err := os.WriteFile(tmp, m, 0o644); err != nil {
		return nil, err
	}
	l.log.Info("placed a new member's manifest", zap.String("node", node), zap.String("peerURL", n.PeerURL))
	return n, os.Rename(tmp, n.EtcdManifest())
}

// WriteNewMemberManifest is PlaceNewMember with the manifest written to
// path instead of the kubelet's dir: the manifest a person places by hand
// (UC3 without the agent) once the member is added.
func (l *Lab) WriteNewMemberManifest(node, path string) (*Node, error) {
	n, m, err := l.newMember(node)
	if err != nil {
		return nil, err
	}
	return n, os.WriteFile(path, m, 0o644)
}

// newMember names node's new member, records its URLs and renders its
// manifest.
func (l *Lab) newMember(node string) (*Node, []byte, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return nil, nil, err
	}
	if n.Member != "" {
		return nil, nil, fmt.Errorf("node %s already has member %s", node, n.Member)
	}
	if l.Spec.PeerProxy {
		return nil, nil, fmt.Errorf("a new member: labs with a peer proxy are not supported")
	}
	withMember, err := l.newNamedNode(n.Name, n.IP, true)
	if err != nil {
		return nil, nil, err
	}
	n.Member, n.ClientURL, n.PeerURL, n.DataDir = withMember.Member, withMember.ClientURL, withMember.PeerURL, withMember.DataDir
	n.MetricsURL = withMember.MetricsURL
	m, err := etcdPodManifest(l.Spec, *n, initialCluster(l.Spec.Nodes), "existing", l.Spec.ClusterToken, l.gateCommand(*n), l.Spec.EtcdTLS)
	if err != nil {
		return nil, nil, err
	}
	return n, m, l.Spec.save()
}

// MemberMovedAway records that node's member now serves elsewhere (after
// `etcd-agent move`): the lab no longer counts it as node's.
func (l *Lab) MemberMovedAway(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	n.Member, n.ClientURL, n.PeerURL, n.PeerListenURL, n.MetricsURL = "", "", "", "", ""
	return l.Spec.save()
}
