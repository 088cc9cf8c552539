package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/spf13/cobra"
)

// printAnswer prints the agent's answer (last-recovery) and returns the
// exit code it means: 0 done (or planned, for a dry run), 1 failed, 2
// refused.
func printAnswer(cmd *cobra.Command, lr nodereport.LastRecovery, dryRun bool) error {
	b, _ := json.MarshalIndent(lr, "", "  ")
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	switch {
	case lr.Result == nodereport.ResultSucceeded, dryRun && plan.AnswersADryRun(lr.Reason):
		return nil
	case lr.Result == nodereport.ResultRefused:
		return recoverExit(2)
	}
	return recoverExit(1)
}

// recoverExit is recover's exit code for a refused (2) or failed (1) recovery.
type recoverExit int

func (e recoverExit) Error() string { return fmt.Sprintf("recovery not done (exit %d)", int(e)) }
func (e recoverExit) ExitCode() int { return int(e) }

func newRecoverCmd(g *globalFlags) *cobra.Command {
	c := agent.Config{}
	var dryRun bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Ask this node's agent to rejoin its member (same rules as automatic healing); --dry-run only plans",
		Long: `recover sets the etcd-agent.io/recover=rejoin annotation (and recover-dry-run)
on this node's Node object, waits for the agent's answer in
etcd-agent.io/last-recovery and prints it. Exit 0 succeeded (or planned, with
--dry-run), 1 failed, 2 refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kc, err := c.KubeClient(nil)
			if err != nil {
				return err
			}
			lr, err := nodereport.RequestRecovery(cmd.Context(), kc, c.NodeName, nodereport.Request{Action: nodereport.ActionRejoin, DryRun: dryRun}, timeout)
			if err != nil {
				return err
			}
			return printAnswer(cmd, lr, dryRun)
		},
	}
	cmd.Flags().StringVar(&c.NodeName, "node-name", "", "this Kubernetes node's name (default $NODE_NAME)")
	cmd.Flags().StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes API (default: in-cluster config)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only plan: report what would be done and why, change nothing")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait for the agent's answer")
	cmd.PreRun = func(*cobra.Command, []string) {
		if c.NodeName == "" {
			c.NodeName = envOr("NODE_NAME", "")
		}
	}
	return cmd
}
