package survivor

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The procedures of a StatefulSet member's restore (docs/management-nodes.md,
// "Majority lost"), and the example values each is written with.
const (
	ProcedurePodForceRequest = "pod-force-request"
	ProcedurePodForceRestart = "pod-force-restart"
)

var podExamples = map[string]string{
	ProcedurePodForceRequest: "NS=clusters-a POD=etcd-0 ID=8e9e05c52164694d",
	ProcedurePodForceRestart: "NS=clusters-a POD=etcd-0 CLIENT=https://etcd-0.etcd-discovery.clusters-a.svc:2379",
}

// podStateExample is the request procedure's state dir line: the agent's
// own --state-dir on the node may be elsewhere.
const podStateExample = "STATE=/var/lib/etcd-agent/members/${NS}_${POD}"

// ShellKubectl is the Step.Node of a script run from any shell with
// kubectl on the management cluster and E.
const ShellKubectl = "a shell with kubectl and E"

// dnsLabel: a namespace's or a pod's name (RFC 1123).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// PodCommands writes the restore of a StatefulSet member's cluster from
// c.Survivor as the procedures say, with its values: a request in its
// state dir on its node that its gate start it once with
// --force-new-cluster, then its pod deleted (re-created, forced), and a
// wait while the agents rejoin the others. E reaches every member.
func PodCommands(c Choice, procedures map[string]string, e Etcdctl) ([]Step, error) {
	if err := restorable(c); err != nil {
		return nil, err
	}
	s := *c.Survivor
	ns, pod, ok := strings.Cut(s.Pod, "/")
	switch {
	case !ok || !dnsLabel.MatchString(ns) || !dnsLabel.MatchString(pod):
		return nil, fmt.Errorf("the survivor %s's pod %q is not namespace/name", s.Name, s.Pod)
	case s.ID == 0 || s.ClientURL == "":
		return nil, fmt.Errorf("the member ID or client URL of %s is not known", s.Name)
	case s.Node == "":
		return nil, fmt.Errorf("no agent reported %s's node", s.Name)
	}
	// The state dir is where its agent serves that pod (an agent's report
	// is not authenticated: a path elsewhere is not taken).
	state := s.Paths.StateDir
	if !plainPath.MatchString(state) || filepath.Clean(state) != state || filepath.Base(state) != ns+"_"+pod || filepath.Base(filepath.Dir(state)) != "members" {
		return nil, fmt.Errorf("%s's state dir %q (its agent's report) is not a plain, clean <state dir>/members/%s_%s: write the commands by hand", s.Name, state, ns, pod)
	}
	var urls []string
	for _, m := range c.Members {
		if m.ClientURL != "" {
			urls = append(urls, m.ClientURL)
		}
	}
	fill := func(proc, set string, more ...string) (string, error) {
		text, ok := procedures[proc]
		if !ok {
			return "", fmt.Errorf("the runbook has no procedure %s", proc)
		}
		for _, ex := range append([]string{podExamples[proc]}, more...) {
			if !strings.Contains(text, ex) {
				return "", fmt.Errorf("procedure %s no longer sets %q: the commands and the runbook drifted apart", proc, ex)
			}
		}
		r := []string{podExamples[proc], set}
		if proc == ProcedurePodForceRequest {
			r = append(r, podStateExample, "STATE="+shellQuote(state))
		}
		return prelude(strings.Join(urls, ","), e) + strings.NewReplacer(r...).Replace(text), nil
	}
	id := strconv.FormatUint(s.ID, 16)
	request, err := fill(ProcedurePodForceRequest, fmt.Sprintf("NS=%s POD=%s ID=%s", ns, pod, id), podStateExample)
	if err != nil {
		return nil, err
	}
	restart, err := fill(ProcedurePodForceRestart, fmt.Sprintf("NS=%s POD=%s CLIENT=%s", ns, pod, shellQuote(s.ClientURL)))
	if err != nil {
		return nil, err
	}
	return []Step{
		{Node: s.Node, Member: s.Name, Procedure: ProcedurePodForceRequest, Script: request},
		{Node: ShellKubectl, Member: s.Name, Procedure: ProcedurePodForceRestart, Script: restart},
	}, nil
}
