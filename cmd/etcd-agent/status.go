package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/timefmt"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
)

// statusExit carries status's exit code (0 healthy, 1 degraded/down, 2 lost,
// 3 majority lost) without printing an error.
type statusExit int

func (e statusExit) Error() string { return fmt.Sprintf("exit %d", int(e)) }
func (e statusExit) ExitCode() int { return int(e) }

func newStatusCmd(g *globalFlags) *cobra.Command {
	c := agent.Config{}
	var output, memberSource string
	var watch time.Duration
	var cluster clusterFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Observe once and print what the agent sees and why (exit 0 healthy, 1 degraded/down, 2 lost, 3 majority lost)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "json" && output != "table" {
				return fmt.Errorf("bad -o %q: want json or table", output)
			}
			if cluster.on && memberSource == agent.MemberSourcePods && cluster.pod == "" {
				return fmt.Errorf("--cluster with --member-source=pods needs --pod=<namespace>/<name>: the member pod on this node whose cluster to show")
			}
			if cluster.pod != "" && !(cluster.on && memberSource == agent.MemberSourcePods) {
				return fmt.Errorf("--pod is for --cluster with --member-source=pods")
			}
			if watch < 0 {
				return fmt.Errorf("bad --watch %s: want an interval, or 0 to print once", watch)
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			c.Log = log
			once := func() error {
				cluster.say = func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }
				if cluster.on && memberSource == agent.MemberSourcePods {
					return podsClusterStatus(cmd.Context(), cmd.OutOrStdout(), c, cluster, cluster.pod, output)
				}
				if cluster.on {
					return clusterStatus(cmd.Context(), cmd.OutOrStdout(), c, cluster, output)
				}
				if memberSource == agent.MemberSourcePods {
					return podsStatus(cmd.OutOrStdout(), c.StateDir, output, time.Now())
				}
				return memberStatus(cmd, c, output)
			}
			if watch == 0 {
				return once()
			}
			// A live view (a recovery's progress): until interrupted.
			t := time.NewTicker(watch)
			defer t.Stop()
			for {
				if output != "json" { // -o json: one JSON document after another
					fmt.Fprintf(cmd.OutOrStdout(), "--- %s (every %s; Ctrl-C ends)\n", time.Now().UTC().Format(time.RFC3339), watch)
				}
				var exit statusExit
				if err := once(); err != nil && !errors.As(err, &exit) {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout())
				select {
				case <-cmd.Context().Done():
					return nil
				case <-t.C:
				}
			}
		},
	}
	addMemberFlags(cmd.Flags(), &c)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().StringVar(&memberSource, "member-source", agent.MemberSourceStaticPod,
		"static-pod: observe the member now; pods: list every pod member the daemon serves, from its latest reports in --state-dir")
	cmd.Flags().BoolVar(&cluster.on, "cluster", false, "every member as its etcd and its node's agent report it; when the majority is lost, the member to restore from and the commands to do it (never run for you)")
	cmd.Flags().StringToStringVar(&cluster.agentURLs, "agent-url", nil, "with --cluster: MEMBER=URL of a member's agent (default: http://<its peer URL's host>:<--agent-port>)")
	cmd.Flags().StringSliceVar(&cluster.lost, "lost", nil, "with --cluster: members gone for good (their nodes and data), which nothing can report on: without it, no commands are printed while a member is unknown")
	cmd.Flags().StringVar(&cluster.pod, "pod", "", "with --cluster and --member-source=pods: the member pod (namespace/name) on this node whose cluster to show; --agent-url then takes POD=URL (default: its node's InternalIP and --agent-port, from the Kubernetes API)")
	cmd.Flags().IntVar(&cluster.agentPort, "agent-port", 9793, "with --cluster: the port the agents' --metrics-addr listens on")
	cmd.Flags().DurationVarP(&watch, "watch", "w", 0, "print again every interval (e.g. 2s) until interrupted: a live view of a recovery's progress (exit 0 then, whatever the state)")
	return cmd
}

// memberStatus observes the static-pod member once and prints it.
func memberStatus(cmd *cobra.Command, c agent.Config, output string) error {
	rep, err := agent.Status(cmd.Context(), c)
	if err != nil {
		return err
	}
	if output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(cmd.OutOrStdout(), rep, time.Now())
	}
	if code := rep.ExitCode(); code != 0 {
		return statusExit(code)
	}
	return nil
}

// podsStatus prints the daemon's latest report on each pod member; the
// exit code is the worst member's.
func podsStatus(out io.Writer, stateDir, output string, now time.Time) error {
	st, err := agent.PodMembersStatus(stateDir)
	if err != nil {
		return err
	}
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POD\tMEMBER\tSTATE\tREASON\tDATA DIR\tQUORUM\tDECISION\tAT")
		for _, s := range st {
			r := s.Report
			if s.Error != "" {
				fmt.Fprintf(tw, "%s\t\t\t%s\t\t\t\t\n", s.Pod, s.Error)
				continue
			}
			decision := ""
			if r.Decision != nil {
				decision = fmt.Sprintf("%s %s", r.Decision.Action, r.Decision.Reason)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d (margin %d)\t%s\t%s\n", s.Pod, r.Observation.Local.Name, strings.ToUpper(string(r.State)), r.Reason,
				r.Observation.Local.DataDirClass, r.HealthyVoters, r.Voters, r.QuorumMargin, strings.TrimSpace(decision), timefmt.At(r.At, now))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, s := range st {
			for _, e := range s.Report.Progress {
				fmt.Fprintf(out, "%s progress: %s\n", s.Pod, e)
			}
		}
	}
	worst := 0
	for _, s := range st {
		if s.Error == "" {
			worst = max(worst, s.Report.ExitCode())
		}
	}
	if worst != 0 {
		return statusExit(worst)
	}
	return nil
}

