package peerseed

// Guards for learners of etcd 3.5 (docs/plans/etcd-35.md §1, step 5): a 3.5
// member takes its membership, removed IDs and cluster version from the
// .snap's v2 store, not from the db, and deletes db members the v2 store
// lacks as "zombies". A seed is refused whenever the learner could start
// with anything but exactly the db's view.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v2store"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
)

var (
	// ErrSeedNoClusterVersion: the db has no cluster/clusterVersion. A 3.5
	// learner reads its cluster version from the .snap, which is written
	// from the db: it would start with none.
	ErrSeedNoClusterVersion = errors.New("the snapshot's db has no cluster version")
	// ErrSeedStorageVersionNewer: the db's meta/storageVersion is of a
	// newer minor than the learner's etcd (3.5 never reads the key, so it
	// would run on a 3.6 schema without noticing).
	ErrSeedStorageVersionNewer = errors.New("the snapshot's storage version is newer than the learner's etcd")
	// ErrSeedV2StoreEnabled: the member enables etcd 3.5's v2 API
	// (--enable-v2); a v3 snapshot carries no v2 data, so the seeded
	// learner would lack what its peers have. Decided by the caller (heal).
	ErrSeedV2StoreEnabled = errors.New("the member enables the v2 API (--enable-v2), whose data a v3 snapshot lacks")
	// ErrSeedV2SnapshotMismatch: the written .snap, decoded as the v2 store
	// etcd 3.5 recovers from it, does not say what the db says (members,
	// learner flags, peer URLs, removed IDs, cluster version), or holds
	// more than membership.
	ErrSeedV2SnapshotMismatch = errors.New("the written .snap's v2 store differs from the db's membership")
)

// WithLearnerVersion is the etcd version the learner will run (e.g.
// "3.5.36", from its manifest's image tag); "" = unknown. The db's storage
// version must not be of a newer minor (ErrSeedStorageVersionNewer).
func WithLearnerVersion(v string) BuildOption {
	return func(o *buildOptions) { o.learnerVersion = v }
}

// WithServingVersion is the etcd version the cluster's serving members run
// (plan.SeedSupported admits one minor only). It stands in for an unknown
// learner version: a learner runs the cluster's minor unless its manifest
// says otherwise, and that is what the cluster's members accept.
func WithServingVersion(v string) BuildOption {
	return func(o *buildOptions) { o.servingVersion = v }
}

// withV2Data lets a test alter the v2 store Data before the .snap is
// written (the read-back must catch it).
func withV2Data(f func([]byte) []byte) BuildOption {
	return func(o *buildOptions) { o.alterV2 = f }
}

// dbView is the db's own membership, read from its buckets after any
// writes (WithLearner, WithoutMember): what the .snap must repeat.
type dbView struct {
	members        map[types.ID]*membership.Member
	removed        map[types.ID]bool
	clusterVersion string // cluster/clusterVersion, "" when absent
	storageVersion string // raw meta/storageVersion, "" when absent (3.5)
}

// readDBView reads the membership, removed IDs, cluster version and
// storage version from be's buckets (not from a RaftCluster's memory).
func readDBView(be backend.Backend, lg *zap.Logger) dbView {
	mb := schema.NewMembershipBackend(lg, be)
	var v dbView
	v.members, v.removed = mb.MustReadMembersFromBackend()
	if cv := mb.ClusterVersionFromBackend(); cv != nil {
		v.clusterVersion = cv.String()
	}
	tx := be.ReadTx()
	tx.RLock()
	_, vs := tx.UnsafeRange(schema.Meta, schema.MetaStorageVersionName, nil, 1)
	tx.RUnlock()
	if len(vs) > 0 {
		v.storageVersion = string(vs[0])
	}
	return v
}

