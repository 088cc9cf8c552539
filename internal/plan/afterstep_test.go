package plan

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Every way a step's run can come back, and what follows it.
func TestAfterStepSaysWhatFollowsEachResult(t *testing.T) {
	begin := Decision{Action: Begin}
	remove := Decision{Action: RemoveMember, MemberID: 7}
	cases := []struct {
		name string
		in   StepResult
		want Next
	}{
		{"ok resets the count", StepResult{Decided: remove, Cause: StepOK, ErrorsInARow: 3},
			Next{Then: ThenGoOn}},
		{"ok on a wait pauses", StepResult{Decided: Decision{Action: WaitCatchUp}, Cause: StepOK},
			Next{Then: ThenGoOn, Pause: true}},
		{"a failure is counted, retried on the saved journal", StepResult{Decided: remove, Cause: StepFailed, Err: "boom", JournalOpen: true, ErrorsInARow: 1},
			Next{Then: ThenGoOn, ErrorsInARow: 2, Pause: true, ReloadJournal: true}},
		{"the fifth failure in a row fails the attempt", StepResult{Decided: remove, Cause: StepFailed, Err: "boom", JournalOpen: true, ErrorsInARow: MaxStepErrors - 1},
			Next{Then: ThenFail, Decision: remove, CloseOpening: true, ErrorsInARow: MaxStepErrors}},
		{"a released move only goes forward", StepResult{Decided: Decision{Action: ReleasePod}, Cause: StepFailed, JournalOpen: true, MoveReleased: true, ErrorsInARow: 9},
			Next{Then: ThenGoOn, ErrorsInARow: 10, Pause: true, ReloadJournal: true}},
		{"a hash mismatch fails at once", StepResult{Decided: Decision{Action: Verify}, Cause: StepHashMismatch, Err: "voters differ", JournalOpen: true},
			Next{Then: ThenFail, Decision: Decision{Action: Finish, Reason: ReasonHashMismatch, Detail: "voters differ"}}},
		{"a step's refusal ends the attempt, counted", StepResult{Decided: Decision{Action: StopMember}, Cause: StepRefused, Refusal: ReasonMemberDataMoved, Err: "moved", JournalOpen: true},
			Next{Then: ThenFail, Decision: Decision{Action: Finish, Reason: ReasonMemberDataMoved, Detail: "moved"}, CloseOpening: true, CountRefusal: true}},
		{"a take the API did not answer refuses a begin", StepResult{Decided: begin, Cause: StepLeaseTakeUnanswered, Err: "timeout"},
			Next{Then: ThenRefuse, Decision: Decision{Action: Refuse, Reason: ReasonAPIUnavailable, Detail: "the recovery Lease could not be taken: timeout"}}},
		{"an earlier stream that lingers refuses a rollback's begin", StepResult{Decided: Decision{Action: RollbackLearner}, Cause: StepEarlierStreamLingers, Err: "lingers"},
			Next{Then: ThenRefuse, Decision: Decision{Action: Refuse, Reason: ReasonRecoveryInProgress, Detail: "the recovery Lease could not be taken: lingers"}}},
		{"a resume whose journal found no room waits open", StepResult{Decided: begin, Cause: StepResumeNotSavedDiskFull, Err: "ENOSPC", JournalOpen: true},
			Next{Then: ThenWaitToResume, Decision: Decision{Action: Refuse, Reason: ReasonDiskFull, Detail: "the recovery Lease could not be taken to resume: ENOSPC"}}},
		{"a resume that would put a parked member back fails as a step", StepResult{Decided: begin, Cause: StepLeaseTakeUnanswered, JournalOpen: true, PutBackRestarts: true, ErrorsInARow: MaxStepErrors - 1},
			Next{Then: ThenFail, Decision: begin, CloseOpening: true, ErrorsInARow: MaxStepErrors}},
		{"the Lease lost stops at once", StepResult{Decided: remove, Cause: StepLeaseLost, Err: "held by node2", JournalOpen: true, ErrorsInARow: 2},
			Next{Then: ThenStopLeaseLost, Decision: Decision{Action: Nothing, Reason: ReasonLeaseLost, Detail: "held by node2"}}},
		{"etcd asking to wait is not a failure", StepResult{Decided: Decision{Action: AddLearner}, Cause: StepEtcdAsksToWait, JournalOpen: true, ErrorsInARow: 2},
			Next{Then: ThenGoOn, ErrorsInARow: 2, Pause: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := AfterStep(c.in); got != c.want {
				t.Fatalf("AfterStep(%+v)\n got %+v\nwant %+v", c.in, got, c.want)
			}
		})
	}
}

