package peerseed

// Seeding from a snapshot taken before the learner's add (a stored
// snapshot, a move's pre-change backup): the learner is written into the
// copy's membership (WithLearner), and the copy is taken only when its
// membership is the cluster's now (ExpectMembership).

import (
	"fmt"
	"slices"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// ExpectedMember is one member of the cluster as a fresh member list
// shows it.
type ExpectedMember struct {
	ID        uint64
	PeerURLs  []string
	IsLearner bool
}

// ExpectMembership refuses (ErrSeedMembershipDiffers) a db whose
// membership, the learner written in if WithLearner did, is not exactly ms
// (IDs, peer URLs, learner or voter): a seed from a snapshot older than
// the add is taken only when nothing else changed the membership since.
func ExpectMembership(ms []ExpectedMember) BuildOption {
	return func(o *buildOptions) { o.expect = slices.Clone(ms) }
}

// WithLearner lets the db predate the learner's add (a stored snapshot, a
// move's pre-change backup): when the learner is neither a member nor a
// removed one in the db, it is written into the db's membership and
// ConfState as a learner with peerURLs, exactly as the add will leave it
// (ID, peer URLs, learner; no name until it publishes). etcd then applies
// the add's entry from the leader's log as a change it already has: its
// validation answers "ID exists", and a rejected change is applied as a
// no-op (raft NodeID None) with the consistent index moved on (etcd 3.6 and
// 3.7, server.applyConfChange). The leader sends the log from the db's
// index on; a leader that compacted it sends a raft snapshot instead.
func WithLearner(peerURLs []string) BuildOption {
	return func(o *buildOptions) { o.learnerPeerURLs = slices.Clone(peerURLs) }
}

// WithoutMember lets the db predate a member's removal as well (a pod
// move's stored snapshot: taken, then the moved member removed, then the
// learner added): the member id is removed from the copy's membership and
// ConfState, and recorded as removed, exactly as its removal leaves them.
// etcd then applies the removal's entry from the leader's log as a change
// it already has (validation answers "ID removed"; applied as a no-op with
// the consistent index moved on), as for WithLearner's add. Only with
// WithLearner, and only for another member than the learner.
func WithoutMember(id uint64) BuildOption {
	return func(o *buildOptions) { o.removed = id }
}

// writeRemoval removes member id from the db's membership and stored
// ConfState (WithoutMember), as its removal will leave them, and commits.
func writeRemoval(be backend.Backend, cl *membership.RaftCluster, id uint64, lg *zap.Logger) {
	cl.RemoveMember(types.ID(id), membership.ApplyBoth)
	saveConfState(be, cl, lg)
	lg.Info("member removed from the snapshot's membership (the snapshot predates its removal)", zap.String("member-id", types.ID(id).String()))
}

// saveConfState stores the ConfState of cl's membership in be, committed:
// what etcd's apply of a conf change leaves.
func saveConfState(be backend.Backend, cl *membership.RaftCluster, lg *zap.Logger) {
	cs := confStateOf(cl.Members())
	tx := be.BatchTx()
	tx.LockOutsideApply()
	schema.MustUnsafeSaveConfStateToBackend(lg, tx, &cs)
	tx.Unlock()
	be.ForceCommit()
}

// confStateOf is the raft ConfState of a membership (sorted).
func confStateOf(members []*membership.Member) raftpb.ConfState {
	var cs raftpb.ConfState
	for _, mm := range members {
		if mm.IsLearner {
			cs.Learners = append(cs.Learners, uint64(mm.ID))
		} else {
			cs.Voters = append(cs.Voters, uint64(mm.ID))
		}
	}
	slices.Sort(cs.Voters)
	slices.Sort(cs.Learners)
	return cs
}

// writeLearner writes learner newID into the db's membership and stored
// ConfState (WithLearner), as its add will leave them, and commits.
func writeLearner(be backend.Backend, cl *membership.RaftCluster, newID uint64, peerURLs []string, lg *zap.Logger) (*membership.Member, error) {
	for _, mm := range cl.Members() {
		if mm.IsLearner {
			// etcd counts learners at start (--max-learners): the snapshot's
			// learner and ours would be one too many.
			return nil, fmt.Errorf("%w: the snapshot has learner %x", ErrSeedMembershipDiffers, uint64(mm.ID))
		}
		for _, u := range mm.PeerURLs {
			if slices.Contains(peerURLs, u) {
				return nil, fmt.Errorf("%w: member %x of the snapshot has peer URL %s of learner %x", ErrSeedLearnerAbsent, uint64(mm.ID), u, newID)
			}
		}
	}
	m := &membership.Member{ID: types.ID(newID), RaftAttributes: membership.RaftAttributes{PeerURLs: slices.Clone(peerURLs), IsLearner: true}}
	cl.AddMember(m, membership.ApplyBoth)
	saveConfState(be, cl, lg)
	lg.Info("learner written into the snapshot's membership (the snapshot predates its add)",
		zap.String("member-id", types.ID(newID).String()), zap.Strings("peer-urls", peerURLs))
	return cl.Member(types.ID(newID)), nil
}

// sameMembership compares the db's membership with want (order and peer
// URL order aside).
func sameMembership(got, want []ExpectedMember) error {
	norm := func(ms []ExpectedMember) []string {
		var out []string
		for _, m := range ms {
			urls := slices.Clone(m.PeerURLs)
			slices.Sort(urls)
			out = append(out, fmt.Sprintf("%x learner=%v %v", m.ID, m.IsLearner, urls))
		}
		slices.Sort(out)
		return out
	}
	if g, w := norm(got), norm(want); !slices.Equal(g, w) {
		return fmt.Errorf("%w: the snapshot (learner written in) has %v, the cluster %v", ErrSeedMembershipDiffers, g, w)
	}
	return nil
}
