package main

import (
	"context"
	"os/signal"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/faststop"
	"github.com/spf13/cobra"
)

// newStopWatchCmd is the stop watch the gate leaves beside etcd (not run
// by hand: the gate starts it; `gate --fast-stop=false` does not).
func newStopWatchCmd(g *globalFlags) *cobra.Command {
	var c faststop.Config
	tlsFlags := agent.Config{}
	cmd := &cobra.Command{
		Use:    "stop-watch",
		Short:  "End a stopping etcd whose data dir holds no db without its graceful wait (started by the gate)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			c.Log = log
			if c.TLS, err = tlsFlags.TLSConfig(); err != nil {
				return err
			}
			// SIGTERM is the container's stop: the watch goes on until
			// etcd exits (it is what the watch is for).
			signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			return faststop.Watch(context.Background(), c)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&c.ParentPID, "parent-pid", 0, "etcd's PID (the gate's, which etcd keeps)")
	fs.StringVar(&c.ClientURL, "client-url", "", "etcd's client URL")
	fs.StringSliceVar(&c.ListenURLs, "listen-url", nil, "a URL etcd listens on for clients (repeat for each)")
	fs.StringVar(&c.MetricsURL, "metrics-url", "", "etcd's metrics URL (--listen-metrics-urls)")
	fs.StringVar(&c.DataDir, "data-dir", "", "etcd's data dir")
	fs.DurationVar(&c.Poll, "poll", 100*time.Millisecond, "how often to look")
	fs.StringVar(&tlsFlags.CACert, "cacert", "", "CA bundle to verify etcd's serving certificates")
	fs.StringVar(&tlsFlags.Cert, "cert", "", "client certificate for etcd (mTLS)")
	fs.StringVar(&tlsFlags.Key, "key", "", "client key for etcd (mTLS)")
	return cmd
}