func TestAfterUnreadLeaseGivesUpOnTheFifthPollInARow(t *testing.T) {
	wait := Decision{Action: Nothing, Reason: ReasonAPIUnavailable}
	polls := 0
	for i := 1; i < MaxStepErrors; i++ {
		var giveUp bool
		if polls, giveUp = AfterUnreadLease(polls, true, wait, true); giveUp || polls != i {
			t.Fatalf("poll %d: polls %d, give up %v", i, polls, giveUp)
		}
	}
	if n, giveUp := AfterUnreadLease(polls, true, wait, false); giveUp || n != 0 {
		t.Fatalf("a member that would not be put back: polls %d, give up %v; want the count reset", n, giveUp)
	}
	if n, giveUp := AfterUnreadLease(polls, true, Decision{Action: Nothing, Reason: ReasonLeaseHeldByOther}, true); giveUp || n != 0 {
		t.Fatalf("another wait: polls %d, give up %v; want the count reset", n, giveUp)
	}
	if n, giveUp := AfterUnreadLease(polls, true, wait, true); !giveUp || n != 0 {
		t.Fatalf("poll %d: polls %d, give up %v; want it given up", MaxStepErrors, n, giveUp)
	}
}

func TestTheResultsAnAttemptClosesWith(t *testing.T) {
	now := time.Unix(1, 0)
	untouched := record.Record{Phase: record.PhaseStarted}
	stopTried := record.Record{Phase: record.PhaseStarted, StopAttemptedAt: now}
	stopped := record.Record{Phase: record.PhaseStopped}
	why := Decision{Action: Finish, Reason: ReasonMajorityLost}
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"finish without a reason", ResultOfFinish(Decision{Action: Finish}, stopped), record.ResultSucceeded},
		{"finish refused before any change", ResultOfFinish(why, untouched), record.ResultRefused},
		{"finish after a stop was tried", ResultOfFinish(why, stopTried), record.ResultFailed},
		{"finish after the stop", ResultOfFinish(why, stopped), record.ResultFailed},
		{"rollback done", ResultOfRollback(Decision{Reason: ReasonLearnerRolledBack}, stopped), record.ResultSucceeded},
		{"rollback before the remove", ResultOfRollback(why, untouched), record.ResultRefused},
		{"rollback after the remove", ResultOfRollback(why, record.Record{Phase: record.PhaseRemoved}), record.ResultFailed},
		{"restore verified", ResultOfRestore(Decision{}, record.Record{Phase: record.PhaseVerified, ClientURLsRestoredAt: now}, false), record.ResultSucceeded},
		{"restore failed", ResultOfRestore(Decision{}, record.Record{Phase: record.PhaseVerified}, true), record.ResultFailed},
		{"restore never restarted", ResultOfRestore(why, untouched, false), record.ResultRefused},
		{"restore restarted, then refused", ResultOfRestore(why, record.Record{Phase: record.PhaseStarted, ClientURLsRestoredAt: now}, false), record.ResultFailed},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s, want %s", c.name, c.got, c.want)
		}
	}
}

// What a reason means to the executor is said in plan (meaning.go): no
// code outside plan compares a Reason (or a skeleton's or the start gate's
// reason) with one of
// plan's codes, in an == or != or a switch's case. The rule index, the
// metrics' label lists and tests may name them.
func TestNoCodeOutsidePlanBranchesOnAReason(t *testing.T) {
	isCode := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		name := sel.Sel.Name
		if !ok || pkg.Name != "plan" {
			return false
		}
		notACode := func(suffixes ...string) bool {
			return slices.ContainsFunc(suffixes, func(s string) bool { return strings.HasSuffix(name, s) })
		}
		switch {
		case strings.HasPrefix(name, "Reason"):
			return name != "Reason"
		case strings.HasPrefix(name, "Skeleton"):
			return !notACode("Decision", "Input", "Facts", "Paths", "Parts")
		case strings.HasPrefix(name, "Gate"):
			// The start gate's verdict codes (gate.go), not its types.
			return !notACode("Verdict", "Input")
		}
		return false
	}
	fset := token.NewFileSet()
	// plan's codes as written: a string literal equal to one is the same
	// comparison (`lr.Reason == "dry-run"`).
	codes := map[string]bool{}
	planFiles, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range planFiles {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Values) == len(vs.Names) {
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Reason" {
					for _, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING && lit.Value != `""` {
							codes[lit.Value] = true
						}
					}
				}
			}
			return true
		})
	}
	if len(codes) < 30 {
		t.Fatalf("found %d of plan's reason codes: the walk missed them", len(codes))
	}
	isCodeLiteral := func(e ast.Expr) bool {
		lit, ok := e.(*ast.BasicLit)
		return ok && lit.Kind == token.STRING && codes[lit.Value]
	}
	found := 0
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "../..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == filepath.Join("..", "..", "internal", "plan") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		found++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isCode(n.X) || isCode(n.Y)) {
					t.Errorf("%s: compares with one of plan's reasons: ask plan what it means (meaning.go)", fset.Position(n.Pos()))
				}
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isCodeLiteral(n.X) || isCodeLiteral(n.Y)) {
					t.Errorf("%s: compares with one of plan's reasons, written as a string: ask plan what it means (meaning.go)", fset.Position(n.Pos()))
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if isCode(e) || isCodeLiteral(e) {
						t.Errorf("%s: a case on one of plan's reasons: ask plan what it means (meaning.go)", fset.Position(e.Pos()))
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 100 {
		t.Fatalf("only %d Go files read outside plan: the walk missed the repo", found)
	}
}
