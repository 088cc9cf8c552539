package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"go.uber.org/zap"
)

// Report is what `etcd-agent status` prints: what the agent sees, the
// member's state and why.
type Report struct {
	At            time.Time               `json:"at"`
	State         memberstate.State       `json:"state"`
	Reason        string                  `json:"reason"`
	Detail        string                  `json:"detail"`
	MajorityLost  bool                    `json:"majorityLost"`
	Voters        int                     `json:"voters"`
	HealthyVoters int                     `json:"healthyVoters"`
	Quorum        int                     `json:"quorum"`
	QuorumMargin  int                     `json:"quorumMargin"`
	Observation   observation.Observation `json:"observation"`
	// Decision is what the decision core said on this observation: what
	// the agent does or would do, or why not.
	Decision *plan.Decision `json:"decision,omitempty"`
	// Pin is what the agent has pinned of the member (cluster and member ID).
	Pin string `json:"pin,omitempty"`
	// Manifest is the manifest keeper's answer while the static-pod
	// manifest is gone (a static pod): put back when, or why not.
	Manifest *plan.ManifestRestore `json:"manifest,omitempty"`
	// LastRecovery is the member's recovery journal in the state dir (the
	// open one, or the last closed one); JournalError says why it could
	// not be read.
	LastRecovery *journal.Record `json:"lastRecovery,omitempty"`
	JournalError string          `json:"journalError,omitempty"`
	// ServedAt is when /status served it, on the agent's clock: a
	// reader takes the report's age from it, not from its own clock.
	ServedAt time.Time `json:"servedAt,omitzero"`
	// Where is where this node keeps the member's files: what the
	// majority-lost restore commands need (status --cluster).
	Where *Where `json:"where,omitempty"`
	// Progress is how far the long steps of a recovery running now are
	// (the streams, the catch-up), as the daemon last wrote it.
	Progress []progress.Estimate `json:"progress,omitempty"`
	// DataDirHash is etcd's HashKV of the stopped member's db, read by
	// /status when the majority is lost (DataDirHashNote: why none yet).
	DataDirHash     *localdisk.KVHash `json:"dataDirHash,omitempty"`
	DataDirHashNote string            `json:"dataDirHashNote,omitempty"`
}

// NewReport summarises one watchdog result.
func NewReport(r memberstate.Result) Report {
	o := r.Observation
	voters, healthy := o.Voters(), o.HealthyVoters()
	q := memberstate.Quorum(voters)
	return Report{At: o.At, State: r.Verdict.State, Reason: r.Verdict.Reason, Detail: r.Verdict.Detail,
		MajorityLost: r.Verdict.MajorityLost, Voters: voters, HealthyVoters: healthy, Quorum: q,
		QuorumMargin: memberstate.QuorumMargin(o), Observation: o}
}

// ExitCode is status's exit code: 0 healthy (or learner), 1 degraded or
// down, 2 lost, 3 majority lost (it wins over the member's own state).
func (r Report) ExitCode() int {
	switch {
	case r.MajorityLost:
		return 3
	case r.State == memberstate.Lost:
		return 2
	case r.State == memberstate.Healthy || r.State == memberstate.Learner:
		return 0
	default:
		return 1
	}
}

// Status makes one observation. Without history a member is "lost" only by
// the at-once rule (data dir gone and not serving); otherwise "down".
func Status(ctx context.Context, c Config) (Report, error) {
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Second
	}
	id, err := ResolveIdentity(c)
	if err != nil {
		return Report{}, err
	}
	wd, err := c.NewWatchdog(id, c.statePin(id.Name))
	if err != nil {
		return Report{}, err
	}
	defer wd.Close()
	res := memberstate.NewAssessor(c.GracePeriod).Assess(wd.Observe(ctx, time.Now()), wd.SampleGap())
	rep := NewReport(res)
	rep.Where = c.where(id)
	var j journal.Record
	if c.StateDir != "" {
		var ok bool
		var err error
		if j, ok, err = journal.Load(c.StateDir, id.Name); err != nil {
			rep.JournalError = err.Error()
		} else if ok {
			rep.LastRecovery = &j
		}
		rep.Progress = daemonProgress(c.StateDir, time.Now(), c.PollInterval)
		if p, ok, err := pin.Load(c.StateDir, id.Name); err != nil {
			rep.Pin = "unreadable: " + err.Error()
		} else if ok {
			rep.Pin = p.String()
		}
	}
	// What the core would say (the Lease is not asked: a one-shot status
	// assumes it could be taken).
	qdir := rep.Where.QuarantineDir
	sp := localdisk.SpaceFor(id.DataDir, qdir)
	in := plan.Input{Now: res.Observation.At, Obs: res.Observation, Verdict: res.Verdict, Journal: j,
		APIAvailable: true, FreeBytes: sp.QuarantineFree, DataDirFreeBytes: sp.DataDirFree, DataDirOtherFS: sp.DataDirOtherFS,
		Backups: localdisk.BackupsHint(qdir), ManifestMissing: c.manifestMissing(), LearnerVersion: c.learnerVersion()}
	// Where the dirs lie, as the running agent sees it (before, status said
	// "begin" where the agent refused a WAL dir at a mount point).
	heal.LayoutFacts(&in, heal.Config{DataDir: id.DataDir, WALDir: id.WALDir, QuarantineDir: qdir, WALDirMountRoot: id.WALDirMountRoot})
	d := plan.Decide(in, c.PlanConfig())
	rep.Decision = &d
	return rep, nil
}

