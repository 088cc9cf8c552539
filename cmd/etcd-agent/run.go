package main

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/spf13/cobra"
)

func newRunCmd(g *globalFlags) *cobra.Command {
	c := agent.Config{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: observe the local etcd member, serve metrics, heal when it is lost",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			defer log.Sync()
			c.Log = log
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return agent.Run(ctx, c)
		},
	}
	addMemberFlags(cmd.Flags(), &c)
	addHealFlags(cmd.Flags(), &c)
	cmd.Flags().StringVar(&c.MetricsAddr, "metrics-addr", ":9793", "address for /metrics, /healthz and /readyz")
	return cmd
}
