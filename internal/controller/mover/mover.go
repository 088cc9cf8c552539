// Package mover is a static-pod member's move between nodes (UC3, add
// first or through the snapshot store, docs/design.md §11): the source's
// side (plan.DecideMove) and the target's check that its source still asks.
package mover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/podfacts"
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

// moveCallTimeout bounds the mover's API calls of one look (a move under
// way; the observation loop waits for them); moveBackoff spaces the looks
// after the API did not answer.
const (
	moveCallTimeout = 5 * time.Second
	moveBackoff     = 30 * time.Second
)

// Mover is the source's side of a move (plan.DecideMove): it reads the
// move-to annotation on its Node, asks the target's agent, waits for its
// member to become a voter, then has the healer stop and remove the local
// member (a move-out, under the Lease). Every API call is bounded; a wait
// is a poll of the next observation, never a block.
// Config is what the mover reads of the agent's configuration.
type Config struct {
	Client   kubernetes.Interface
	Node     string
	StateDir string
	Store    string // --snapshot-store URL ("" none)
	// Timeout bounds a move's wait for its member on the target.
	Timeout time.Duration
	Log     *zap.Logger
	Rep     *nodereport.Reporter
	DryRun  bool
	// Requested says, from the agent's watch of its Node, whether it
	// carries a move-to.
	Requested func() bool
}

// New is the mover of the member on c.Node.
func New(c Config) *Mover {
	return &Mover{kc: c.Client, node: c.Node, stateDir: c.StateDir, store: c.Store, timeout: c.Timeout, log: c.Log, rep: c.Rep,
		dryRun: c.DryRun, requested: c.Requested}
}

type Mover struct {
	kc       kubernetes.Interface
	node     string
	stateDir string
	store    string // --snapshot-store URL ("" none)
	timeout  time.Duration
	log      *zap.Logger
	rep      *nodereport.Reporter
	dryRun   bool // --dry-run: plans only, never asks
	// requested says, from the agent's watch of its Node, whether it
	// carries a move-to: without one (and no move of ours under way) the
	// mover asks the API nothing, so a slow API never holds up the loop.
	requested func() bool
	notBefore time.Time // no look before (after an API error)
	lastWhy   string
	openStore func(ctx context.Context, url string) (*snapshotstore.Store, error)
}

type moveState struct {
	Target  string    `json:"target"`
	AskedAt time.Time `json:"askedAt"`
	From    string    `json:"from"` // the move-from value asked with
	// Members is the member list when the ask went out: the target's
	// answer must name a member new since (plan.MoveInput.MembersAtAsk).
	Members []plan.AskedMember `json:"members,omitempty"`
	// Denied is the target whose ask the API denied (the policy, RBAC):
	// not asked again while move-to names it, even when the answer and
	// the clearing of move-to were denied too.
	Denied string `json:"denied,omitempty"`
}

// pending: a move of ours under way, or a denial to forget once move-to
// is gone (a request of the same target after it is asked again).
func (st moveState) pending() bool { return st.Target != "" || st.Denied != "" }

