package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
)

// newSnapshotCmd is `etcd-agent snapshot list|get`: the snapshot store by
// hand (UC2/UC3 without the agent), with the same verification the agent
// uses.
func newSnapshotCmd() *cobra.Command {
	var store string
	c := &cobra.Command{
		Use:   "snapshot",
		Short: "List or fetch (verified) the etcd snapshots in the snapshot store",
	}
	c.PersistentFlags().StringVar(&store, "snapshot-store", "", "the store: file:///dir or s3://bucket?endpoint=...&region=... (credentials from the AWS environment)")
	c.AddCommand(&cobra.Command{
		Use:   "list CLUSTER-ID",
		Short: "List a cluster's snapshots, oldest first (the cluster ID in hex, as etcdctl prints it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 16, 64)
			if err != nil {
				return fmt.Errorf("cluster ID %q: want hex, e.g. 6fa10cd42a9dd92b", args[0])
			}
			s, err := snapshotstore.Open(cmd.Context(), store)
			if err != nil {
				return err
			}
			defer s.Close()
			objs, bad, err := s.List(cmd.Context(), id)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TAKEN\tMEMBER\tMEMBER ID\tSOURCE\tBYTES\tETCD\tSHA256\tKEY")
			for _, o := range objs {
				m := o.Meta
				fmt.Fprintf(w, "%s\t%s\t%x\t%s\t%d\t%s\t%s\t%s\n", m.TakenAt.Format(time.RFC3339), m.Member, m.MemberID, m.Source, m.Size, m.EtcdVersion, m.SHA256[:16], o.Key)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			for _, k := range bad {
				fmt.Fprintf(cmd.ErrOrStderr(), "not a complete snapshot (half-written, or without the agent's metadata): %s\n", k)
			}
			return nil
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "get KEY FILE",
		Short: "Download a snapshot to FILE (a new file), verified against the sha256 and size it carries",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := snapshotstore.Open(cmd.Context(), store)
			if err != nil {
				return err
			}
			defer s.Close()
			m, err := s.Get(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d bytes, sha256 %s verified; cluster %x, member %s (%x), taken %s from %s, etcd %s\n",
				args[1], m.Size, m.SHA256, m.ClusterID, m.Member, m.MemberID, m.TakenAt.Format(time.RFC3339), m.Source, m.EtcdVersion)
			return nil
		},
	})
	return c
}
