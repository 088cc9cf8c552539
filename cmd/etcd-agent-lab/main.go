// Command etcd-agent-lab runs the local lab: real etcd and kube-apiserver
// processes on loopback (and a real kubelet node), the demo, the benches and
// the fault verbs. It is not the product: the agent is bin/etcd-agent, and
// nothing here ships in its image (issue 42). docs/design.md, "The lab".
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/etcd-agent/etcd-agent/internal/logging"
	"github.com/etcd-agent/etcd-agent/internal/version"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// globalFlags are shared by every subcommand.
type globalFlags struct{ logging.CommandFlags }

func (g *globalFlags) logger() (*zap.Logger, error) { return g.Logger() }

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := newLabCmd(g)
	root.Use = "etcd-agent-lab"
	root.SilenceUsage, root.SilenceErrors = true, true
	g.Register(root.PersistentFlags())
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version.String()) },
	})
	return root
}

// agentBinary is the etcd-agent the lab runs: beside this executable (both
// in bin/ after `make build`).
func agentBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	agent := filepath.Join(filepath.Dir(exe), "etcd-agent")
	if _, err := os.Stat(agent); err != nil {
		return "", fmt.Errorf("the agent binary: %w (build it with `make build`, or give --agent-binary)", err)
	}
	return agent, nil
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-agent-lab:", err)
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}
