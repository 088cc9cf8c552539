package plan

import (
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// The steward (docs/design.md §11, UC1): a member pod whose node is lost for
// good is stuck (the StatefulSet never replaces a pod it cannot see gone,
// and its PVC is bound to a PV on the dead node). An agent with a healthy
// local member of the same cluster, holding that cluster's Lease, frees
// the member's place: it removes the member, keeps the old PV's data
// (reclaim policy Retain), deletes the PVC and force-deletes the pod. The
// StatefulSet re-creates the pod, the scheduler binds a PV on a live node,
// and that node's agent rejoins the member as a new learner.
//
// Each step is judged from the actual state (member list, objects), so a
// steward that dies mid-way is resumed by any agent without repeating one.
const (
	StewardRetainPV       Action = "retain-pv"        // set the old PV's reclaim policy to Retain
	StewardDeletePVC      Action = "delete-pvc"       // delete the PVC bound to the old PV
	StewardForceDeletePod Action = "force-delete-pod" // delete the stuck pod with grace 0
)

// Steward refusal codes.
const (
	// ReasonNodeReady: the member's node is Ready (or only cordoned).
	ReasonNodeReady Reason = "node-ready"
	// ReasonMemberServing: the node is NotReady but the member still
	// answers (a partitioned kubelet): nothing is lost.
	ReasonMemberServing Reason = "member-serving"
	// ReasonStewardNotHealthy: the steward's own member is not healthy.
	ReasonStewardNotHealthy Reason = "steward-not-healthy"
	// ReasonNotGated: the member pod might come back without the start
	// gate (for pods, on a node-local state dir), or from a controller
	// whose template the agent does not read: etcd could start on the new
	// node before an agent prepared it. The pod runtime's stop refuses
	// with it too (a StepRefusal) a pod no StatefulSet controls: nothing
	// would re-create it as this member, held by its gate.
	ReasonNotGated Reason = "not-gated"
)

// StewardConfig is the steward's configuration.
type StewardConfig struct {
	// NodeLostGrace: how long the node's Lease must have gone unrenewed.
	NodeLostGrace time.Duration
	// MemberGrace: how long the member must have been silent (rule 6:
	// one bad look never triggers anything).
	MemberGrace time.Duration
	// AutoHealOff (--auto-heal=false: a person is at work, as the manual
	// procedures assume) and DryRun: the steward says what it would do
	// and does none of it.
	AutoHealOff, DryRun bool
}

// StewardInput is what the steward looked at for one member of its
// cluster that lives on another node.
type StewardInput struct {
	Now time.Time
	// Obs is a fresh observation made from the steward's own member;
	// Local is the steward's member's verdict.
	Obs   observation.Observation
	Local memberstate.Verdict
	// Target is the member (its name and peer URLs, from its pod).
	TargetName     string
	TargetPeerURLs []string
	// Pod: the target's pod, bound to PodNode ("" when no pod is there).
	PodExists bool
	PodNode   string
	// Node: the pod's node, as the API says.
	NodeExists bool
	NodeReady  bool
	// NodeLeaseStaleFor: for how long, on the steward's own clock, the
	// node's Lease has been seen unrenewed (its renewTime unchanged, or
	// no Lease or Node at all); the kubelet's clock is never compared
	// with ours.
	NodeLeaseStaleFor time.Duration
	// TargetSilentFor: for how long, on the steward's clock, the target
	// member has been seen not serving (0: serving at the last look).
	TargetSilentFor time.Duration
	// ClusterID is the steward's cluster; RemovedMark is what the pod's
	// etcd-agent.io/removed-member annotation says a steward removed
	// ("" when none): the PV, claim and pod of a member that is not in
	// the list are freed only when a steward of this cluster removed it.
	ClusterID   uint64
	RemovedMark string
	// Claims: every claim of the pod still bound to a PV on PodNode (a
	// data volume, a dedicated WAL volume, any other claim template), in
	// the pod's volume order. Each one pins the re-created pod to the dead
	// node, so each is freed; a claim on a volume that is not node-local
	// goes with the pod and is not listed.
	Claims []StewardClaim
	// TemplateUngated says why the pod might come back on a live node
	// without the start gate ("" when its StatefulSet re-creates it
	// through the gate).
	TemplateUngated string
	// LearnerVersion is the etcd version the re-created pod will run (the
	// image its StatefulSet re-creates it with; "" unknown): its learner
	// must be one the cluster takes once the target is removed.
	LearnerVersion string
}

// StewardClaim is one node-local claim of the target's pod: its PVC, the
// PV on the lost node it is bound to, whether that PV is still there and
// kept (reclaim policy Retain), whether the claim is being deleted.
type StewardClaim struct {
	PVC, PV              string
	PVExists, PVRetained bool
	Deleting             bool
}

// DecideSteward says which step frees the target member's place now, or
// why none may be taken (Refuse), or that nothing is left (Nothing).
func DecideSteward(in StewardInput, cfg StewardConfig) Decision {
	d := decideSteward(in, cfg)
	if d.Action == Refuse || d.Action == Nothing {
		return d
	}
	switch {
	case cfg.AutoHealOff:
		return refuse(ReasonAutoHealDisabled, fmt.Sprintf("automatic actions are off (--auto-heal=false): would %s: %s", d.Action, d.Detail))
	case cfg.DryRun:
		return refuse(ReasonDryRun, fmt.Sprintf("would %s: %s", d.Action, d.Detail))
	}
	return d
}

func decideSteward(in StewardInput, cfg StewardConfig) Decision {
	o := in.Obs
	n := o.Voters()
	if !in.PodExists || in.PodNode == "" {
		return wait(ReasonNotNeeded, "no pod of "+in.TargetName+" is bound to a node")
	}
	// The evidence that the node is lost, all of it, every time: a node
	// that comes back stops the steward between any two steps.
	if in.NodeExists && in.NodeReady {
		return refuse(ReasonNodeReady, fmt.Sprintf("node %s is Ready (a cordoned node is too): its pods are not touched", in.PodNode))
	}
	if in.NodeLeaseStaleFor < cfg.NodeLostGrace {
		return refuse(ReasonInGracePeriod, fmt.Sprintf("node %s is NotReady; its node Lease has been seen unrenewed for %s, the node-lost grace is %s",
			in.PodNode, in.NodeLeaseStaleFor.Round(time.Second), cfg.NodeLostGrace))
	}
	target, inList := memberByPeer(o, in.TargetName, in.TargetPeerURLs)
	if inList && target.Serving {
		return refuse(ReasonMemberServing, fmt.Sprintf("node %s is lost to the API but member %s (%x) still answers: nothing is lost", in.PodNode, in.TargetName, target.ID))
	}
	if !inList {
		if named, ok := memberNamed(o, in.TargetName); ok {
			return refuse(ReasonAmbiguousIdentity, fmt.Sprintf("member %s (%x) is listed with peer URLs %v, its pod says %v: not acting on a guess",
				in.TargetName, named.ID, named.PeerURLs, in.TargetPeerURLs))
		}
	}
	if inList && in.TargetSilentFor < cfg.MemberGrace {
		return refuse(ReasonInGracePeriod, fmt.Sprintf("member %s (%x) has been silent for %s, the grace is %s",
			in.TargetName, target.ID, in.TargetSilentFor.Round(time.Second), cfg.MemberGrace))
	}
	if in.Local.State != memberstate.Healthy {
		return refuse(ReasonStewardNotHealthy, "the steward's own member is "+string(in.Local.State)+": only an agent with a healthy member of the cluster acts for another")
	}
	if in.TemplateUngated != "" {
		return refuse(ReasonNotGated, "the pod might come back on a live node without the start gate holding etcd: "+in.TemplateUngated)
	}
	if quorumLost(o) {
		return refuse(ReasonMajorityLost, fmt.Sprintf("%d of %d voters serve, quorum is %d (or no leader): restoring from a backup is a human's call",
			o.ServingVoters(), n, memberstate.Quorum(n)))
	}
	if inList {
		for _, l := range o.Learners() {
			if l.ID != target.ID {
				return refuse(ReasonLearnerPresent, fmt.Sprintf("learner %x (%s) is present; one change at a time", l.ID, l.Name))
			}
		}
		if target.IsLearner {
			// A rejoin whose node died under it: its agent is gone, and
			// the learner would block every other change. Removing a
			// learner changes no quorum.
			return Decision{Action: RemoveMember, MemberID: target.ID,
				Detail: fmt.Sprintf("learner %x of %s on lost node %s: mark its pod, then remove the learner", target.ID, in.TargetName, in.PodNode)}
		}
		// Rule 2: the lost member is not healthy; the healthy voters left
		// must be a quorum of the smaller cluster.
		if healthy := o.HealthyVoters(); healthy < memberstate.Quorum(n-1) {
			return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("after removing %s %d healthy of %d voters remain, quorum is %d",
				in.TargetName, healthy, n-1, memberstate.Quorum(n-1)))
		}
		// The re-created pod's learner joins after the removal: the same
		// version rule as a rejoin's, before the removal (checkVersions).
		if d, ok := versionsAllow(o, in.LearnerVersion, target.ID, false); !ok {
			return d
		}
		return Decision{Action: RemoveMember, MemberID: target.ID,
			Detail: fmt.Sprintf("member %s (%x) on lost node %s: mark its pod, then remove the member so that it can rejoin elsewhere", in.TargetName, target.ID, in.PodNode)}
	}
	// Not in the list: freed only if a steward of this cluster removed
	// it (the mark written on the pod before the removal). A pod of
	// another cluster, or one whose member left otherwise, is not ours.
	if id, ok := ParseRemovedMark(in.RemovedMark, in.ClusterID); !ok {
		return refuse(ReasonAmbiguousIdentity, fmt.Sprintf("%s is not a member of cluster %x and no steward of it removed it (mark %q): not ours to free",
			in.TargetName, in.ClusterID, in.RemovedMark))
	} else if _, listed := o.Member(id); listed {
		return refuse(ReasonAmbiguousIdentity, fmt.Sprintf("the pod says member %x was removed, but it is listed", id))
	}
	// Every PV kept before any claim goes: a claim deleted while another
	// PV may still be recycled would leave that data to its provisioner.
	for _, c := range in.Claims {
		if c.PVExists && !c.PVRetained {
			return Decision{Action: StewardRetainPV, Claim: c.PVC, Detail: fmt.Sprintf("keep the old data of claim %s (PV %s) on %s whatever happens to the claim", c.PVC, c.PV, in.PodNode)}
		}
	}
	for _, c := range in.Claims {
		if !c.Deleting {
			// First the claims, then the pod: a claim stays (Terminating,
			// protected) while the stuck pod exists, and goes with it; the
			// other order lets the StatefulSet re-create the pod on the
			// old claim, bound to the dead node.
			return Decision{Action: StewardDeletePVC, Claim: c.PVC, Detail: fmt.Sprintf("claim %s binds the member to PV %s on %s", c.PVC, c.PV, in.PodNode)}
		}
	}
	return Decision{Action: StewardForceDeletePod, Detail: "the pod is stuck on " + in.PodNode + ", whose kubelet will never confirm its end"}
}

