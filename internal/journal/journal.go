// Package journal is the recovery's write-ahead record: one small JSON file
// per member in the agent's state dir, written atomically (temp file, fsync,
// rename, fsync of the dir) before and after every step, so that an agent
// killed at any point resumes from what it did, and never repeats an add
// that was applied or removes a member twice.
package journal

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// The record types live in package record (plain data, for plan); these
// names keep the journal's callers as they were.
type (
	Phase    = record.Phase
	MemberID = record.MemberID
	Record   = record.Record
)

// Phases, results and kinds (see package record).
const (
	PhaseNone           = record.PhaseNone
	PhaseStarted        = record.PhaseStarted
	PhaseStopped        = record.PhaseStopped
	PhaseSnapshotted    = record.PhaseSnapshotted
	PhaseRemoved        = record.PhaseRemoved
	PhaseLearnerAdded   = record.PhaseLearnerAdded
	PhasePrepared       = record.PhasePrepared
	PhaseMemberStarted  = record.PhaseMemberStarted
	PhasePromoted       = record.PhasePromoted
	PhaseVerified       = record.PhaseVerified
	PhaseDone           = record.PhaseDone
	ResultSucceeded     = record.ResultSucceeded
	ResultFailed        = record.ResultFailed
	ResultRefused       = record.ResultRefused
	KindRollbackLearner = record.KindRollbackLearner
	// KindRestoreClientURLs: see record.KindRestoreClientURLs.
	KindRestoreClientURLs = record.KindRestoreClientURLs
)

// Path is member's journal file in stateDir.
func Path(stateDir, member string) string {
	return filepath.Join(stateDir, "journal-"+member+".json")
}

// Load reads member's journal; ok is false when there is none.
func Load(stateDir, member string) (r Record, ok bool, err error) {
	b, err := os.ReadFile(Path(stateDir, member))
	if os.IsNotExist(err) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, false, fmt.Errorf("journal %s is unreadable (move it aside to start afresh): %w", Path(stateDir, member), err)
	}
	// Save writes a record where its Member says: one naming another
	// member (or none) would be saved over that member's journal, or
	// outside the state dir.
	if r.Member != member {
		return Record{}, false, fmt.Errorf("journal %s names member %q, not %q (move it aside to start afresh)", Path(stateDir, member), r.Member, member)
	}
	return r, true, nil
}

// Save writes r atomically: a crash leaves the old or the new record, never half of one.
func Save(stateDir string, r Record) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(Path(stateDir, r.Member), append(b, '\n'), 0o600)
}
