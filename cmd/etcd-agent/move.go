package main

import (
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/spf13/cobra"
)

func newMoveCmd() *cobra.Command {
	c := agent.Config{}
	var target string
	var dryRun bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "move NODE|NAMESPACE/POD --to TARGET",
		Short: "Move the static-pod etcd member of NODE (add first), or a StatefulSet member pod, to TARGET (--dry-run only plans)",
		Long: `move sets etcd-agent.io/move-to=TARGET (and recover-dry-run) on NODE's Node
object and waits for the agent's answer in etcd-agent.io/last-recovery.

TARGET must be Ready and run the agent, with an etcd static-pod manifest for a
new member named after it (its etcd is held by the start gate until the agent
prepares its data dir). NODE's agent checks that every voter is healthy and the
snapshot store answers, then asks TARGET's agent to add its member as a
learner (seeded), promote it, and only then stops and removes NODE's member:
the cluster never has fewer healthy voters than before.

NAMESPACE/POD moves a StatefulSet's member pod (one identity, one pod): its
agent (--member-source=pods) sets etcd-agent.io/move-to=TARGET on the pod,
checks that every voter of a cluster of three or more is healthy, TARGET is
Ready, runs no member of the cluster and has a free PV for the pod's claim, and
the snapshot store answers; then it stops the member, puts a snapshot of it in
the store, removes it, keeps its PV (Retain), reserves the free PV on TARGET
for the claim and deletes the claim and the pod. The StatefulSet re-creates
both there, and TARGET's agent adds the member as a learner seeded from the
stored snapshot and promotes it. The answer is TARGET's agent's.

Exit 0 moved (or planned, with --dry-run), 1 failed, 2 refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kc, err := c.KubeClient(nil)
			if err != nil {
				return err
			}
			var lr nodereport.LastRecovery
			if ns, pod, ok := strings.Cut(args[0], "/"); ok {
				lr, err = nodereport.RequestPodMove(cmd.Context(), kc, ns, pod, target, dryRun, timeout)
			} else {
				lr, err = nodereport.RequestMove(cmd.Context(), kc, args[0], target, dryRun, timeout)
			}
			if err != nil {
				return err
			}
			return printAnswer(cmd, lr, dryRun)
		},
	}
	cmd.Flags().StringVar(&target, "to", "", "the node to move the member to")
	cmd.Flags().StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes API (default: in-cluster config)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only plan: report what would be done and why, change nothing")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "how long to wait for the agent's answer")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}