// Consider runs one step of a requested move; retired says the member is
// gone from this node (the move-out succeeded).
func (mv *Mover) Consider(ctx context.Context, r memberstate.Result, h *heal.Healer) (retired bool) {
	if time.Now().Before(mv.notBefore) || mv.requested != nil && !mv.requested() && !mv.loadState().pending() {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, moveCallTimeout)
	defer cancel()
	self, err := mv.kc.CoreV1().Nodes().Get(actx, mv.node, metav1.GetOptions{})
	if err != nil {
		// The API is away: look again later, not at every poll (each look
		// holds the observation loop up to moveCallTimeout).
		mv.notBefore = time.Now().Add(moveBackoff)
		mv.say("cannot read this Node for a move request; looking again later", zap.Duration("in", moveBackoff), zap.Error(err))
		return false
	}
	target, requested := self.Annotations[nodereport.AnnotationMoveTo]
	st := mv.loadState()
	if st.Denied != "" {
		if requested && target == st.Denied {
			mv.say("move: the API denied the ask; not asked again until move-to changes", zap.String("target", target))
			return false
		}
		st = moveState{}
		mv.saveState(st)
	}
	if st.Target != "" && (!requested || st.Target != target) {
		mv.withdraw(actx, st) // withdrawn, or changed: the old ask goes
		st = moveState{}
		mv.saveState(st)
	}
	if !requested {
		return false
	}
	st.Target = target
	local := r.Observation.Local.ID
	in := plan.MoveInput{Now: time.Now(), Obs: r.Observation, Node: mv.node,
		DryRun:          mv.dryRun || self.Annotations[nodereport.AnnotationRecoverDryRun] == "true",
		StoreConfigured: mv.store != "", AskedAt: st.AskedAt, Timeout: mv.timeout, MembersAtAsk: st.Members}
	in.Target = mv.targetState(actx, target, local, st)
	if st.AskedAt.IsZero() && st.From != "" {
		// An ask whose write may have been applied (an older agent's
		// record): adopt it, never ask anew: the target's agent may have
		// begun on it (it clears the ask when it starts) and its answer
		// names this ask. Bounded from now.
		st.AskedAt = time.Now().UTC()
		mv.saveState(st)
		in.AskedAt = st.AskedAt
		mv.log.Info("move: the ask found on the target is this agent's; waiting for its answer", zap.String("target", target), zap.String("ask", st.From))
	}
	if st.AskedAt.IsZero() && mv.store != "" {
		in.StoreError = mv.checkStore(actx)
	}
	d := plan.DecideMove(in)
	request := "move-to " + target
	if in.DryRun {
		request += " (dry-run)"
	}
	switch d.Action {
	case plan.Refuse:
		mv.answer(ctx, st, nodereport.Refusal(request, string(d.Reason), d.Detail, time.Now()), "Warning", nodereport.ReasonRecoveryRefused)
	case plan.Finish:
		mv.answer(ctx, st, nodereport.LastRecovery{Request: request, Result: nodereport.ResultFailed, Reason: string(d.Reason),
			StartedAt: st.AskedAt, FinishedAt: time.Now().UTC(), Message: d.Detail}, "Warning", nodereport.ReasonRecoveryFailed)
	case plan.MoveRelay:
		// Recorded before the ask: an ask this agent forgot would leave a
		// member on the target that no answer ties to this move.
		now := time.Now().UTC()
		st.AskedAt, st.From, st.Members = now, nodereport.MoveFrom(mv.node, d.MemberID, now), plan.MembersOf(r.Observation)
		mv.saveState(st)
		err := mv.ask(actx, target, st.From)
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			// Denied (the node-scope policy, RBAC): asking again gets the
			// same answer; the move ends, said on this Node, and is not
			// asked again while move-to names this target.
			mv.answer(ctx, moveState{Target: target}, nodereport.LastRecovery{Request: request, Result: nodereport.ResultFailed, Reason: string(plan.ReasonMoveFailed),
				StartedAt: now, FinishedAt: time.Now().UTC(), Message: "the API denied the ask on " + target + ": " + err.Error()}, "Warning", nodereport.ReasonRecoveryFailed)
			mv.saveState(moveState{Denied: target})
			return false
		case askNotApplied(err):
			mv.say("the API refused the ask; asking again at the next look", zap.String("target", target), zap.Error(err))
			mv.saveState(moveState{Target: target})
			return false
		case err != nil:
			// No answer: the write may have been applied and the target's
			// agent may begin on it at once. The ask stays ours (recorded
			// above), waited for, bounded by the move's timeout, withdrawn
			// at its end; never asked anew under another move-from.
			mv.say("the ask's write got no answer; waiting for the target's answer to it", zap.String("target", target), zap.String("ask", st.From), zap.Error(err))
			return false
		}
		mv.log.Info("move: asked the target's agent to add its member", zap.String("target", target), zap.String("ask", st.From), zap.String("detail", d.Detail))
		mv.event("Normal", nodereport.ReasonRecoveryStarted, "move to %s: %s", target, d.Detail)
	case plan.MoveRetire:
		return mv.retire(ctx, r, h, st, in)
	default:
		mv.say("move waiting", zap.String("target", target), zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail))
	}
	return false
}

