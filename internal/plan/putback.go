package plan

import (
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// PutBack says what a failed attempt does with the local member it stopped.
type PutBack struct {
	// Restart: start the member again under its own ID with its own data
	// (static pod: the parked manifest goes back).
	Restart bool
	// Reason says why (or why not), for the journal, the log and the Event.
	Reason string
}

// DecidePutBack decides, when an attempt fails, whether the local member
// goes back to running as it was: a member is never left stopped by a
// failed attempt, unless restarting it would be unsafe or pointless. j is
// the attempt's journal, o a fresh observation, stopped whether the member
// runtime has the member stopped (static pod: the manifest is parked).
//
// Restart only when all hold: this attempt tried the stop
// (StopAttemptedAt) and the member is stopped; nothing was removed (the
// journal is before removed, and the fresh member list still has the old
// ID: a remove that timed out may have been applied, and rule 9 forbids
// reusing the data of a removed member under its ID); its data dir is
// intact (not quarantined by the attempt, and classified ok or in-use: a
// missing or corrupt one is why it was lost, and the start gate would hold
// it anyway). With a WAL in the data dir etcd ignores --initial-cluster and
// --initial-cluster-state, so the rejoin flags the runtime sets on a start
// are harmless for it.
func DecidePutBack(j record.Record, o observation.Observation, stopped bool) PutBack {
	no := func(format string, args ...any) PutBack { return PutBack{Reason: fmt.Sprintf(format, args...)} }
	switch {
	case j.StopAttemptedAt.IsZero():
		return no("never stopped by this attempt: nothing to put back")
	case !stopped:
		return no("the member runtime has the member running: nothing to put back")
	case j.Phase.AtLeast(record.PhaseRemoved):
		return no("old member %x was removed (phase %s): its data is never reused under its ID", uint64(j.OldMemberID), j.Phase)
	case j.QuarantinePath != "":
		return no("data dir quarantined at %s: not intact; the member stays stopped until the next attempt rejoins it", j.QuarantinePath)
	case o.MemberListError != "":
		return no("member list unknown (%s): cannot prove member %x was not removed; left stopped", o.MemberListError, uint64(j.OldMemberID))
	}
	if _, ok := o.Member(uint64(j.OldMemberID)); !ok || j.OldMemberID == 0 {
		return no("old member %x is not in the member list (removed?): its data is never reused under its ID", uint64(j.OldMemberID))
	}
	if !observation.DataDirUsable(o.Local.DataDirClass) {
		return no("data dir is %s, not intact: left stopped; the start gate holds it", o.Local.DataDirClass)
	}
	if !o.Local.DataDirVerified {
		// Only the cheap layout check answered (the deep one did not
		// finish): a db lost to corruption would look ok.
		return no("data dir is %s by its layout only, not verified by the deep check: left stopped; the next attempt rejoins it", o.Local.DataDirClass)
	}
	return PutBack{Restart: true, Reason: fmt.Sprintf("stopped by this attempt, member %x never removed, data dir intact (%s): restarted as it was",
		uint64(j.OldMemberID), o.Local.DataDirClass)}
}
