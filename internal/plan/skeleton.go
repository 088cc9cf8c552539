package plan

import (
	"fmt"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// A member whose data dir was wiped while it runs keeps serving, correctly,
// from its open files, until etcd's purge goroutines next list member/snap
// and the WAL dir (every 30 s, fileutil.purgeFile): a dir that is gone ends
// the process ("failed to purge wal file ... no such file or directory",
// fatal). DecideSkeleton says when the agent puts the empty directories
// back, and marks them, so that the purge finds nothing to remove and the
// member lives until it is replaced in turn (docs/recovery.md, "A wiped
// member that still serves").

// SkeletonPaths name the skeleton's parts on the node (for messages).
type SkeletonPaths struct {
	DataDir, MemberDir, SnapDir, WALDir, Marker string
}

// SkeletonFacts is what the shell saw of the member's dirs right before
// DecideSkeleton (localdisk.LookSkeleton).
type SkeletonFacts struct {
	Paths SkeletonPaths
	// DataDir: the data dir is a directory; DataDirNotDir: something else
	// is at its path; DataDirParent: the data dir's parent is a directory.
	DataDir, DataDirNotDir, DataDirParent bool
	MemberDir, SnapDir                    bool
	// DB: member/snap/db is there (the member's data was not wiped).
	DB bool
	// WALDedicated: etcd runs with --wal-dir. WALDir: the WAL dir (that one
	// or member/wal) is a directory; WALDirParent: the dedicated WAL dir's
	// parent is a directory.
	WALDedicated, WALDir, WALDirParent bool
	// Marked: member/ holds the skeleton marker.
	Marked bool
	// DataDirMountRoot, WALDirMountRoot: a volume is mounted right at that
	// path in etcd's container (a hostPath or a claim mounted at
	// --data-dir): a removed mount root cannot be put back where etcd sees
	// it (its container keeps the removed directory).
	DataDirMountRoot, WALDirMountRoot bool
	// Err says why the dirs could not be looked at ("" when they could).
	Err string
}

// SkeletonInput is everything DecideSkeleton looks at.
type SkeletonInput struct {
	// Obs is a full observation (every member probed now).
	Obs observation.Observation
	// Journal is the member's journal: an open record owns the data dir.
	// JournalErr says why it could not be read ("" when it could).
	Journal    record.Record
	JournalErr string
	Facts      SkeletonFacts
	DryRun     bool
}

// SkeletonParts are the parts of the skeleton to make, in this order: the
// data dir, member/, the marker (before any dir the purge lists), member/snap,
// the WAL dir.
type SkeletonParts struct {
	DataDir, MemberDir, Marker, SnapDir, WALDir bool
}

// SkeletonReason says why a skeleton is made or not (log lines, status).
type SkeletonReason string

// Skeleton reasons.
const (
	SkeletonRestore        SkeletonReason = "restore"
	SkeletonInPlace        SkeletonReason = "skeleton-in-place"
	SkeletonNotWiped       SkeletonReason = "not-wiped"
	SkeletonNothingMissing SkeletonReason = "nothing-missing"
	SkeletonRecoveryOpen   SkeletonReason = "recovery-open"
	SkeletonJournalUnread  SkeletonReason = "journal-unreadable"
	SkeletonIdentity       SkeletonReason = "identity-unproven"
	SkeletonNotServing     SkeletonReason = "not-serving"
	SkeletonLearner        SkeletonReason = "learner"
	SkeletonNotADirectory  SkeletonReason = "not-a-directory"
	SkeletonLookFailed     SkeletonReason = "look-failed"
	SkeletonMountRootGone  SkeletonReason = "mount-root-gone"
	SkeletonParentGone     SkeletonReason = "parent-gone"
	SkeletonDryRun         SkeletonReason = "dry-run"
)

// SkeletonDecision is DecideSkeleton's answer.
type SkeletonDecision struct {
	Restore bool
	Make    SkeletonParts
	Reason  SkeletonReason
	Detail  string
}

// DecideSkeleton says whether to put the empty directory skeleton of a
// wiped member's data dir back while the member serves. Only a serving
// voter matched by name, peer URL and the ID its own client URL answers
// with, whose db path is gone (a running etcd always has member/snap/db at
// its path: defrag and a received snapshot rename into it), with no record
// of its journal open (a recovery stops and quarantines it; nothing of the
// agent's may race those steps). Only missing dirs are made, never one a
// removed mount root was (etcd's container keeps the removed dir: what is
// made on the node never reaches it), never inside a parent that is gone,
// and the marker goes into member/ before any dir the purge lists, so the
// skeleton is never unmarked: the data dir check classes a marked dir
// corrupt whatever etcd writes into it later, the start gate holds it, and
// the heal quarantines it. The member's state stays in its open files: the
// skeleton keeps the purge from ending it, nothing more (it still ends at
// its next WAL segment cut: see docs/recovery.md).
func DecideSkeleton(in SkeletonInput) SkeletonDecision {
	no := func(r SkeletonReason, format string, args ...any) SkeletonDecision {
		return SkeletonDecision{Reason: r, Detail: fmt.Sprintf(format, args...)}
	}
	f, j, l := in.Facts, in.Journal, in.Obs.Local
	switch {
	case in.JournalErr != "":
		return no(SkeletonJournalUnread, "the member's journal cannot be read (%s): a recovery may own the data dir", in.JournalErr)
	case j.Active():
		return no(SkeletonRecoveryOpen, "recovery %s of the member is open (phase %s): its steps own the data dir", j.ID, j.Phase)
	case l.Match != observation.MatchOK:
		return no(SkeletonIdentity, "the local member is not proven (%s: %s): nothing is made for a process that may not be ours", l.Match, l.MatchDetail)
	case !l.Serving:
		return no(SkeletonNotServing, "the member does not serve: nothing runs from the wiped files, a skeleton would keep nothing alive")
	case l.IsLearner:
		return no(SkeletonLearner, "the member is a learner: it holds no vote a skeleton would keep")
	case f.Err != "":
		return no(SkeletonLookFailed, "the data dir could not be looked at: %s", f.Err)
	case f.DataDirNotDir:
		return no(SkeletonNotADirectory, "the data dir %s is not a directory: nothing is made over it", f.Paths.DataDir)
	case f.DB:
		return no(SkeletonNotWiped, "the db %s is in place: the member's data was not wiped (a WAL dir alone gone is not taken for a wipe: a --wal-dir read wrong would look the same)",
			f.Paths.SnapDir+"/db")
	}
	mk := SkeletonParts{DataDir: !f.DataDir, MemberDir: !f.MemberDir, SnapDir: !f.SnapDir, WALDir: !f.WALDir}
	if mk == (SkeletonParts{}) {
		if f.Marked {
			return no(SkeletonInPlace, "the skeleton is in place, marked (%s)", f.Paths.Marker)
		}
		return no(SkeletonNothingMissing, "every dir etcd's purge lists is there: nothing to make")
	}
	switch {
	case mk.DataDir && f.DataDirMountRoot:
		return no(SkeletonMountRootGone, "the data dir %s was the root of a volume mounted at --data-dir and is gone: etcd's container keeps the removed dir, "+
			"nothing made on the node reaches it; the member ends at etcd's next purge", f.Paths.DataDir)
	case mk.DataDir && !f.DataDirParent:
		return no(SkeletonParentGone, "the data dir's parent %s is gone too: more than the data dir was lost; nothing is made", parentOf(f.Paths.DataDir))
	case mk.WALDir && f.WALDedicated && f.WALDirMountRoot:
		return no(SkeletonMountRootGone, "the dedicated WAL dir %s was the root of a volume mounted at --wal-dir and is gone: etcd's container keeps the removed dir, "+
			"nothing made on the node reaches it; the member ends at etcd's next purge", f.Paths.WALDir)
	case mk.WALDir && f.WALDedicated && !f.WALDirParent:
		return no(SkeletonParentGone, "the dedicated WAL dir's parent %s is gone too: more than the member's dirs were lost; nothing is made", parentOf(f.Paths.WALDir))
	}
	mk.Marker = !f.Marked
	what := partsText(mk, f.Paths)
	if in.DryRun {
		return no(SkeletonDryRun, "dry run: would make %s for member %x, which serves from the files of its wiped data dir", what, l.ID)
	}
	return SkeletonDecision{Restore: true, Make: mk, Reason: SkeletonRestore, Detail: fmt.Sprintf(
		"member %x serves from the files of its wiped data dir (%s); etcd's purge lists member/snap and the WAL dir every 30 s and ends the process when one is gone: "+
			"making %s, empty and marked, so that it lives until it is replaced (the marked dir is never started on: the gate holds it, a rejoin replaces it)",
		l.ID, l.DataDirClass, what)}
}

// partsText lists the parts to make, in their order.
func partsText(mk SkeletonParts, p SkeletonPaths) string {
	var out []string
	for _, part := range []struct {
		on   bool
		path string
	}{{mk.DataDir, p.DataDir}, {mk.MemberDir, p.MemberDir}, {mk.Marker, p.Marker + " (marker)"}, {mk.SnapDir, p.SnapDir}, {mk.WALDir, p.WALDir}} {
		if part.on {
			out = append(out, part.path)
		}
	}
	return strings.Join(out, ", ")
}

// parentOf is a slash path's parent (no path/filepath in the decision core).
func parentOf(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return "/"
}
