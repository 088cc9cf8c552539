package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Pin is what the agent has seen of one member. The zero Pin means the
// member was never seen serving.
type Pin struct {
	Member string `json:"member"`
	// ClusterID is fixed once pinned; an answer from another cluster is
	// foreign. Only a person changes it (see docs/recovery.md).
	ClusterID MemberID `json:"clusterID"`
	// MemberID is the ID the member last served under (it changes when a
	// rejoin gives the member a new ID).
	MemberID MemberID `json:"memberID"`
	PeerURLs []string `json:"peerURLs,omitempty"`
	// FirstSeenAt is when the member was first seen serving; SeenAt when
	// the record last changed.
	FirstSeenAt time.Time `json:"firstSeenAt"`
	SeenAt      time.Time `json:"seenAt"`
	// ClaimName and ClaimUID, in a cluster's record, name the PVC the
	// member's data was on when written: a record none of whose claims
	// exists any more is an earlier incarnation's (the cluster was created
	// again from scratch under the same name).
	ClaimName string `json:"claimName,omitempty"`
	ClaimUID  string `json:"claimUID,omitempty"`
	// HighWater is the raft progress member MemberID was seen to keep: the
	// term and index it reported serving, confirmed by a later look (so it
	// was on its disk). A data dir of that member behind it went back in
	// time (a restored volume or backup) and must never start under the
	// ID: it has forgotten entries it acknowledged, and maybe votes.
	// Reached is the newest progress seen, not yet confirmed.
	HighWater Progress `json:"highWater,omitzero"`
	Reached   Progress `json:"reached,omitzero"`
}

// Progress is a member's raft term and (committed) index at a moment.
type Progress struct {
	Term  uint64    `json:"term"`
	Index uint64    `json:"index"`
	At    time.Time `json:"at"`
}

// Behind reports whether p is short of q in term or index.
func (p Progress) Behind(q Progress) bool { return p.Term < q.Term || p.Index < q.Index }

// Max is the higher term and the higher index of p and q (At: the later).
func (p Progress) Max(q Progress) Progress {
	at := p.At
	if q.At.After(at) {
		at = q.At
	}
	return Progress{Term: max(p.Term, q.Term), Index: max(p.Index, q.Index), At: at}
}

// SameMember: p and q pin one member (cluster and member ID).
func (p Pin) SameMember(q Pin) bool {
	return p.Seen() && p.ClusterID == q.ClusterID && p.MemberID == q.MemberID
}

// Seen reports whether the member was ever seen serving.
func (p Pin) Seen() bool { return p.ClusterID != 0 && p.MemberID != 0 }

// String is for logs and refusals.
func (p Pin) String() string {
	if !p.Seen() {
		return "never seen serving"
	}
	return fmt.Sprintf("member %x of cluster %x (first seen serving %s)", uint64(p.MemberID), uint64(p.ClusterID),
		p.FirstSeenAt.UTC().Format(time.RFC3339))
}

// DecodePin parses one pin record.
func DecodePin(b []byte) (Pin, error) {
	var p Pin
	if err := json.Unmarshal(b, &p); err != nil {
		return Pin{}, err
	}
	if !p.Seen() {
		return Pin{}, errors.New("the record has no cluster or member ID")
	}
	return p, nil
}
