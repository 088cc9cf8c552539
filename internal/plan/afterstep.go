package plan

// A step's result comes back in here, as raft takes messages: the executor
// (heal) runs the step Decide chose, says what came of it (StepResult: a
// fact about the run, never a judgement), and AfterStep says what happens
// next. docs/design.md §6 ("The executor's loop") lists the outcomes.

// MaxStepErrors is how many times in a row a step may fail before the
// attempt is given up (each retry is on a fresh observation), and how many
// polls in a row an open journal waits on a Lease it cannot read before the
// member it parked is started again (AfterUnreadLease).
const MaxStepErrors = 5

// StepCause is what a step's run came back with.
type StepCause string

// Step causes, as the executor classifies a step's error.
const (
	StepOK StepCause = "ok"
	// StepFailed: any error not named below (retried).
	StepFailed StepCause = "failed"
	// StepRefused: the step's own re-check right before it acted found what
	// it would act on is not what was decided on (a StepRefusal).
	StepRefused StepCause = "refused"
	// StepHashMismatch: verify found comparable voters that disagree.
	StepHashMismatch StepCause = "hash-mismatch"
	// StepLeaseLost: the fence found the Lease held by another, or not held.
	StepLeaseLost StepCause = "lease-lost"
	// StepEtcdAsksToWait: etcd's strict reconfig check refused the
	// membership change until every member has been connected a while.
	StepEtcdAsksToWait StepCause = "etcd-asks-to-wait"
	// StepLeaseTakeUnanswered: the API did not answer the take of the Lease.
	StepLeaseTakeUnanswered StepCause = "lease-take-unanswered"
	// StepEarlierStreamLingers: a backup streamed under an earlier hold of
	// the Lease has not ended after its cancel; the Lease was not taken.
	StepEarlierStreamLingers StepCause = "earlier-stream-lingers"
	// StepResumeNotSavedDiskFull: a resume's journal found no room on disk
	// before the take; the Lease was not taken.
	StepResumeNotSavedDiskFull StepCause = "resume-not-saved-disk-full"
)

// StepResult is one step's run, with the facts AfterStep needs.
type StepResult struct {
	// Decided is the decision the step carried out.
	Decided Decision
	Cause   StepCause
	// Refusal is a StepRefused step's reason.
	Refusal Reason
	// Err is the step's error as text ("" when it succeeded).
	Err string
	// JournalOpen: a recovery was open (journaled) when the step ran.
	JournalOpen bool
	// MoveReleased: a pod move has released its member's claim; it only
	// goes forward, its step retried until the recovery timeout.
	MoveReleased bool
	// PutBackRestarts: a member the open attempt parked would be started
	// again as it was if the attempt failed (DecidePutBack).
	PutBackRestarts bool
	// ErrorsInARow counts the failed steps before this one, since the last
	// that succeeded (kept in the executor's memory for one attempt: a
	// restarted agent's attempt starts again at 0, bounded by the
	// recovery timeout as every attempt is).
	ErrorsInARow int
}

// Then is what follows a step.
type Then string

// What follows a step.
const (
	// ThenGoOn: observe again and decide the next step.
	ThenGoOn Then = "go-on"
	// ThenFail: the attempt ends failed, closed with Next.Decision.
	ThenFail Then = "fail"
	// ThenRefuse: nothing began (the Lease was never taken); the attempt
	// ends refused with Next.Decision, said once, the next poll asks again.
	ThenRefuse Then = "refuse"
	// ThenWaitToResume: an open journal's take went unanswered; it waits
	// open, refused with Next.Decision, said once.
	ThenWaitToResume Then = "wait-to-resume"
	// ThenStopLeaseLost: the Lease is not ours: stop at once, the journal
	// stays open for this agent or the holder to resume.
	ThenStopLeaseLost Then = "stop-lease-lost"
)

// Next is AfterStep's answer.
type Next struct {
	Then Then
	// Decision is what the attempt ends with (ThenFail, ThenRefuse,
	// ThenWaitToResume, ThenStopLeaseLost).
	Decision Decision
	// CloseOpening: a failing attempt closes the record its begin would
	// have opened when no journal was open yet (the refused and the
	// failed steps; a hash mismatch is found on an open one).
	CloseOpening bool
	// CountRefusal: the end is a refusal, counted as every "no" is.
	CountRefusal bool
	// ErrorsInARow is the count to carry to the next step.
	ErrorsInARow int
	// Pause: wait a step interval before observing again (a wait, a
	// catch-up, a verify, or a step that did not succeed).
	Pause bool
	// ReloadJournal: decide the next step on the journal on disk, never on
	// a record the failed step changed in memory and could not save (a
	// full disk): no removal follows a backup no saved journal names.
	ReloadJournal bool
}

