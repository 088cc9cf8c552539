package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/etcd-agent/etcd-agent/internal/lab/realnode"
	"github.com/spf13/cobra"
)

// labNSFD is the lab's network namespace, passed by `etcd-agent-lab up` as the first
// extra file (internal/lab/realnode.go).
const labNSFD = 3

func newLabRealNodeCmd(g *globalFlags) *cobra.Command {
	var nodeDir string
	c := &cobra.Command{
		Use:    "real-node",
		Short:  "Be a lab node run by the real kubelet and containerd, in namespaces of its own (started by `etcd-agent-lab up --real-node`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg, err := realnode.Load(nodeDir)
			if err != nil {
				return err
			}
			labNS := os.NewFile(labNSFD, "lab-netns")
			if labNS == nil {
				return errors.New("no lab network namespace on fd 3: start this from `etcd-agent-lab up --real-node`")
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return realnode.Run(ctx, cfg, labNS, log)
		},
	}
	c.Flags().StringVar(&nodeDir, "node-dir", "", "the node's folder (holds realnode.json)")
	_ = c.MarkFlagRequired("node-dir")
	return c
}
