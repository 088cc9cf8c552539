package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-agent/etcd-agent/docs"
	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/runbook"
	"github.com/etcd-agent/etcd-agent/internal/survivor"
)

// podsClusterStatus is clusterStatus for a StatefulSet member (pod, as
// "namespace/name") that this node's agent serves: the cluster is the one
// of the member's latest report; every other member's agent is the agent
// on its pod's node (the management cluster's API answers: only the hosted
// cluster lost its majority), asked for that pod's report. It never acts;
// the commands are docs/management-nodes.md's "Majority lost".
func podsClusterStatus(ctx context.Context, out io.Writer, c agent.Config, f clusterFlags, pod, output string) error {
	ns, _, ok := strings.Cut(pod, "/")
	if !ok {
		return fmt.Errorf("--pod %q: want namespace/name of a member pod this node's agent serves", pod)
	}
	st, err := agent.PodMembersStatus(c.StateDir)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(st, func(s agent.PodMemberStatus) bool { return s.Pod == pod })
	switch {
	case i < 0:
		return fmt.Errorf("the agent's state dir %s has no report of pod %s (is it bound to this node?)", c.StateDir, pod)
	case st[i].Error != "":
		return fmt.Errorf("pod %s's latest report: %s", pod, st[i].Error)
	}
	rep := st[i].Report
	members, cluster := rep.Observation.Members, rep.Observation.ClusterID
	if len(members) == 0 {
		return fmt.Errorf("pod %s's latest report lists no member (%s)", pod, rep.Observation.MemberListError)
	}
	tlsCfg, err := c.TLSConfig()
	if err != nil {
		return err
	}
	kc, kerr := c.KubeClient(nil) // (without it, only --agent-url reaches the other agents)
	var ev []survivor.Member
	for _, m := range members {
		e := evidence(ctx, m, cluster, tlsCfg, rep.MajorityLost)
		var r *agent.Report
		// Its pod: --pod for this node's member; for another, the pod
		// named as the member (a StatefulSet's --name=$(POD_NAME)), once
		// the agent serving that pod reports on this very member.
		mpod := ns + "/" + m.Name
		if m.Name == rep.Observation.Local.Name {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			agent.AddLogPosition(rctx, &rep)
			cancel()
			agent.AddDataDirHash(ctx, &rep, c.StateDir, f.note)
			r, mpod = &rep, pod
		} else if u, why := podAgentURL(ctx, kc, kerr, ns, m.Name, f); u == "" {
			e.Note = why
		} else if r, err = fetchReport(ctx, u, url.Values{"pod": {mpod}}); err != nil {
			e.Note = err.Error()
		}
		if r != nil {
			fromAgent(&e, *r, cluster, time.Now())
			if e.Note == "" {
				e.Pod = mpod
			}
		}
		e.DeclaredLost = slices.Contains(f.lost, m.Name)
		ev = append(ev, e)
	}
	now := time.Now()
	ans := clusterAnswer{Choice: survivor.Choose(ev, !rep.MajorityLost, now)}
	if ans.Choice.Survivor != nil {
		texts, err := runbook.Scripts(docs.ManagementNodesFile, docs.ManagementNodes)
		if err == nil {
			ans.Steps, err = survivor.PodCommands(ans.Choice, texts, survivor.Etcdctl{CACert: c.CACert, Cert: c.Cert, Key: c.Key})
		}
		if err != nil {
			ans.CommandsError = err.Error()
		}
	}
	if err := writeClusterAnswer(out, ans, now, podsRestoreIntro, output); err != nil {
		return err
	}
	if rep.MajorityLost {
		return statusExit(3)
	}
	if code := rep.ExitCode(); code != 0 {
		return statusExit(code)
	}
	return nil
}

// podsRestoreIntro is what printCluster says before a StatefulSet
// member's restore scripts.
var podsRestoreIntro = fmt.Sprintf("\nNothing is done for you. First bring members back if you can (a member that returns with its data rejoins by itself).\n"+
	"Then run each script where it says, in this order (%s, \"Majority lost\"): first with DRY_RUN=1 (its checks only; "+
	"it ends before it changes anything), then without. The survivor's start gate uses the request only at its next start within 15 minutes, "+
	"and only while the cluster has no quorum; the agents then rejoin the other members, one at a time (keep them running).\n", docs.ManagementNodesFile)

// podAgentURL is where the agent serving ns/pod answers: --agent-url
// POD=URL, else http://<its node's InternalIP>:<--agent-port> (the
// DaemonSet runs on the host network); "" and why when neither is known.
func podAgentURL(ctx context.Context, kc kubernetes.Interface, kerr error, ns, pod string, f clusterFlags) (string, string) {
	if u, ok := f.agentURLs[pod]; ok {
		return u, ""
	}
	if kc == nil {
		return "", fmt.Sprintf("its agent: no --agent-url %s=URL, and no Kubernetes API to find its node (%v)", pod, kerr)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := kc.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Sprintf("its agent: its pod: %v", err)
	}
	if p.Spec.NodeName == "" {
		return "", "its agent: its pod is not bound to a node"
	}
	n, err := kc.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Sprintf("its agent: its node %s: %v", p.Spec.NodeName, err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && f.agentPort != 0 {
			return "http://" + net.JoinHostPort(a.Address, strconv.Itoa(f.agentPort)), ""
		}
	}
	return "", fmt.Sprintf("its agent: node %s has no InternalIP (or no --agent-port)", p.Spec.NodeName)
}
