package main

import (
	"os"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/spf13/pflag"
)

// addMemberFlags are the flags that say which member this agent looks after
// and how to reach the cluster; shared by run, status, recover and gate.
func addMemberFlags(fs *pflag.FlagSet, c *agent.Config) {
	fs.StringVar(&c.NodeName, "node-name", os.Getenv("NODE_NAME"), "this Kubernetes node's name (default $NODE_NAME)")
	fs.StringVar(&c.StaticPodManifest, "static-pod-manifest", "/etc/kubernetes/manifests/etcd.yaml", "the etcd static-pod manifest the member's identity is read from")
	fs.StringVar(&c.MemberName, "member-name", "", "override: the etcd member name")
	fs.StringVar(&c.DataDir, "data-dir", "", "override: the member's data dir on this node")
	fs.StringVar(&c.ClientURL, "client-url", "", "override: the member's client URL")
	fs.StringSliceVar(&c.PeerURLs, "peer-urls", nil, "override: the member's peer URLs")
	fs.StringSliceVar(&c.Endpoints, "endpoints", nil, "other members' client URLs, to reach the cluster while the local member is down (learned ones are added)")
	fs.StringVar(&c.CACert, "cacert", "", "CA bundle to verify etcd's serving certificates")
	fs.StringVar(&c.Cert, "cert", "", "client certificate for etcd (mTLS)")
	fs.StringVar(&c.Key, "key", "", "client key for etcd (mTLS)")
	fs.DurationVar(&c.PollInterval, "poll-interval", 5*time.Second, "how often to observe (data dir events trigger an observation at once)")
	fs.DurationVar(&c.GracePeriod, "grace-period", 60*time.Second, "how long a member must be continuously unhealthy before it is lost")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes API (default: in-cluster config)")
	fs.StringVar(&c.StateDir, "state-dir", "/var/lib/etcd-agent", "the agent's own state (journal, learned endpoints, status)")
}