// retire has the healer stop and remove the local member (a move-out under
// the Lease) once it may begin; until then (the target's agent still holds
// the Lease, ...) the move waits, bounded by its timeout.
func (mv *Mover) retire(ctx context.Context, r memberstate.Result, h *heal.Healer, st moveState, in plan.MoveInput) bool {
	if st.AskedAt.IsZero() { // a restart lost the ask: the wait is bounded from now
		st.AskedAt = time.Now().UTC()
		mv.saveState(st)
	}
	req := &plan.Request{Action: plan.ActionMoveOut, Target: st.Target, Replacement: in.Target.Answer.MemberID}
	if d := h.Plan(ctx, r, req); d.Action != plan.Begin {
		if !st.AskedAt.IsZero() && time.Since(st.AskedAt) > mv.timeout {
			mv.answer(ctx, st, nodereport.LastRecovery{Request: "move-to " + st.Target, Result: nodereport.ResultFailed, Reason: string(plan.ReasonMoveTimedOut),
				StartedAt: st.AskedAt, FinishedAt: time.Now().UTC(), Message: "the member on " + st.Target + " serves, but the old member could not be retired: " + string(d.Reason) + ": " + d.Detail},
				"Warning", nodereport.ReasonRecoveryFailed)
			return false
		}
		mv.say("move: the old member's retire waits", zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail))
		return false
	}
	out := h.Consider(ctx, r, req)
	if out.Result != "" && !out.Retired {
		// Failed or refused: the healer wrote last-recovery; the move ends
		// (a failed stop put the member back), never retried unasked.
		mv.end(ctx, st)
	}
	return out.Retired
}

// targetState reads the target Node: found, Ready, our ask (or another)
// still there, and its agent's last answer to a move-in of our member.
func (mv *Mover) targetState(ctx context.Context, name string, local uint64, st moveState) plan.TargetNode {
	t := plan.TargetNode{Name: name}
	n, err := mv.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			mv.say("cannot read the move's target Node", zap.String("target", name), zap.Error(err))
			t.Unreadable = true
		}
		return t
	}
	t.Found, t.Ready = true, podfacts.NodeReady(n)
	if action, ok := n.Annotations[nodereport.AnnotationRecover]; ok {
		from := n.Annotations[nodereport.AnnotationMoveFrom]
		switch {
		case action == nodereport.ActionMoveIn && st.From != "" && from == st.From:
			t.Asked = true
		case action == nodereport.ActionMoveIn && from != "":
			t.OtherAsk = from
		case action == nodereport.ActionMoveIn:
			t.OtherAsk = nodereport.AnnotationRecover + "=" + action + " without " + nodereport.AnnotationMoveFrom
		default: // a person's request there: not ours to overwrite
			t.OtherAsk = nodereport.AnnotationRecover + "=" + action
		}
	}
	lr, ok, _ := nodereport.LastRecoveryFrom(n.Annotations)
	if ok && lr.Request == nodereport.ActionMoveIn && strings.HasPrefix(lr.MoveFrom, nodereport.MoveSource(mv.node, local)) {
		id, _ := strconv.ParseUint(lr.MemberID, 16, 64)
		t.Answer = &plan.MoveAnswer{Result: lr.Result, Reason: lr.Reason, Message: lr.Message, MemberID: id, ThisAsk: lr.MoveFrom == st.From}
	}
	return t
}

