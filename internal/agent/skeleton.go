package agent

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"github.com/etcd-agent/etcd-agent/metrics"
)

// eventer records an Event (nodereport.Reporter).
type eventer interface {
	Eventf(eventType, reason, format string, args ...any)
}

// skeletonKeeper puts the empty, marked directory skeleton back into a data
// dir wiped while its member serves, as plan.DecideSkeleton says.
type skeletonKeeper struct {
	member, stateDir string
	id               watchdog.Identity
	dryRun           bool
	log              *zap.Logger
	metrics          *metrics.Metrics
	rep              eventer // nil: no API (Events are skipped)
	now              func() time.Time
	last             plan.SkeletonReason
}

func (c Config) newSkeletonKeeper(id watchdog.Identity, m *metrics.Metrics, rep eventer, log *zap.Logger) *skeletonKeeper {
	return &skeletonKeeper{member: id.Name, stateDir: c.StateDir, id: id, dryRun: c.DryRun, log: log, metrics: m, rep: rep, now: time.Now}
}

// consider decides on a full observation (every member probed now) and
// does what the decision says: the shell only looks (journal, dirs) and
// makes what it is told; the next observation sees the result.
func (k *skeletonKeeper) consider(o observation.Observation) bool {
	in := plan.SkeletonInput{Obs: o, DryRun: k.dryRun, Facts: k.look()}
	if j, _, err := journal.Load(k.stateDir, k.member); err != nil {
		in.JournalErr = err.Error()
	} else {
		in.Journal = j
	}
	d := plan.DecideSkeleton(in)
	if !d.Restore {
		k.say(d)
		return false
	}
	mk := localdisk.SkeletonMake{DataDir: d.Make.DataDir, MemberDir: d.Make.MemberDir, Marker: d.Make.Marker, SnapDir: d.Make.SnapDir, WALDir: d.Make.WALDir}
	made, err := localdisk.RestoreSkeleton(k.id.Dirs(), mk, localdisk.SkeletonMark{MadeAt: k.now().UTC().Format(time.RFC3339Nano), Member: k.member,
		MemberID: fmt.Sprintf("%x", o.Local.ID), ClusterID: fmt.Sprintf("%x", o.ClusterID), Why: d.Detail})
	if err != nil {
		// Decided again on the next observation (what was made fires
		// the data dir watch at once).
		k.log.Error("putting the wiped data dir's skeleton back failed", zap.Strings("made", made), zap.Error(err), zap.String("detail", d.Detail))
		k.last = ""
		return len(made) > 0
	}
	k.last = d.Reason
	k.metrics.SkeletonRestoresTotal.WithLabelValues(k.member).Inc()
	k.log.Warn("data dir wiped while the member serves: its empty skeleton put back, marked, so that etcd's purge does not end the member before it is replaced",
		zap.Strings("made", made), zap.String("memberID", fmt.Sprintf("%x", o.Local.ID)), zap.String("detail", d.Detail))
	if k.rep != nil {
		k.rep.Eventf("Warning", nodereport.ReasonDataDirSkeletonRestored, "%s: %s", k.member, d.Detail)
	}
	return true
}

// look gathers what DecideSkeleton reads of the member's dirs.
func (k *skeletonKeeper) look() plan.SkeletonFacts {
	d := k.id.Dirs()
	l, p := localdisk.LookSkeleton(d), localdisk.SkeletonPartsOf(d)
	f := plan.SkeletonFacts{Paths: plan.SkeletonPaths{DataDir: p.DataDir, MemberDir: p.MemberDir, SnapDir: p.SnapDir, WALDir: p.WALDir, Marker: p.Marker},
		DataDir: l.DataDir, DataDirNotDir: l.DataDirNotDir, DataDirParent: l.DataDirParent, MemberDir: l.MemberDir, SnapDir: l.SnapDir, DB: l.DB,
		WALDedicated: d.DedicatedWAL(), WALDir: l.WALDir, WALDirParent: l.WALDirParent, Marked: l.Marked,
		DataDirMountRoot: k.id.DataDirMountRoot, WALDirMountRoot: k.id.WALDirMountRoot}
	if l.Err != nil {
		f.Err = l.Err.Error()
	}
	return f
}

// say logs a decision not to make the skeleton once per change of reason,
// as a warning where the member is left to etcd's purge for want of a way.
func (k *skeletonKeeper) say(d plan.SkeletonDecision) {
	if d.Reason == k.last {
		return
	}
	k.last = d.Reason
	switch {
	case d.CannotPutBack():
		k.log.Warn("the wiped data dir's skeleton cannot be put back: etcd's purge may end the member", zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail))
	case d.DryRun():
		k.log.Info("dry run: the wiped data dir's skeleton is not put back", zap.String("detail", d.Detail))
	}
}