func printReport(out io.Writer, r agent.Report, now time.Time) {
	o := r.Observation
	l := o.Local
	fmt.Fprintf(out, "member %s: %s (%s)\n", l.Name, strings.ToUpper(string(r.State)), r.Reason)
	if r.Detail != "" {
		fmt.Fprintf(out, "  %s\n", r.Detail)
	}
	fmt.Fprintf(out, "data dir %s", l.DataDir)
	if l.WALDir != "" {
		fmt.Fprintf(out, " with WAL dir %s", l.WALDir)
	}
	fmt.Fprintf(out, ": %s", l.DataDirClass)
	if l.DataDirDetail != "" {
		fmt.Fprintf(out, " (%s)", l.DataDirDetail)
	}
	fmt.Fprintf(out, "\nidentity: %s", l.Match)
	if l.MatchDetail != "" {
		fmt.Fprintf(out, " (%s)", l.MatchDetail)
	}
	fmt.Fprintf(out, "\nquorum: %d healthy of %d voters, quorum %d, margin %d", r.HealthyVoters, r.Voters, r.Quorum, r.QuorumMargin)
	switch {
	case r.MajorityLost && r.State == memberstate.Recovering:
		fmt.Fprint(out, "  MAJORITY LOST: the recovery waits for the quorum, nothing destructive")
	case r.MajorityLost:
		fmt.Fprint(out, "  MAJORITY LOST: the agent will not act; restoring from a backup is a human's call")
	}
	if o.MemberListError != "" {
		fmt.Fprintf(out, "\nmember list failed: %s (showing the last list seen)", o.MemberListError)
	}
	if d := r.Decision; d != nil {
		fmt.Fprintf(out, "\ndecision: %s", d.Action)
		if d.Reason != "" {
			fmt.Fprintf(out, " (%s)", d.Reason)
		}
		if d.Detail != "" {
			fmt.Fprintf(out, ": %s", d.Detail)
		}
	}
	if r.Pin != "" {
		fmt.Fprintf(out, "\npinned: %s", r.Pin)
	}
	if line := lastRecoveryLine(r, now); line != "" {
		fmt.Fprintf(out, "\nlast recovery: %s", line)
	}
	for _, e := range r.Progress {
		fmt.Fprintf(out, "\nprogress: %s", e)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tPEER URL\tROLE\tLEADER\tSERVING\tAPPLIED\tERROR")
	for _, m := range o.Members {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		peer := ""
		if len(m.PeerURLs) > 0 {
			peer = m.PeerURLs[0]
		}
		local := ""
		if l.ID != 0 && m.ID == l.ID {
			local = " *"
		}
		fmt.Fprintf(w, "%s%s\t%s\t%s\t%s\t%v\t%v\t%d\t%s\n", agent.Hex(m.ID), local, m.Name, peer, role, m.IsLeader, m.Serving, m.AppliedIndex, m.ProbeError)
	}
	w.Flush()
}

// lastRecoveryLine summarises the recovery journal for the table output.
func lastRecoveryLine(r agent.Report, now time.Time) string {
	if r.JournalError != "" {
		return "journal unreadable: " + r.JournalError
	}
	j := r.LastRecovery
	if j == nil {
		return ""
	}
	var b strings.Builder
	if j.Active() {
		fmt.Fprintf(&b, "%s IN PROGRESS, phase %s, started %s", j.ID, j.Phase, timefmt.At(j.StartedAt, now))
	} else {
		fmt.Fprintf(&b, "%s %s", j.ID, j.Result)
		if j.Reason != "" {
			fmt.Fprintf(&b, " (%s)", j.Reason)
		}
		fmt.Fprintf(&b, ", %s to %s (took %s)", j.StartedAt.UTC().Format(time.RFC3339), timefmt.At(j.FinishedAt, now), duration.HumanDuration(j.FinishedAt.Sub(j.StartedAt)))
	}
	if j.RejoinMode != "" {
		fmt.Fprintf(&b, ", %s mode", j.RejoinMode)
		if j.SeedFallback != "" {
			fmt.Fprintf(&b, " (seed fell back: %s)", j.SeedFallback)
		}
	}
	if j.OldMemberID != 0 || j.NewMemberID != 0 {
		fmt.Fprintf(&b, ", member %s -> %s", agent.Hex(uint64(j.OldMemberID)), agent.Hex(uint64(j.NewMemberID)))
	}
	for _, s := range j.Steps {
		fmt.Fprintf(&b, "; %s", s)
	}
	return b.String()
}