// RemovedMark is the pod annotation value a steward writes before it
// removes the member: "<cluster id>/<member id>" in hex.
func RemovedMark(clusterID, memberID uint64) string { return fmt.Sprintf("%x/%x", clusterID, memberID) }

// ParseRemovedMark reads a RemovedMark of clusterID.
func ParseRemovedMark(s string, clusterID uint64) (uint64, bool) {
	var c, m uint64
	if n, err := fmt.Sscanf(s, "%x/%x", &c, &m); err != nil || n != 2 || c != clusterID || m == 0 || RemovedMark(c, m) != s {
		return 0, false
	}
	return m, true
}

func memberNamed(o observation.Observation, name string) (observation.Member, bool) {
	for _, m := range o.Members {
		if m.Name == name {
			return m, true
		}
	}
	return observation.Member{}, false
}

// memberByPeer finds the member with name and one of peerURLs; a member
// with the peer URL but no name yet (added, never started) counts too.
func memberByPeer(o observation.Observation, name string, peerURLs []string) (observation.Member, bool) {
	for _, m := range o.Members {
		if m.Name != "" && m.Name != name {
			continue
		}
		for _, u := range m.PeerURLs {
			for _, p := range peerURLs {
				if u == p {
					return m, true
				}
			}
		}
	}
	return observation.Member{}, false
}
