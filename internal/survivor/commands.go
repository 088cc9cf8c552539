package survivor

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The runbook procedures the commands are made of (docs/runbooks/README.md,
// "Majority lost: restore"), and the example values each is written with.
const (
	ProcedureStop     = "majority-lost-stop"
	ProcedureSurvivor = "majority-lost-survivor"
	ProcedureRejoin   = "majority-lost-rejoin"
)

// clientExample is the stop procedure's client URL line (its member is
// asked first whether it sees a quorum).
const clientExample = "CLIENT=https://10.0.0.11:2379"

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
	if err := restorable(c); err != nil {
		return nil, err
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
		p := m.Paths
		if m.DeclaredLost && p == (Paths{}) {
			// Its node is gone with its agent: where a replacement
			// node keeps it, as this one does (the rejoin checks its
			// manifest's --data-dir against it).
			p = defaults
		}
		if err := checkPaths(proc, m.Name, p); err != nil {
			return err
		}
		ex := examples[proc]
		if !strings.Contains(text, ex) {
			return fmt.Errorf("procedure %s no longer sets %q: the commands and the runbook drifted apart", proc, ex)
		}
		set := "PEER=" + shellQuote(m.PeerURL)
		if strings.HasPrefix(ex, "M=") {
			set = "M=" + shellQuote(m.Name) + " " + set
		}
		client := "CLIENT=" + shellQuote(m.ClientURL) // ("" for a member that never served: nothing to ask)
		if proc == ProcedureStop && !strings.Contains(text, clientExample) {
			return fmt.Errorf("procedure %s no longer sets %q: the commands and the runbook drifted apart", proc, clientExample)
		}
		// The paths are never inside quotes in the procedures: a quoted
		// prefix joins the word it starts.
		body := strings.NewReplacer(ex, set, clientExample, client,
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

// restorable refuses a choice no commands may be written for: no
// survivor, a member nothing is known of, or members the procedures
// cannot name safely (checkMembers).
func restorable(c Choice) error {
	if c.Survivor == nil {
		return errors.New("no survivor chosen: " + c.Refused)
	}
	if len(c.Unknown) > 0 {
		// It may run in a quorum this node cannot reach (a partition: a
		// restore would split the cluster), or hold newer data.
		return fmt.Errorf("nothing is known of %s: it may be serving in a quorum this node cannot reach, or hold newer data. "+
			"Check it first (etcd-agent status on its node, or --agent-url); if it is gone for good, say so with --lost=NAME",
			strings.Join(c.Unknown, ", "))
	}
	return checkMembers(c.Members)
}

// checkMembers refuses what the procedures cannot say safely: names that
// are not plain words or repeat (scripts are per member name), peer URLs
// whose host could be shell syntax where a procedure re-parses it, and a
// member with more than one peer URL.
func checkMembers(ms []Member) error {
	seen := map[string]bool{}
	for _, m := range ms {
		if !plainName.MatchString(m.Name) {
			return fmt.Errorf("member name %q is not a plain word (letters, digits, . _ -): write the commands by hand", m.Name)
		}
		if seen[m.Name] {
			return fmt.Errorf("two members are named %q: write the commands by hand", m.Name)
		}
		seen[m.Name] = true
		if len(m.OtherPeerURLs) > 0 {
			return fmt.Errorf("%s has %d peer URLs; the procedures handle one: write the commands by hand", m.Name, 1+len(m.OtherPeerURLs))
		}
		u, err := url.Parse(m.PeerURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !plainHost.MatchString(u.Hostname()) || !digits.MatchString(u.Port()) {
			return fmt.Errorf("%s's peer URL %q is not scheme://host:port with a plain host: write the commands by hand", m.Name, m.PeerURL)
		}
		if m.ClientURL == "" {
			continue
		}
		if u, err := url.Parse(m.ClientURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || !plainHost.MatchString(u.Hostname()) || !digits.MatchString(u.Port()) {
			return fmt.Errorf("%s's client URL %q is not scheme://host:port with a plain host: write the commands by hand", m.Name, m.ClientURL)
		}
	}
	return nil
}

var (
	plainName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	plainHost = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.:-]*$`) // a DNS name or an IP (IPv6 without brackets)
	digits    = regexp.MustCompile(`^[0-9]{1,5}$`)
	plainPath = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)
)

// systemDirs are never a member's dir: a report saying so is wrong, or
// forged (an agent's /status is not authenticated).
var systemDirs = []string{"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib"}

// checkPaths refuses paths the scripts of procedure proc would move or copy
// that are not plain, clean, absolute, and below a system dir, and a data
// dir whose layout the procedures cannot handle: a symlink (cp -a and mv
// take the link, not the data), a mount root for the procedures that move
// it aside (mv fails there, after the stop; the survivor's only copies it).
func checkPaths(proc, member string, p Paths) error {
	if p.WALDir != "" {
		return fmt.Errorf("%s keeps its WAL in a dedicated dir %s, which these procedures do not move or copy: follow docs/runbooks/README.md by hand, moving the WAL dir with the data dir", member, p.WALDir)
	}
	switch {
	case p.LayoutUnknown != "":
		return fmt.Errorf("whether %s's data dir %s is a mount point or a symlink is not known (%s): check it on its node, then follow docs/runbooks/README.md by hand", member, p.DataDir, p.LayoutUnknown)
	case p.DataDirSymlink:
		return fmt.Errorf("%s's data dir %s is a symlink, which these procedures would copy and move as the link, not the data: follow docs/runbooks/README.md by hand on the link's target", member, p.DataDir)
	case p.DataDirMountPoint && proc != ProcedureSurvivor:
		return fmt.Errorf("%s's data dir %s is a mount point, which these procedures cannot move aside (mv fails there, after the stop): follow docs/runbooks/README.md by hand, moving the data dir's contents", member, p.DataDir)
	}
	if p.Manifest == "" || p.DataDir == "" || p.QuarantineDir == "" {
		return fmt.Errorf("the paths of %s on its node are not known (its agent did not report; manifest %q, data dir %q, quarantine %q)", member, p.Manifest, p.DataDir, p.QuarantineDir)
	}
	for _, v := range []string{p.Manifest, p.DataDir, p.QuarantineDir} {
		if !plainPath.MatchString(v) || filepath.Clean(v) != v || slices.Contains(systemDirs, v) {
			return fmt.Errorf("%s's path %q is not a plain, clean path below a system dir: write the commands by hand", member, v)
		}
	}
	return nil
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
	// EP, when set, points E at another member for one call (the stop
	// procedure asks its own member), as in the runbook's "Reaching etcd".
	flags := []string{"--endpoints=${EP:-" + shellQuote(survivorURL) + "}", "--dial-timeout=5s", "--command-timeout=15s"}
	if e.CACert != "" {
		flags = append(flags, "--cacert="+shellQuote(e.CACert))
	}
	if e.Cert != "" {
		flags = append(flags, "--cert="+shellQuote(e.Cert), "--key="+shellQuote(e.Key))
	}
	return fmt.Sprintf("set -euo pipefail\nE() { etcdctl %s \"$@\"; }\n", strings.Join(flags, " "))
}