// Begins reports whether d opens a recovery (takes the Lease).
func (d Decision) Begins() bool {
	return d.Action == Begin || d.Action == RollbackLearner || d.Action == BeginRestoreClientURLs
}

// AfterStep says what follows a step's run.
func AfterStep(r StepResult) Next {
	d := r.Decided
	pause := d.Action == Nothing || d.Action == WaitCatchUp || d.Action == Verify || r.Cause != StepOK
	next := Next{Then: ThenGoOn, ErrorsInARow: r.ErrorsInARow, Pause: pause}
	takeReason := takeRefusal(r.Cause)
	switch {
	case r.Cause == StepHashMismatch:
		return Next{Then: ThenFail, Decision: Decision{Action: Finish, Reason: ReasonHashMismatch, Detail: r.Err}}
	case r.Cause == StepRefused && !r.MoveReleased:
		// The same answer would come again: the attempt ends now, closed
		// failed with backoff (a stop was tried; a template only a person
		// can fix must not churn the Lease).
		return Next{Then: ThenFail, Decision: Decision{Action: Finish, Reason: r.Refusal, Detail: r.Err}, CloseOpening: true, CountRefusal: true}
	case takeReason != ReasonNone && d.Begins() && !r.JournalOpen:
		// Nothing began: a refusal, not a failure (no backoff); the next
		// poll asks again on a fresh observation.
		return Next{Then: ThenRefuse, Decision: Decision{Action: Refuse, Reason: takeReason, Detail: "the recovery Lease could not be taken: " + r.Err}}
	case takeReason != ReasonNone && d.Action == Begin && !r.PutBackRestarts:
		// A resume's take: it was never held, so nothing failed. A member
		// the attempt parked with its data intact is not left stopped
		// meanwhile: that take fails as a step (below), and after
		// MaxStepErrors the failed attempt starts it again.
		return Next{Then: ThenWaitToResume, Decision: Decision{Action: Refuse, Reason: takeReason, Detail: "the recovery Lease could not be taken to resume: " + r.Err}}
	case r.Cause == StepLeaseLost:
		return Next{Then: ThenStopLeaseLost, Decision: Decision{Action: Nothing, Reason: ReasonLeaseLost, Detail: r.Err}}
	case r.Cause == StepEtcdAsksToWait:
		// A wait, bounded by the recovery timeout and logged, not a
		// failed step.
		return next
	case r.Cause != StepOK:
		next.ErrorsInARow++
		if next.ErrorsInARow >= MaxStepErrors && !r.MoveReleased {
			return Next{Then: ThenFail, Decision: d, CloseOpening: true, ErrorsInARow: next.ErrorsInARow}
		}
		next.ReloadJournal = r.JournalOpen
		return next
	}
	next.ErrorsInARow = 0
	return next
}

// takeRefusal is the refusal of a begin whose take of the Lease was never
// made or never answered (ReasonNone for any other cause).
func takeRefusal(c StepCause) Reason {
	switch c {
	case StepLeaseTakeUnanswered:
		return ReasonAPIUnavailable
	case StepEarlierStreamLingers:
		return ReasonRecoveryInProgress
	case StepResumeNotSavedDiskFull:
		return ReasonDiskFull
	}
	return ReasonNone
}

// AfterUnreadLease counts the polls in a row an open journal has waited on
// a Lease it cannot read while the member it parked would be started again
// as it was (putBackRestarts): at MaxStepErrors the attempt is given up
// (giveUp) and the member started, as after as many unanswered takes.
// Starting a member with its own data under its own ID changes no
// membership, so it needs no Lease.
func AfterUnreadLease(polls int, journalOpen bool, d Decision, putBackRestarts bool) (next int, giveUp bool) {
	if !journalOpen || d.Action != Nothing || d.Reason != ReasonAPIUnavailable || !putBackRestarts {
		return 0, false
	}
	polls++
	if polls < MaxStepErrors {
		return polls, false
	}
	return 0, true
}
