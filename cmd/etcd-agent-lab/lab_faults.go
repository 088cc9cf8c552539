package main

import (
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/spf13/cobra"
)

// newLabFaultCmds are the fault verbs a person uses to break a running lab
// by hand and watch the agents heal it.
func newLabFaultCmds(open func() (*lab.Lab, error)) []*cobra.Command {
	type verb struct {
		use, short string
		do         func(*cobra.Command, *lab.Lab, string) error
	}
	var removeDisk bool
	verbs := []verb{
		{"wipe", "Remove the node's etcd data dir (etcd keeps running on open files)", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.WipeDataDir(n) }},
		{"replace-with-file", "Remove the node's etcd data dir and put a regular file at its path (etcd keeps running on open files)", func(_ *cobra.Command, l *lab.Lab, n string) error {
			_, err := l.ReplaceDataDirWithFile(n)
			return err
		}},
		{"corrupt", "Overwrite bytes of the node's member/snap/db", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.CorruptDB(n) }},
		{"corrupt-wal", "Overwrite bytes of the node's newest WAL file", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.CorruptWAL(n) }},
		{"kill-member", "SIGKILL the node's etcd (its supervisor restarts it)", func(c *cobra.Command, l *lab.Lab, n string) error {
			pid, err := l.KillMember(n)
			if err == nil {
				fmt.Fprintf(c.OutOrStdout(), "killed etcd pid %d on %s\n", pid, n)
			}
			return err
		}},
		{"lose-node", "Kill the node's supervisor and everything it runs (a dead node)", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.LoseNode(n, removeDisk) }},
		{"stop-member", "Stop the node's etcd as a kubelet would: move its manifest out of the manifests dir", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.StopMember(n) }},
		{"start-member", "Move a manifest stopped by stop-member back", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.StartMember(n) }},
		{"crash-member", "SIGKILL the node's etcd and keep it down (its manifest moved aside as stop-member does); start-member brings it back", func(c *cobra.Command, l *lab.Lab, n string) error {
			pid, err := l.CrashMember(n)
			if err == nil {
				fmt.Fprintf(c.OutOrStdout(), "killed etcd pid %d on %s; it stays down until start-member\n", pid, n)
			}
			return err
		}},
		{"tear-wal-tail", "Zero the data of the last record of the stopped member's newest WAL file (a torn write; etcd repairs it at start)", func(c *cobra.Command, l *lab.Lab, n string) error {
			t, err := l.TearWALTail(n)
			if err == nil {
				fmt.Fprintf(c.OutOrStdout(), "tore the %s record (%d bytes) at offset %d of %s\n", t.TypeName, t.Bytes, t.Offset, t.File)
			}
			return err
		}},
		{"fill-disk", "Fill the node's disk (a tmpfs: up --disk-limit) until ENOSPC", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.FillDisk(n) }},
		{"free-disk", "Remove what fill-disk wrote", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.FreeDisk(n) }},
		// No partition verb: the peer proxies that cut it run only in the
		// process that called lab.Up (Go API: Lab.Partition).
		{"pause", "SIGSTOP the node's etcd (a hung member)", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.Pause(n) }},
		{"resume", "SIGCONT the node's etcd", func(_ *cobra.Command, l *lab.Lab, n string) error { return l.Resume(n) }},
	}
	var cmds []*cobra.Command
	for _, v := range verbs {
		var node, pod string
		podDo, byPod := podVerbs[v.use]
		c := &cobra.Command{
			Use: v.use, Short: v.short, Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				l, err := open()
				if err != nil {
					return err
				}
				if pod != "" {
					if err := podDo(cmd, l, pod); err != nil {
						return fmt.Errorf("%s %s: %w", v.use, pod, err)
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s: done\n", v.use, pod)
					return nil
				}
				if err := v.do(cmd, l, node); err != nil {
					return fmt.Errorf("%s %s: %w", v.use, node, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s: done\n", v.use, node)
				return nil
			},
		}
		c.Flags().StringVar(&node, "node", "", "the lab node, e.g. node2")
		if byPod {
			if v.use == "wipe" {
				c.Aliases = []string{"wipe-pv"} // a hosted member's PV data lost
			}
			c.Flags().StringVar(&pod, "pod", "", "a hosted etcd pod of a management lab instead, e.g. clusters-a/etcd-1")
			c.MarkFlagsOneRequired("node", "pod")
			c.MarkFlagsMutuallyExclusive("node", "pod")
		} else {
			_ = c.MarkFlagRequired("node")
		}
		if v.use == "lose-node" {
			c.Flags().BoolVar(&removeDisk, "remove-disk", false, "also remove the node's local disk")
		}
		cmds = append(cmds, c)
	}
	var withMember bool
	addNode := &cobra.Command{
		Use: "add-node", Short: "Add an empty node (own IP, supervisor, Node object); place a manifest on it to give it a member",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := open()
			if err != nil {
				return err
			}
			n, err := l.AddNode(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s (%s), manifests dir %s\n", n.Name, n.IP, n.ManifestsDir)
			if withMember {
				// A member to move to: it joins nothing until a move
				// names this node (etcd-agent move NODE --to this one).
				if _, err := l.PlaceNewMember(n.Name); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "placed a new member's manifest on %s: move a member to it with `etcd-agent move NODE --to %s`\n", n.Name, n.Name)
			}
			return nil
		},
	}
	addNode.Flags().BoolVar(&withMember, "member", false, "also place a new member's manifest on it (the target of a move)")
	cmds = append(cmds, addNode)
	return append(cmds, newLabPodFaultCmds(open)...)
}
