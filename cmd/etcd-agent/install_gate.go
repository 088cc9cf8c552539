package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/spf13/cobra"
)

// newInstallGateCmd copies this binary where the etcd container can run it
// as its start gate wrapper: the etcd image has no etcd-agent, and the agent
// image (distroless) has no cp. An init container of the etcd static pod
// runs it into an emptyDir that the etcd container mounts.
func newInstallGateCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "install-gate --to DIR",
		Short: "Copy etcd-agent into DIR (an emptyDir shared with the etcd container), for `gate -- etcd ...`",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return fmt.Errorf("--to is required")
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			b, err := os.ReadFile(self)
			if err != nil {
				return err
			}
			dst := filepath.Join(to, "etcd-agent")
			if err := fsutil.WriteFileAtomic(dst, b, 0o755); err != nil {
				return fmt.Errorf("install the gate: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %s (%d bytes)\n", dst, len(b))
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "directory to copy the binary into (as etcd-agent)")
	return cmd
}
