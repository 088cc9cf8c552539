package main

import (
	"fmt"
	"syscall"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/spf13/cobra"
)

// podVerbs are the etcd fault verbs that also take --pod namespace/name (a
// hosted etcd member of a management lab).
var podVerbs = map[string]func(*cobra.Command, *lab.Lab, string) error{
	"wipe": withPod(func(c *cobra.Command, l *lab.Lab, ns, p string) error { return l.WipePodData(c.Context(), ns, p) }),
	"corrupt": withPod(func(c *cobra.Command, l *lab.Lab, ns, p string) error {
		return l.CorruptPodDB(c.Context(), ns, p)
	}),
	"corrupt-wal": withPod(func(c *cobra.Command, l *lab.Lab, ns, p string) error {
		return l.CorruptPodWAL(c.Context(), ns, p)
	}),
	"kill-member": withPod(func(c *cobra.Command, l *lab.Lab, ns, p string) error {
		pid, err := l.SignalPod(c.Context(), ns, p, syscall.SIGKILL)
		if err == nil {
			fmt.Fprintf(c.OutOrStdout(), "killed etcd pid %d of %s/%s\n", pid, ns, p)
		}
		return err
	}),
	"pause": withPod(func(c *cobra.Command, l *lab.Lab, ns, p string) error {
		_, err := l.SignalPod(c.Context(), ns, p, syscall.SIGSTOP)
		return err
	}),
	"resume": withPod(func(c *cobra.Command, l *lab.Lab, ns, p string) error {
		_, err := l.SignalPod(c.Context(), ns, p, syscall.SIGCONT)
		return err
	}),
}

func withPod(f func(*cobra.Command, *lab.Lab, string, string) error) func(*cobra.Command, *lab.Lab, string) error {
	return func(c *cobra.Command, l *lab.Lab, ref string) error {
		ns, name, err := lab.ParsePodRef(ref)
		if err != nil {
			return err
		}
		return f(c, l, ns, name)
	}
}

// newLabPodFaultCmds are a management lab's verbs on API objects.
func newLabPodFaultCmds(open func() (*lab.Lab, error)) []*cobra.Command {
	run := func(f func(*cobra.Command, *lab.Lab) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			l, err := open()
			if err != nil {
				return err
			}
			if l.Spec.Management == nil {
				return fmt.Errorf("%s needs a management lab (lab up --mode management)", cmd.Name())
			}
			if err := f(cmd, l); err != nil {
				return fmt.Errorf("%s: %w", cmd.Name(), err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: done\n", cmd.Name())
			return nil
		}
	}
	var pod, pvc, node string
	var force bool
	deletePod := &cobra.Command{Use: "delete-pod", Short: "Delete a pod as kubectl does (--force: at once, even if its node is gone)", Args: cobra.NoArgs,
		RunE: run(func(c *cobra.Command, l *lab.Lab) error {
			ns, name, err := lab.ParsePodRef(pod)
			if err != nil {
				return err
			}
			return l.DeletePod(c.Context(), ns, name, force)
		})}
	deletePod.Flags().StringVar(&pod, "pod", "", "namespace/name")
	deletePod.Flags().BoolVar(&force, "force", false, "grace period 0: the API forgets the pod at once")
	_ = deletePod.MarkFlagRequired("pod")
	deletePVC := &cobra.Command{Use: "delete-pvc", Short: "Delete a PVC (its local PV is released and kept)", Args: cobra.NoArgs,
		RunE: run(func(c *cobra.Command, l *lab.Lab) error {
			ns, name, err := lab.ParsePodRef(pvc)
			if err != nil {
				return err
			}
			return l.DeletePVC(c.Context(), ns, name)
		})}
	deletePVC.Flags().StringVar(&pvc, "pvc", "", "namespace/name, e.g. clusters-a/data-etcd-1")
	_ = deletePVC.MarkFlagRequired("pvc")
	cordon := &cobra.Command{Use: "cordon", Short: "Mark a Node unschedulable", Args: cobra.NoArgs,
		RunE: run(func(c *cobra.Command, l *lab.Lab) error { return l.Cordon(c.Context(), node, true) })}
	uncordon := &cobra.Command{Use: "uncordon", Short: "Mark a Node schedulable", Args: cobra.NoArgs,
		RunE: run(func(c *cobra.Command, l *lab.Lab) error { return l.Cordon(c.Context(), node, false) })}
	addPV := &cobra.Command{Use: "add-pv", Short: "Add a local PV on a worker node", Args: cobra.NoArgs,
		RunE: run(func(c *cobra.Command, l *lab.Lab) error {
			pv, err := l.AddPV(c.Context(), node)
			if err == nil {
				fmt.Fprintf(c.OutOrStdout(), "added PV %s at %s\n", pv.Name, pv.Spec.Local.Path)
			}
			return err
		})}
	for _, c := range []*cobra.Command{cordon, uncordon, addPV} {
		c.Flags().StringVar(&node, "node", "", "the worker node, e.g. node2")
		_ = c.MarkFlagRequired("node")
	}
	return []*cobra.Command{deletePod, deletePVC, cordon, uncordon, addPV}
}
