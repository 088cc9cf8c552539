package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/demo"
	"github.com/spf13/cobra"
)

func newLabDemoCmd(g *globalFlags, dir *string) *cobra.Command {
	o := demo.Options{}
	var binDir, dbSize string
	c := &cobra.Command{
		Use:   "demo",
		Short: "Bring up the lab with agents, load the API, wipe a member's data dir and show the heal (exit 0 only if it healed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if dbSize != "" {
				if o.DBBytes, err = parseSize(dbSize); err != nil {
					return fmt.Errorf("--db-size: %w", err)
				}
				if o.DBBytes > 1<<30 {
					return fmt.Errorf("--db-size %s: at most 1GB (the lab's etcd runs with its default 2 GiB quota)", dbSize)
				}
			}
			if l, err := lab.Open(*dir, log); err == nil {
				_ = l.Down(cmd.Context()) // a previous demo's lab
			}
			agent, err := agentBinary()
			if err != nil {
				return err
			}
			if binDir, err = filepath.Abs(binDir); err != nil {
				return err
			}
			o.Lab = lab.Options{Dir: *dir, Nodes: o.Lab.Nodes, BinDir: binDir, AgentBinary: agent, Log: log}
			o.Out = cmd.OutOrStdout()
			res, l, err := demo.Run(cmd.Context(), o)
			if err != nil {
				return fmt.Errorf("demo: %w (stop what started with `etcd-agent-lab down --dir %s`)", err, *dir)
			}
			res.Print(cmd.OutOrStdout())
			fmt.Fprintf(cmd.OutOrStdout(), "\nThe lab keeps running: etcd-agent-lab status --dir %s; stop it with etcd-agent-lab down --dir %s (or make demo-down)\n", l.Spec.Dir, l.Spec.Dir)
			if !res.Healed {
				return errors.New("the heal did not succeed")
			}
			return nil
		},
	}
	c.Flags().IntVar(&o.Lab.Nodes, "nodes", 3, "number of nodes")
	c.Flags().StringVar(&o.Victim, "victim", "node2", "node whose data dir is wiped")
	c.Flags().DurationVar(&o.Baseline, "baseline", 5*time.Second, "API load before the fault, for the latency baseline")
	c.Flags().DurationVar(&o.Timeout, "timeout", 3*time.Minute, "how long the heal may take")
	c.Flags().StringVar(&binDir, "bin-dir", defaultBinDir(), "folder with etcd and kube-apiserver (from `make tools`)")
	c.Flags().StringVar(&dbSize, "db-size", "", "fill the db to about this size first (e.g. 500MB, at most 1GB: etcd's 2 GiB quota), so the timeline shows the long steps' progress and ETA")
	return c
}
