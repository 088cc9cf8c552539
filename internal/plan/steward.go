package plan

import (
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// The steward (DESIGN.md §11, UC1): a member pod whose node is lost for
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
)

// StewardConfig is the steward's configuration.
type StewardConfig struct {
	// NodeLostGrace: how long the node's Lease must have gone unrenewed.
	NodeLostGrace time.Duration
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
	// NodeLeaseRenewed is the node Lease's last renewal (zero: none).
	NodeLeaseRenewed time.Time
	// PVC: the target's PVC, while bound to a PV on PodNode (the old one).
	PVCBoundToNode bool
	PVCDeleting    bool
	// PV: the old PV; PVRetained: its reclaim policy is Retain.
	PVExists   bool
	PVRetained bool
}

// DecideSteward says which step frees the target member's place now, or
// why none may be taken (Refuse), or that nothing is left (Nothing).
func DecideSteward(in StewardInput, cfg StewardConfig) Decision {
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
	if age := in.Now.Sub(in.NodeLeaseRenewed); in.NodeExists && !in.NodeLeaseRenewed.IsZero() && age < cfg.NodeLostGrace {
		return refuse(ReasonInGracePeriod, fmt.Sprintf("node %s is NotReady; its kubelet renewed its node Lease %s ago, the node-lost grace is %s",
			in.PodNode, age.Round(time.Second), cfg.NodeLostGrace))
	}
	target, inList := memberByPeer(o, in.TargetName, in.TargetPeerURLs)
	if inList && target.Serving {
		return refuse(ReasonMemberServing, fmt.Sprintf("node %s is lost to the API but member %s (%x) still answers: nothing is lost", in.PodNode, in.TargetName, target.ID))
	}
	if in.Local.State != memberstate.Healthy {
		return refuse(ReasonStewardNotHealthy, "the steward's own member is "+string(in.Local.State)+": only an agent with a healthy member of the cluster acts for another")
	}
	if quorumLost(o) {
		return refuse(ReasonMajorityLost, fmt.Sprintf("%d of %d voters serve, quorum is %d (or no leader): restoring from a backup is a human's call",
			o.ServingVoters(), n, memberstate.Quorum(n)))
	}
	if inList {
		if ls := o.Learners(); len(ls) > 0 {
			return refuse(ReasonLearnerPresent, fmt.Sprintf("learner %x (%s) is present; one change at a time", ls[0].ID, ls[0].Name))
		}
		if target.IsLearner {
			return refuse(ReasonAmbiguousIdentity, fmt.Sprintf("member %s is a learner (%x): its own agent's recovery, not the steward's", in.TargetName, target.ID))
		}
		// Rule 2: the lost member is not healthy; the healthy voters left
		// must be a quorum of the smaller cluster.
		if healthy := o.HealthyVoters(); healthy < memberstate.Quorum(n-1) {
			return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("after removing %s %d healthy of %d voters remain, quorum is %d",
				in.TargetName, healthy, n-1, memberstate.Quorum(n-1)))
		}
		return Decision{Action: RemoveMember, MemberID: target.ID,
			Detail: fmt.Sprintf("member %s (%x) on lost node %s: remove it so that it can rejoin elsewhere", in.TargetName, target.ID, in.PodNode)}
	}
	if in.PVExists && !in.PVRetained && in.PVCBoundToNode {
		return Decision{Action: StewardRetainPV, Detail: "keep the old data on " + in.PodNode + " whatever happens to its claim"}
	}
	if in.PVCBoundToNode && !in.PVCDeleting {
		// First the claim, then the pod: the claim stays (Terminating,
		// protected) while the stuck pod exists, and goes with it; the
		// other order lets the StatefulSet re-create the pod on the old
		// claim, bound to the dead node.
		return Decision{Action: StewardDeletePVC, Detail: "the claim binds the member to the PV on " + in.PodNode}
	}
	return Decision{Action: StewardForceDeletePod, Detail: "the pod is stuck on " + in.PodNode + ", whose kubelet will never confirm its end"}
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
