package record

import "time"

// Admission is the agent's word to a pod member's start gate on whether
// the member's cluster has ever served, read from the cluster's record in
// the API (which outlives nodes and claims). A pod member's state dir
// starts empty on every new node and claim, so without it the gate could
// not tell a cluster's first start from a member re-created after the
// cluster has served (whose bootstrap would reuse its old IDs).
type Admission struct {
	// ClusterSeen: the record pins the cluster (ClusterID) and at least
	// one member; Record names it (namespace/name).
	ClusterSeen bool     `json:"clusterSeen"`
	ClusterID   MemberID `json:"clusterID,omitempty"`
	Record      string   `json:"record"`
	// CheckedAt is when the agent read the record: a "never served" is
	// trusted only while recent (the cluster may have served since).
	CheckedAt time.Time `json:"checkedAt"`
}

// Given reports whether the agent has said anything.
func (a Admission) Given() bool { return !a.CheckedAt.IsZero() }