// Where is where a node keeps its member's files.
type Where struct {
	Node          string `json:"node,omitempty"`
	Manifest      string `json:"manifest,omitempty"`
	DataDir       string `json:"dataDir"`
	WALDir        string `json:"walDir,omitempty"`
	QuarantineDir string `json:"quarantineDir"`
	// StateDir is the member's state dir (a pod member's holds the files
	// its start gate reads: a person's --force-new-cluster request).
	StateDir string `json:"stateDir,omitempty"`
	// The data dir's layout as read when the report was made or served
	// (WithLayout): a mount root cannot be moved aside, and a symlink is
	// copied and moved as the link, not the data. LayoutChecked: it was
	// read (an older agent says nothing); LayoutError: why it could not be.
	DataDirMountPoint bool   `json:"dataDirMountPoint,omitempty"`
	DataDirSymlink    bool   `json:"dataDirSymlink,omitempty"`
	LayoutChecked     bool   `json:"layoutChecked,omitempty"`
	LayoutError       string `json:"layoutError,omitempty"`
}

// WithLayout is w with its data dir's layout read now.
func (w Where) WithLayout() *Where {
	mount, err := localdisk.IsMountPoint(w.DataDir)
	link, lerr := localdisk.IsSymlink(w.DataDir)
	w.DataDirMountPoint, w.DataDirSymlink, w.LayoutChecked, w.LayoutError = mount, link, err == nil && lerr == nil, ""
	if err = errors.Join(err, lerr); err != nil {
		w.LayoutError = err.Error()
	}
	return &w
}

// where is Where for the static-pod member id.
func (c Config) where(id watchdog.Identity) *Where {
	qdir := c.QuarantineDir
	if qdir == "" {
		qdir = filepath.Join(filepath.Dir(id.DataDir), "etcd-agent-quarantine")
	}
	return Where{Node: c.NodeName, Manifest: c.StaticPodManifest, DataDir: id.DataDir, WALDir: id.WALDir, QuarantineDir: qdir, StateDir: c.StateDir}.WithLayout()
}

// daemonProgress is the progress of a recovery the daemon runs now, from
// its status file in stateDir: only a file written within a few polls (a
// daemon that stopped writing it is not recovering any more).
func daemonProgress(stateDir string, now time.Time, poll time.Duration) []progress.Estimate {
	r, err := DaemonReport(stateDir)
	if err != nil || now.Sub(r.At) > max(30*time.Second, 3*poll) {
		return nil
	}
	return r.Progress
}

// DaemonReport is the daemon's latest report, from its status file in
// stateDir (static pods).
func DaemonReport(stateDir string) (Report, error) {
	var r Report
	b, err := os.ReadFile(filepath.Join(stateDir, StatusFile))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, err
}

// Hex formats a member or cluster ID as etcdctl does.
func Hex(id uint64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("%x", id)
}

// PodMemberStatus is the daemon's latest report on one pod member.
type PodMemberStatus struct {
	// Pod is "namespace/name".
	Pod    string `json:"pod"`
	Report Report `json:"report"`
	Error  string `json:"error,omitempty"`
}

// PodMembersStatus reads the latest report the daemon wrote for each pod
// member it serves (--member-source=pods), from their state dirs under
// stateDir, sorted by pod.
func PodMembersStatus(stateDir string) ([]PodMemberStatus, error) {
	dirs, err := filepath.Glob(filepath.Join(stateDir, "members", "*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	var out []PodMemberStatus
	for _, d := range dirs {
		ns, name, ok := strings.Cut(filepath.Base(d), "_")
		if !ok {
			continue
		}
		s := PodMemberStatus{Pod: ns + "/" + name}
		b, err := os.ReadFile(filepath.Join(d, StatusFile))
		if err == nil {
			err = json.Unmarshal(b, &s.Report)
		}
		if err != nil {
			s.Error = err.Error()
		}
		if time.Since(s.Report.At) > 30*time.Second {
			s.Report.Progress = nil // the daemon stopped writing: no step of its runs now
		}
		out = append(out, s)
	}
	return out, nil
}
