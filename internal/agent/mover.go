package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// moveFile keeps, in the state dir, which node this agent asked to take
// its member and when: a restarted agent knows the voter there is the
// move's (plan.MoveInput.AskedAt).
const moveFile = "move.json"

// mover is the source's side of a move (plan.DecideMove): it reads the
// move-to annotation on its Node, asks the target's agent, waits for its
// member to become a voter, then has the healer stop and remove the local
// member (a move-out, under the Lease). Every API call is bounded; a wait
// is a poll of the next observation, never a block.
type mover struct {
	kc        kubernetes.Interface
	node      string
	stateDir  string
	store     string // --snapshot-store URL ("" none)
	timeout   time.Duration
	log       *zap.Logger
	rep       *nodereport.Reporter
	lastWhy   string
	openStore func(ctx context.Context, url string) (*snapshotstore.Store, error)
}

type moveState struct {
	Target  string    `json:"target"`
	AskedAt time.Time `json:"askedAt"`
}

// consider runs one step of a requested move; retired says the member is
// gone from this node (the move-out succeeded).
func (mv *mover) consider(ctx context.Context, r memberstate.Result, h *heal.Healer) (retired bool) {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	self, err := mv.kc.CoreV1().Nodes().Get(actx, mv.node, metav1.GetOptions{})
	if err != nil {
		mv.say("cannot read this Node for a move request", zap.Error(err))
		return false
	}
	target, requested := self.Annotations[nodereport.AnnotationMoveTo]
	st := mv.loadState()
	if !requested {
		if st.Target != "" {
			mv.saveState(moveState{}) // answered (or withdrawn)
		}
		return false
	}
	if st.Target != target {
		st = moveState{Target: target}
	}
	in := plan.MoveInput{Now: time.Now(), Obs: r.Observation, Node: mv.node, DryRun: self.Annotations[nodereport.AnnotationRecoverDryRun] == "true",
		StoreConfigured: mv.store != "", AskedAt: st.AskedAt, Timeout: mv.timeout}
	in.Target = mv.targetState(actx, target, r, st)
	if !in.Target.Asked && st.AskedAt.IsZero() && mv.store != "" {
		in.StoreError = mv.checkStore(actx)
	}
	d := plan.DecideMove(in)
	request := "move-to " + target
	if in.DryRun {
		request += " (dry-run)"
	}
	switch d.Action {
	case plan.Refuse:
		mv.answer(ctx, nodereport.Refusal(request, string(d.Reason), d.Detail, time.Now()), "Warning", nodereport.ReasonRecoveryRefused)
	case plan.Finish:
		now := time.Now().UTC()
		mv.answer(ctx, nodereport.LastRecovery{Request: request, Result: nodereport.ResultFailed, Reason: string(d.Reason),
			StartedAt: st.AskedAt, FinishedAt: now, Message: d.Detail}, "Warning", nodereport.ReasonRecoveryFailed)
	case plan.MoveRelay:
		if err := mv.ask(actx, target, nodereport.MoveFrom(mv.node, d.MemberID)); err != nil {
			mv.say("asking the target's agent failed; retrying", zap.String("target", target), zap.Error(err))
			return false
		}
		mv.saveState(moveState{Target: target, AskedAt: time.Now().UTC()})
		mv.log.Info("move: asked the target's agent to add its member", zap.String("target", target), zap.String("detail", d.Detail))
		mv.event("Normal", nodereport.ReasonRecoveryStarted, "move to %s: %s", target, d.Detail)
	case plan.MoveRetire:
		if st.AskedAt.IsZero() { // dry-run never gets here; a restart kept no state
			mv.saveState(moveState{Target: target, AskedAt: time.Now().UTC()})
		}
		out := h.Consider(ctx, r, &plan.Request{Action: plan.ActionMoveOut, Target: target})
		return out.Retired
	default:
		mv.say("move waiting", zap.String("target", target), zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail))
	}
	return false
}

// targetState reads the target Node: found, Ready, still carrying our
// request, and its agent's answer to a move-in finished since we asked.
func (mv *mover) targetState(ctx context.Context, name string, r memberstate.Result, st moveState) plan.TargetNode {
	t := plan.TargetNode{Name: name}
	n, err := mv.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			mv.say("cannot read the move's target Node", zap.String("target", name), zap.Error(err))
			t.Found = true // unknown: not "no such node"; Ready false refuses only before asking
		}
		return t
	}
	t.Found, t.Ready = true, nodeReady(n)
	want := nodereport.MoveFrom(mv.node, r.Observation.Local.ID)
	t.Asked = n.Annotations[nodereport.AnnotationRecover] == nodereport.ActionMoveIn && n.Annotations[nodereport.AnnotationMoveFrom] == want
	if lr, ok, _ := nodereport.LastRecoveryFrom(n.Annotations); ok && !st.AskedAt.IsZero() &&
		lr.Request == nodereport.ActionMoveIn && lr.Result != nodereport.ResultSucceeded && lr.FinishedAt.After(st.AskedAt) {
		t.Answer = &plan.MoveAnswer{Result: lr.Result, Reason: lr.Reason, Message: lr.Message}
	}
	return t
}

// checkStore lists the store, bounded: "" when it answered.
func (mv *mover) checkStore(ctx context.Context) string {
	open := mv.openStore
	if open == nil {
		open = snapshotstore.Open
	}
	s, err := open(ctx, mv.store)
	if err == nil {
		defer s.Close()
		err = s.Check(ctx)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// ask puts the move-in request on the target Node.
func (mv *mover) ask(ctx context.Context, target, from string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		nodereport.AnnotationRecover: nodereport.ActionMoveIn, nodereport.AnnotationMoveFrom: from,
		nodereport.AnnotationRecoverDryRun: nil}}})
	_, err := mv.kc.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// answer ends the request: last-recovery, an Event, the trigger cleared.
func (mv *mover) answer(ctx context.Context, lr nodereport.LastRecovery, etype, reason string) {
	mv.log.Warn("move answered", zap.String("result", lr.Result), zap.String("reason", lr.Reason), zap.String("detail", lr.Message))
	mv.event(etype, reason, "%s: %s (%s)", lr.Request, lr.Result, lr.Message)
	if mv.rep == nil {
		return
	}
	if err := mv.rep.ClearRequest(ctx); err != nil {
		mv.log.Warn("clearing the move request failed; it is answered again at the next poll", zap.Error(err))
	}
	_ = nodereport.WriteLastRecovery(ctx, mv.rep, mv.log, lr)
	mv.saveState(moveState{})
}

func (mv *mover) event(etype, reason, format string, args ...any) {
	if mv.rep != nil {
		mv.rep.Eventf(etype, reason, format, args...)
	}
}

// say logs a waiting line once per change of what it says.
func (mv *mover) say(msg string, fields ...zap.Field) {
	why := fmt.Sprint(msg, fields)
	if why == mv.lastWhy {
		return
	}
	mv.lastWhy = why
	mv.log.Info(msg, fields...)
}

func (mv *mover) loadState() moveState {
	var st moveState
	b, err := os.ReadFile(filepath.Join(mv.stateDir, moveFile))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		mv.log.Warn("the move's state file is unreadable; starting the move's bookkeeping afresh", zap.Error(err))
	}
	return st
}

func (mv *mover) saveState(st moveState) {
	b, _ := json.Marshal(st)
	if err := fsutil.WriteFileAtomic(filepath.Join(mv.stateDir, moveFile), b, 0o600); err != nil {
		mv.log.Warn("recording the move's state failed", zap.Error(err))
	}
}