// askNotApplied: the API answered the ask's write with a client error
// (a conflict, ...): it was not applied. A timeout or a server error may
// have been.
func askNotApplied(err error) bool {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return false
	}
	code := st.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}

// checkStore lists the store, bounded: "" when it answered.
func (mv *Mover) checkStore(ctx context.Context) string {
	open := mv.openStore
	if open == nil {
		open = snapshotstore.Open
	}
	return snapshotstore.WhyNotAnswering(ctx, func(ctx context.Context) (*snapshotstore.Store, error) { return open(ctx, mv.store) })
}

// ask puts the move-in request on the target Node.
func (mv *Mover) ask(ctx context.Context, target, from string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		nodereport.AnnotationRecover: nodereport.ActionMoveIn, nodereport.AnnotationMoveFrom: from,
		nodereport.AnnotationRecoverDryRun: nil}}})
	_, err := mv.kc.CoreV1().Nodes().Patch(ctx, target, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// answer ends the request: last-recovery, an Event, the triggers cleared.
func (mv *Mover) answer(ctx context.Context, st moveState, lr nodereport.LastRecovery, etype, reason string) {
	mv.log.Warn("move answered", zap.String("result", lr.Result), zap.String("reason", lr.Reason), zap.String("detail", lr.Message))
	mv.event(etype, reason, "%s: %s (%s)", lr.Request, lr.Result, lr.Message)
	if mv.rep != nil {
		_ = nodereport.WriteLastRecovery(ctx, mv.rep, mv.log, lr)
	}
	mv.end(ctx, st)
}

// end clears the move: our ask on the target (if still there), the
// trigger on our Node, the state file.
func (mv *Mover) end(ctx context.Context, st moveState) {
	actx, cancel := context.WithTimeout(ctx, moveCallTimeout)
	defer cancel()
	mv.withdraw(actx, st)
	if mv.rep != nil {
		if err := mv.rep.ClearMoveRequest(actx); err != nil {
			mv.log.Warn("clearing the move request failed; it is answered again at the next look", zap.Error(err))
		}
	}
	mv.saveState(moveState{})
}

// withdraw removes our ask from the target Node if it is still there
// (conditional on the Node's resourceVersion): a target agent that starts
// later never acts on a move that ended.
func (mv *Mover) withdraw(ctx context.Context, st moveState) {
	if st.Target == "" || st.From == "" {
		return
	}
	n, err := mv.kc.CoreV1().Nodes().Get(ctx, st.Target, metav1.GetOptions{})
	if err != nil || n.Annotations[nodereport.AnnotationMoveFrom] != st.From || n.Annotations[nodereport.AnnotationRecover] != nodereport.ActionMoveIn {
		return // not our ask (a person's request there now is theirs)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": map[string]any{
		nodereport.AnnotationRecover: nil, nodereport.AnnotationMoveFrom: nil}}})
	if _, err := mv.kc.CoreV1().Nodes().Patch(ctx, st.Target, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		mv.log.Warn("withdrawing the move's ask from the target failed", zap.String("target", st.Target), zap.Error(err))
	}
}

func (mv *Mover) event(etype, reason, format string, args ...any) {
	if mv.rep != nil {
		mv.rep.Eventf(etype, reason, format, args...)
	}
}

// say logs a waiting line once per change of what it says.
func (mv *Mover) say(msg string, fields ...zap.Field) {
	why := fmt.Sprint(msg, fields)
	if why == mv.lastWhy {
		return
	}
	mv.lastWhy = why
	mv.log.Info(msg, fields...)
}

func (mv *Mover) loadState() moveState {
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

func (mv *Mover) saveState(st moveState) {
	b, _ := json.Marshal(st)
	if err := fsutil.WriteFileAtomic(filepath.Join(mv.stateDir, moveFile), b, 0o600); err != nil {
		mv.log.Warn("recording the move's state failed", zap.Error(err))
	}
}
