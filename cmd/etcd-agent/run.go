package main

import (
	"time"

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
	cmd.Flags().BoolVar(&c.Profiling, "profiling", false, "also serve Go's /debug/pprof/ on --metrics-addr (CPU and heap profiles of the agent)")
	cmd.Flags().StringVar(&c.MemberSource, "member-source", agent.MemberSourceStaticPod,
		"where the members come from: static-pod (the manifest at --static-pod-manifest) or pods (every etcd pod bound to --node-name that matches --pod-selector; each member's state in <state-dir>/members/<namespace>_<pod>, which its start gate must be given as --state-dir)")
	cmd.Flags().StringVar(&c.PodSelector, "pod-selector", "app=etcd", "with --member-source=pods: the label selector of etcd member pods")
	cmd.Flags().DurationVar(&c.NodeLostGrace, "node-lost-grace", 5*time.Minute,
		"with --member-source=pods: how long a member pod's node must be NotReady with its node Lease unrenewed before an agent with a healthy member of the same cluster removes the member, keeps its PV (Retain), deletes its claim and force-deletes the pod so that it is rescheduled (UC1)")
	cmd.Flags().IntVar(&c.ProbeWorkers, "probe-workers", 8, "with --member-source=pods: how many members are observed at once (a bounded pool; the others wait their turn)")
	cmd.Flags().DurationVar(&c.PeerProbeInterval, "peer-probe-interval", time.Minute,
		"with --member-source=pods: while every member of a cluster serves without alarms, routine polls send no request and reuse the last full probe for this long, as long as each member's liveness stream (a require-leader watch) stays open; a stream that ends (the member exits, loses its connection or its leader) makes the next poll, at once, a full probe; before any step the agent probes every member; 0: every poll probes every member")
	cmd.Flags().StringVar(&c.KubeletPodsDir, "kubelet-pods-dir", "/var/lib/kubelet/pods", "with --member-source=pods: where the kubelet mounts pods' volumes (CSI PVs are found there; mount it with HostToContainer propagation)")
	return cmd
}
