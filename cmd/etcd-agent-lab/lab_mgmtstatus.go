package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/spf13/cobra"
)

// printManagementStatus shows a management lab's worker Nodes and, per
// hosted cluster, its members and the pod, node, PVC and PV behind each.
func printManagementStatus(cmd *cobra.Command, st lab.Status) {
	out := cmd.OutOrStdout()
	if len(st.Nodes) > 0 {
		fmt.Fprintln(out)
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "WORKER\tREADY\tUNSCHEDULABLE\tTAINTS")
		for _, n := range st.Nodes {
			fmt.Fprintf(w, "%s\t%v\t%v\t%s\n", n.Name, n.Ready, n.Unschedulable, strings.Join(n.Taints, ","))
		}
		w.Flush()
	}
	for _, h := range st.Hosted {
		fmt.Fprintf(out, "\nhosted cluster %s", h.Namespace)
		if h.MemberList != "" {
			fmt.Fprintf(out, " (member list failed: %s)", h.MemberList)
		}
		fmt.Fprintln(out)
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "MEMBER\tID\tROLE\tHEALTHY\tCLIENT URL\tERROR")
		for _, m := range h.Members {
			role := "voter"
			if m.Learner {
				role = "learner"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s\n", m.Name, m.ID, role, m.Healthy, m.ClientURL, m.Error)
		}
		fmt.Fprintln(w, "POD\tNODE\tPHASE\tREADY\tPOD IP\tPVC\tPV")
		for _, p := range h.Pods {
			phase := p.Phase
			if p.Terminating {
				phase += " (terminating)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s %s\t%s\n", p.Name, p.Node, phase, p.Ready, p.PodIP, p.PVC, p.PVCPhase, p.PV)
		}
		w.Flush()
	}
}
