// Command etcd-agent heals etcd minority failures on Kubernetes control-plane
// nodes. This package only wires flags to the internal packages.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/logging"
	"github.com/etcd-agent/etcd-agent/internal/version"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
)

// globalFlags are shared by every subcommand.
type globalFlags struct{ logging.CommandFlags }

func (g *globalFlags) logger() (*zap.Logger, error) { return g.Logger() }

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "etcd-agent",
		Short:         "Heals etcd minority failures on Kubernetes control-plane nodes without interrupting the API",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return bindEnv(cmd.Flags())
		},
	}
	g.Register(root.PersistentFlags())
	root.AddCommand(
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Args:  cobra.NoArgs,
			Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version.String()) },
		},
		newRunCmd(g),
		newStatusCmd(g),
		newGateCmd(g),
		newStopWatchCmd(g),
		newInstallGateCmd(),
		newRecoverCmd(g),
		newMoveCmd(),
		newSnapshotCmd(),
		newExtractCmd(),
	)
	return root
}

// bindEnv gives every flag an ETCD_AGENT_<FLAG> environment equivalent
// (a DaemonSet sets env more easily than args); a flag on the command line wins.
func bindEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		key := "ETCD_AGENT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(key); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment %s=%q: %w", key, v, serr)
			}
		}
	})
	return err
}

func main() {
	localdisk.ServeInspectionIfChild() // the deep inspection's child process: never returns
	if err := newRootCmd().Execute(); err != nil {
		var se statusExit
		var re recoverExit
		if !errors.As(err, &se) && !errors.As(err, &re) { // they printed their verdict
			fmt.Fprintln(os.Stderr, "etcd-agent:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitCoder lets a subcommand choose its exit code (e.g. `status`).
type exitCoder interface{ ExitCode() int }

func exitCode(err error) int {
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}
