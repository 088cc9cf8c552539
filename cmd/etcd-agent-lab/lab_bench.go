package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/bench"
	"github.com/spf13/cobra"
)

func newLabBenchCmd(g *globalFlags, dir *string) *cobra.Command {
	var sizes []string
	var binDir string
	var runs int
	var modes []string
	var move bool
	var etcdVersion, linkRate string
	var etcdTLS bool
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure the agent's heal against the bare etcd rejoin on the same db, per db size, and print a table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			var bytes []int64
			for _, s := range sizes {
				b, err := parseSize(s)
				if err != nil {
					return err
				}
				bytes = append(bytes, b)
			}
			var rateLimit int64
			if linkRate != "" && etcdTLS {
				return fmt.Errorf("--learner-link-rate meters plain peer traffic through proxies: not with --etcd-tls")
			}
			if linkRate != "" {
				if rateLimit, err = parseSize(linkRate); err != nil {
					return fmt.Errorf("--learner-link-rate: %w", err)
				}
			}
			agent, err := agentBinary()
			if err != nil {
				return err
			}
			if binDir, err = filepath.Abs(binDir); err != nil {
				return err
			}
			o := bench.Options{
				Lab:   lab.Options{Dir: *dir, Nodes: 3, BinDir: binDir, AgentBinary: agent, EtcdTLS: etcdTLS, Log: log},
				Sizes: bytes, Runs: runs, Modes: modes, LearnerLinkRate: rateLimit, Out: cmd.OutOrStdout(), Log: log,
			}
			if etcdVersion != "" {
				if o.Lab.EtcdBinary, err = lab.EtcdBinaryForVersion(binDir, etcdVersion); err != nil {
					return err
				}
			}
			if move {
				if !cmd.Flags().Changed("modes") {
					o.Modes = nil // the move's own: seed (from the store), follower, raft
				}
				_, err = bench.Move(cmd.Context(), o)
				return err
			}
			_, err = bench.Run(cmd.Context(), o)
			return err
		},
	}
	c.Flags().StringSliceVar(&sizes, "sizes", []string{"100MB", "500MB"}, "db sizes to measure (e.g. 100MB,500MB,1GB)")
	c.Flags().IntVar(&runs, "runs", 3, "runs per size (medians are reported)")
	c.Flags().BoolVar(&move, "move", false, "measure `etcd-agent move` (UC3) per mode instead: time, bytes sent to the new member, raft snapshots")
	c.Flags().StringSliceVar(&modes, "modes", []string{"raft", "seed"}, "agent rejoin modes to measure side by side: raft, seed, follower (seed mode streaming the db a second time off a follower: --seed-from-backup=false; with --move: --seed-from-store=false), seed-copy-after (seed mode copying the backup after the add: --seed-copy-during-stream=false)")
	c.Flags().StringVar(&binDir, "bin-dir", defaultBinDir(), "folder with etcd and kube-apiserver (from `make tools`)")
	c.Flags().StringVar(&etcdVersion, "etcd-version", "", "etcd minor the members run: 3.5, 3.6 or 3.7 (default: bin/etcd, 3.6)")
	c.Flags().BoolVar(&etcdTLS, "etcd-tls", false, "the members serve client and peer TLS with client cert auth, as every production cluster does (the stream then goes through etcd's TLS client port)")
	c.Flags().StringVar(&linkRate, "learner-link-rate", "", "bytes per second the healed member's peer link receives (e.g. 64MB: raft snapshots to the learner take time, as on a real network); through peer proxies, so plain http only")
	return c
}

func parseSize(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for suffix, m := range map[string]int64{"GB": 1 << 30, "MB": 1 << 20, "KB": 1 << 10} {
		if strings.HasSuffix(u, suffix) {
			u, mult = strings.TrimSuffix(u, suffix), m
			break
		}
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q: want e.g. 100MB or 1GB", s)
	}
	return n * mult, nil
}

func newLabBenchScaleCmd(g *globalFlags, dir *string) *cobra.Command {
	var binDir string
	var members []int
	var window, poll time.Duration
	var replicas int
	var profileDir string
	c := &cobra.Command{
		Use:   "bench-scale",
		Short: "Measure the agent's idle CPU and RSS with 1, 10, 30 ... local members (management node, pod members), and print a table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			agent, err := agentBinary()
			if err != nil {
				return err
			}
			if binDir, err = filepath.Abs(binDir); err != nil {
				return err
			}
			_, err = bench.Scale(cmd.Context(), bench.ScaleOptions{
				Lab:     lab.Options{Dir: *dir, BinDir: binDir, AgentBinary: agent, Log: log},
				Members: members, Window: window, PollInterval: poll, Replicas: replicas, ProfileDir: profileDir, Out: cmd.OutOrStdout(), Log: log,
			})
			return err
		},
	}
	c.Flags().IntSliceVar(&members, "members", []int{1, 10, 30}, "local member counts to measure (each a member of its own hosted cluster)")
	c.Flags().IntVar(&replicas, "replicas", 1, "members per hosted cluster: 1 (one node) or 3 (three nodes, one member of each cluster per node; node1's agent is measured)")
	c.Flags().StringVar(&profileDir, "profile-dir", "", "save a CPU profile of the measured agent over each window here (agent-<members>.pprof)")
	c.Flags().DurationVar(&window, "window", time.Minute, "how long CPU time is measured at each count")
	c.Flags().DurationVar(&poll, "poll-interval", 5*time.Second, "the agent's --poll-interval while measured (the product's default)")
	c.Flags().StringVar(&binDir, "bin-dir", defaultBinDir(), "folder with etcd and the Kubernetes binaries (from `make tools`)")
	return c
}