// checkVersions refuses a db a learner of version o.learnerVersion (else
// o.servingVersion) could not start on exactly: no cluster version, or a
// storage version of a newer minor. The storage version check is skipped
// only when both versions are unknown (the caller knows neither).
func checkVersions(v dbView, o buildOptions) error {
	if v.clusterVersion == "" {
		return fmt.Errorf("%w (cluster/clusterVersion absent)", ErrSeedNoClusterVersion)
	}
	learner, from := o.learnerVersion, "the learner runs"
	if learner == "" {
		learner, from = o.servingVersion, "the serving members run"
	}
	if learner == "" || v.storageVersion == "" {
		return nil
	}
	lmaj, lmin, ok := majorMinor(learner)
	if !ok {
		return fmt.Errorf("%w: version %q (%s it) is unreadable", ErrSeedStorageVersionNewer, learner, from)
	}
	smaj, smin, ok := majorMinor(v.storageVersion)
	if !ok {
		// A key we cannot read is a schema we cannot vouch for.
		return fmt.Errorf("%w: storage version %q is unreadable", ErrSeedStorageVersionNewer, v.storageVersion)
	}
	if smaj > lmaj || (smaj == lmaj && smin > lmin) {
		return fmt.Errorf("%w: storage version %s, %s %s", ErrSeedStorageVersionNewer, v.storageVersion, from, learner)
	}
	return nil
}

// majorMinor reads "3.5.36", "v3.5.36", "3.5.36-0" or "3.6" (an image tag,
// a server version, a storage version).
func majorMinor(s string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	minorStr, _, _ := strings.Cut(parts[1], "-")
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(minorStr)
	return major, minor, err1 == nil && err2 == nil
}

// checkV2Snapshot decodes data (the written .snap's Data) with etcd's v2
// store, as a 3.5 member does at start (st.Recovery), and compares what
// 3.5 takes from it with the db's view. Names and client URLs are left
// out: they are written only for members that published them (a 3.6
// leader's raft snapshot does the same) and are cosmetic until then.
func checkV2Snapshot(data []byte, want dbView, lg *zap.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil { // etcd panics on an unreadable node
			err = fmt.Errorf("%w: decoding it panicked: %v", ErrSeedV2SnapshotMismatch, p)
		}
	}()
	st := v2store.New(etcdserver.StoreClusterPrefix, etcdserver.StoreKeysPrefix)
	if err := st.Recovery(data); err != nil {
		return fmt.Errorf("%w: not a v2 store: %v", ErrSeedV2SnapshotMismatch, err)
	}
	if only, err := membership.IsMetaStoreOnly(st); err != nil || !only {
		return fmt.Errorf("%w: it holds more than membership (%v)", ErrSeedV2SnapshotMismatch, err)
	}
	cl := membership.NewCluster(lg)
	cl.SetStore(st)
	members, removed := cl.MembersFromStore()
	if g, w := fmtMembers(members), fmtMembers(want.members); !slices.Equal(g, w) {
		return fmt.Errorf("%w: members %v, the db has %v", ErrSeedV2SnapshotMismatch, g, w)
	}
	if g, w := fmtRemoved(removed), fmtRemoved(want.removed); !slices.Equal(g, w) {
		return fmt.Errorf("%w: removed %v, the db has %v", ErrSeedV2SnapshotMismatch, g, w)
	}
	got := ""
	if e, err := st.Get(membership.StoreClusterVersionKey(), false, false); err == nil && e.Node.Value != nil {
		got = *e.Node.Value
	}
	if got != want.clusterVersion {
		return fmt.Errorf("%w: cluster version %q, the db has %q", ErrSeedV2SnapshotMismatch, got, want.clusterVersion)
	}
	return nil
}

// fmtMembers lists members as "id learner=b [peer URLs]", sorted.
func fmtMembers(ms map[types.ID]*membership.Member) []string {
	var out []string
	for id, m := range ms {
		urls := slices.Clone(m.PeerURLs)
		slices.Sort(urls)
		out = append(out, fmt.Sprintf("%s learner=%v %v", id, m.IsLearner, urls))
	}
	slices.Sort(out)
	return out
}

// fmtRemoved lists removed IDs, sorted.
func fmtRemoved(rs map[types.ID]bool) []string {
	var out []string
	for id, ok := range rs {
		if ok {
			out = append(out, id.String())
		}
	}
	slices.Sort(out)
	return out
}
