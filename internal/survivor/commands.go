package survivor

import (
	"errors"
	"fmt"
	"strings"
)

// The runbook procedures the commands are made of (docs/runbooks/README.md,
// "Majority lost: restore"), and the example values each is written with.
const (
	ProcedureStop     = "majority-lost-stop"
	ProcedureSurvivor = "majority-lost-survivor"
	ProcedureRejoin   = "majority-lost-rejoin"
)

var examples = map[string]string{
	ProcedureStop:     "PEER=https://10.0.0.11:2380",
	ProcedureSurvivor: "M=cp-1 PEER=https://10.0.0.11:2380",
	ProcedureRejoin:   "M=cp-2 PEER=https://10.0.0.12:2380",
}

// Step is one script a person runs on one node, in order.
type Step struct {
	Node      string `json:"node,omitempty"`
	Member    string `json:"member"`
	Procedure string `json:"procedure"`
	Script    string `json:"script"`
}

// Etcdctl is how E reaches etcd in the scripts: etcdctl and its TLS files.
type Etcdctl struct {
	CACert, Cert, Key string
}

// Commands writes the restore from c.Survivor as the runbook's procedures
// with this cluster's values: every other member stopped (its data moved
// aside, never deleted), the survivor made a one-member cluster with its
// data, then every other member added back as a learner, one at a time.
// procedures holds each procedure's script as the runbook writes it;
// defaults are the paths of a member whose agent did not say its own.
func Commands(c Choice, procedures map[string]string, e Etcdctl, defaults Paths) ([]Step, error) {
	if c.Survivor == nil {
		return nil, errors.New("no survivor chosen: " + c.Refused)
	}
	if len(c.Unknown) > 0 {
		// It may run in a quorum this node cannot reach (a partition: a
		// restore would split the cluster), or hold newer data.
		return nil, fmt.Errorf("nothing is known of %s: it may be serving in a quorum this node cannot reach, or hold newer data. "+
			"Check it first (etcd-agent status on its node, or --agent-url); if it is gone for good, say so with --lost=NAME",
			strings.Join(c.Unknown, ", "))
	}
	s := *c.Survivor
	if s.ClientURL == "" {
		return nil, fmt.Errorf("no client URL known for %s", s.Name)
	}
	others := make([]Member, 0, len(c.Members))
	for _, m := range c.Members {
		if m.Name != s.Name {
			others = append(others, m)
		}
	}
	var steps []Step
	add := func(m Member, proc string) error {
		text, ok := procedures[proc]
		if !ok {
			return fmt.Errorf("the runbook has no procedure %s", proc)
		}
		p := withDefaults(m.Paths, defaults)
		if p.WALDir != "" {
			return fmt.Errorf("%s keeps its WAL in a dedicated dir %s, which these procedures do not move or copy: follow docs/runbooks/README.md by hand, moving the WAL dir with the data dir", m.Name, p.WALDir)
		}
		if p.Manifest == "" || p.DataDir == "" || p.QuarantineDir == "" {
			return fmt.Errorf("the paths of %s on its node are not known (manifest %q, data dir %q, quarantine %q)", m.Name, p.Manifest, p.DataDir, p.QuarantineDir)
		}
		ex := examples[proc]
		if !strings.Contains(text, ex) {
			return fmt.Errorf("procedure %s no longer sets %q: the commands and the runbook drifted apart", proc, ex)
		}
		set := "PEER=" + shellQuote(m.PeerURL)
		if strings.HasPrefix(ex, "M=") {
			set = "M=" + shellQuote(m.Name) + " " + set
		}
		// The paths are never inside quotes in the procedures: a quoted
		// prefix joins the word it starts.
		body := strings.NewReplacer(ex, set,
			"/etc/kubernetes/manifests/etcd.yaml", shellQuote(p.Manifest),
			"/var/lib/etcd-agent-quarantine", shellQuote(p.QuarantineDir),
			"/var/lib/etcd", shellQuote(p.DataDir)).Replace(text)
		steps = append(steps, Step{Node: m.Node, Member: m.Name, Procedure: proc, Script: prelude(s.ClientURL, e) + body})
		return nil
	}
	for _, m := range others {
		if err := add(m, ProcedureStop); err != nil {
			return nil, err
		}
	}
	if err := add(s, ProcedureSurvivor); err != nil {
		return nil, err
	}
	for _, m := range others {
		if err := add(m, ProcedureRejoin); err != nil {
			return nil, err
		}
	}
	return steps, nil
}

func withDefaults(p, d Paths) Paths {
	if p.Manifest == "" {
		p.Manifest = d.Manifest
	}
	if p.DataDir == "" {
		p.DataDir, p.WALDir = d.DataDir, d.WALDir
	}
	if p.QuarantineDir == "" {
		p.QuarantineDir = d.QuarantineDir
	}
	return p
}

// shellQuote makes v one shell word: as is when plain, else single-quoted
// (a member's name is whatever its --name said).
func shellQuote(v string) string {
	plain := v != ""
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r)) {
			plain = false
			break
		}
	}
	if plain {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// prelude is what each script needs first: bash's errexit (a failed check
// stops it) and E, etcdctl reaching the survivor only ("Reaching etcd").
func prelude(survivorURL string, e Etcdctl) string {
	flags := []string{"--endpoints=" + shellQuote(survivorURL), "--dial-timeout=5s", "--command-timeout=15s"}
	if e.CACert != "" {
		flags = append(flags, "--cacert="+shellQuote(e.CACert))
	}
	if e.Cert != "" {
		flags = append(flags, "--cert="+shellQuote(e.Cert), "--key="+shellQuote(e.Key))
	}
	return fmt.Sprintf("set -euo pipefail\nE() { etcdctl %s \"$@\"; }\n", strings.Join(flags, " "))
}
