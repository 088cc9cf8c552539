package main

import (
	"context"
	"os/signal"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/spf13/cobra"
)

func newGateCmd(g *globalFlags) *cobra.Command {
	c := agent.Config{}
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "gate",
		Short: "Start gate for the etcd static pod's init container: hold etcd back from a data dir it must not start on",
		Long: `gate exits 0 at once when the member's data dir is healthy. When it is missing,
empty, corrupt or foreign while the member still exists in the cluster under its
old ID, it waits until the agent has prepared the data dir: etcd must never start
on empty data under an old member ID (raft would have lost its vote and log).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			c.Log = log
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return agent.Gate(ctx, c, timeout)
		},
	}
	addMemberFlags(cmd.Flags(), &c)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: wait as long as it takes, like any init container)")
	return cmd
}
