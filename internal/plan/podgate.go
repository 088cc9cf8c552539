package plan

import (
	"errors"
	"fmt"
	"path"
)

// What a member pod that is deleted comes back as, judged on what the
// shell read of it (its spec, its controller, its StatefulSet, its claim):
// the steward frees a lost node's member, and the pod runtime stops one by
// deleting its pod, only when the pod that comes back is held by the start
// gate on this member's state dir and keeps its data where the recovery
// began (docs/design.md §4, "steward" and rule 8; §11).

// PodGate is how a pod's etcd container runs the start gate, as its spec
// says (membersource.GateOf).
type PodGate struct {
	Wrapped      bool   // etcd runs through `etcd-agent gate -- etcd ...`
	StateDir     string // its --state-dir ("" none)
	MemberSource string // its --member-source
}

// PodGateHolds says why g would not hold its member's etcd until the agent
// prepared it (nil: it holds), reading stateDir on the node ("": any state
// dir, as for a pod that comes back on another node, whose own agent
// checks the path).
func PodGateHolds(g PodGate, stateDir string) error {
	switch {
	case !g.Wrapped:
		return errors.New("its etcd container does not run etcd through the start gate (etcd-agent gate --state-dir=... -- etcd ...)")
	case g.StateDir == "":
		return errors.New("its start gate has no --state-dir; give it the agent's member state dir through a hostPath volume")
	case stateDir != "" && path.Clean(g.StateDir) != path.Clean(stateDir):
		return fmt.Errorf("its start gate reads %s, not this agent's %s", g.StateDir, stateDir)
	case g.MemberSource != "pods":
		// Without it a gate on a new node or claim, its cluster unreachable,
		// would let etcd bootstrap under the member's old IDs.
		return errors.New("its start gate lacks --member-source=pods (it must wait for the agent's word from the cluster's record before a first bootstrap)")
	}
	return nil
}

// PodOwner is a pod's controller reference (nil: none).
type PodOwner struct {
	Kind, APIVersion, Name, UID string
}

// NotAStatefulSetPod says why no apps/v1 StatefulSet re-creates the pod
// owner controls, before anything is read ("": read owner.Name's
// StatefulSet, then StatefulSetNotTheOwner).
func NotAStatefulSetPod(owner *PodOwner) string {
	switch {
	case owner == nil:
		return "no controller re-creates the pod: freeing its place would only shrink the cluster"
	case owner.Kind != "StatefulSet" || owner.APIVersion != "apps/v1":
		return fmt.Sprintf("it is re-created by %s %s (%s), whose template the agent does not read", owner.Kind, owner.Name, owner.APIVersion)
	}
	return ""
}

// StatefulSetNotTheOwner says why the StatefulSet read under owner's name
// (found, of uid) is not the one that re-creates the pod ("": it is): gone,
// or one of that name re-created after an orphaning delete.
func StatefulSetNotTheOwner(owner PodOwner, found bool, uid string) string {
	switch {
	case !found:
		return fmt.Sprintf("its StatefulSet %s is gone: a new one would re-create it from a template not read", owner.Name)
	case uid != owner.UID:
		return fmt.Sprintf("StatefulSet %s (%s) is not the pod's controller (%s)", owner.Name, uid, owner.UID)
	}
	return ""
}

// PodTemplate is what a pod's StatefulSet would re-create it from: its
// revisions, the pod's own, and the start gate of the pod and of the
// template (GateErr: the spec could not be read for it).
type PodTemplate struct {
	StatefulSet                     string
	CurrentRevision, UpdateRevision string
	PodRevision                     string
	PodGate, TemplateGate           PodGate
	PodGateErr, TemplateGateErr     error
}

// TemplateUngated says why the stuck pod might come back on a live node
// without the start gate holding etcd there ("": it comes back gated). A
// rollout re-creates a pod from the current or the update revision (a
// partition): the pod shows the current one, the template the update one;
// both must be gated, and the pod must be of one of them.
func TemplateUngated(t PodTemplate) string {
	if cur, upd := t.CurrentRevision, t.UpdateRevision; cur != upd && t.PodRevision != cur && t.PodRevision != upd {
		return fmt.Sprintf("StatefulSet %s is rolling out (%s to %s) and the pod is of revision %q", t.StatefulSet, cur, upd, t.PodRevision)
	}
	for _, c := range []struct {
		what string
		gate PodGate
		err  error
	}{{"the pod", t.PodGate, t.PodGateErr}, {"its StatefulSet " + t.StatefulSet + "'s template", t.TemplateGate, t.TemplateGateErr}} {
		err := c.err
		if err == nil {
			err = PodGateHolds(c.gate, "")
		}
		if err != nil {
			return fmt.Sprintf("%s: %v", c.what, err)
		}
	}
	return ""
}

// PodData is where a member pod keeps its data: its data dir and the
// claim it is on ("" a host path).
type PodData struct {
	DataDir     string
	PVC, PVCUID string
}

// SameData refuses (ReasonMemberDataMoved) a pod that now keeps its data
// elsewhere than where the recovery began (a new claim, a restore to a new
// PVC): the recovery would quarantine and prepare a data dir the pod no
// longer mounts.
func SameData(began, now PodData) error {
	if began.DataDir == now.DataDir && began.PVCUID == now.PVCUID {
		return nil
	}
	return Refused(ReasonMemberDataMoved, fmt.Errorf("the pod now keeps its data in %s (claim %s %s), not in %s (claim %s %s) where this recovery began: not stopped; the member is read again under its new claim",
		now.DataDir, now.PVC, now.PVCUID, began.DataDir, began.PVC, began.PVCUID))
}

// ClaimKept refuses (ReasonMemberDataMoved) a claim that is being deleted
// or was replaced (read now: of uid, deleting): the pod that comes back
// would not keep its data where the recovery began.
func ClaimKept(began PodData, uid string, deleting bool) error {
	if uid == began.PVCUID && !deleting {
		return nil
	}
	return Refused(ReasonMemberDataMoved, fmt.Errorf("the claim %s (%s) is being deleted or was replaced (now %s): not stopped; the pod that comes back would not keep its data in %s",
		began.PVC, began.PVCUID, uid, began.DataDir))
}

// NotRecreatedGated refuses (ReasonNotGated, as the steward does) to stop
// a member whose pod nothing would re-create held at its gate (why, from
// NotAStatefulSetPod or StatefulSetNotTheOwner): a bare pod never comes
// back, another controller's comes back under another name and state dir,
// unheld.
func NotRecreatedGated(why string) error {
	return Refused(ReasonNotGated, fmt.Errorf("%s: not stopped; a deleted pod would not come back as this member, held by its start gate", why))
}

// TemplateKeepsData refuses (ReasonMemberDataMoved) a StatefulSet whose
// template would re-create the pod with its data elsewhere than where the
// recovery began. The pod itself is unchanged (so the loop is not
// restarted): only a person can end this, by rolling the pod or the
// template back.
func TemplateKeepsData(statefulSet, templateDataDir, beganDataDir string) error {
	if templateDataDir == beganDataDir {
		return nil
	}
	return Refused(ReasonMemberDataMoved, fmt.Errorf("its StatefulSet %s's template would re-create it with its data in %s, not in %s where this recovery began: not stopped; roll the pod to the new template (or revert the template) first",
		statefulSet, templateDataDir, beganDataDir))
}
