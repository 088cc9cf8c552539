package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/gate"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// startStopWatch starts the stop watch beside the etcd about to be exec'd,
// or says why not; etcd starts either way.
func startStopWatch(c gate.Config, argv, environ []string, logFormat string, log *zap.Logger) {
	self, err := os.Executable()
	if err != nil {
		log.Warn("start gate: no stop watch (this binary's path)", zap.Error(err))
		return
	}
	args, why := gate.StopWatchArgs(c, argv, environ, self, os.Getpid(), logFormat)
	if args == nil {
		log.Info("start gate: no stop watch: " + why)
		return
	}
	if err := gate.StartStopWatch(args); err != nil {
		log.Warn("start gate: no stop watch", zap.Error(err))
	}
}

func newGateCmd(g *globalFlags) *cobra.Command {
	c := agent.Config{}
	var timeout time.Duration
	fastStop := true
	cmd := &cobra.Command{
		Use:   "gate [flags] [-- etcd [etcd flags]]",
		Short: "Start gate: hold etcd back from a data dir it must not start on (etcd's wrapper, or an init container)",
		Long: `gate passes at once when the member's data dir is healthy and its own. It holds
etcd back while the data dir is missing, empty, corrupt, foreign or another
member's and the member has served before under its ID (the agent pins the
cluster and member IDs in --state-dir and on the Node the first time it sees the
member serve), until the agent has prepared the data dir for a new member ID.
"The cluster cannot be asked" means hold for a member that has served before:
only a member never seen may bootstrap.

As etcd's wrapper (recommended: it covers every start, container restarts
included, which an init container does not):

  etcd-agent gate --state-dir=/var/lib/etcd-agent [TLS flags] -- etcd --name=... --data-dir=...

reads the member from the etcd command line after "--", checks, and then execs
etcd in its place (same PID). Without "--" it reads the member from
--static-pod-manifest and exits 0 when etcd may start (an init container).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return fmt.Errorf("unexpected arguments %q: the etcd command line goes after \"--\"", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			c.Log = log
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			gc := c.GateConfig()
			argv, environ, err := gate.Run(ctx, gc, timeout, args)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				return nil
			}
			stop()
			if fastStop {
				startStopWatch(gc, argv, environ, g.Format, log)
			}
			_ = log.Sync()
			return gate.ExecEtcd(argv, environ)
		},
	}
	addMemberFlags(cmd.Flags(), &c)
	cmd.Flags().StringVar(&c.MemberSource, "member-source", agent.MemberSourceStaticPod,
		"pods: this gate guards a member pod served by an agent with --member-source=pods; with its cluster unreachable it lets a first bootstrap through only on that agent's word (from the cluster's record in the API, which outlives nodes) that the cluster never served")
	cmd.Flags().BoolVar(&fastStop, "fast-stop", true,
		"leave a stop watch beside etcd that ends a stopping etcd whose data dir holds no db without its graceful wait (up to 7 s for the API server's watches), once it is not the leader and no request is in flight; needs etcd's --listen-metrics-urls")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: wait as long as it takes, like any init container)")
	return cmd
}
