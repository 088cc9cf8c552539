package plan

import (
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// ManifestCheckpoint is what the agent kept of the member's last good
// static-pod manifest: the manifest as it was while the member served
// healthy in its cluster, and what that cluster was then.
type ManifestCheckpoint struct {
	Member    string    `json:"member"`
	MemberID  uint64    `json:"memberID"`
	ClusterID uint64    `json:"clusterID"`
	Voters    int       `json:"voters"` // the cluster's voters when it was taken
	SHA256    string    `json:"sha256"`
	SavedAt   time.Time `json:"savedAt"`
}

// ManifestRestoreInput is everything DecideManifestRestore looks at.
type ManifestRestoreInput struct {
	Now time.Time
	Obs observation.Observation
	// Live: the manifest is in the kubelet's dir; Parked: the agent moved
	// it aside to stop the member (its own, never "vanished").
	Live, Parked bool
	// Checkpoint is nil when none was kept.
	Checkpoint *ManifestCheckpoint
	// GoneSince is when the agent first saw the manifest missing (zero:
	// not missing); Delay the --manifest-restore-delay.
	GoneSince time.Time
	Delay     time.Duration
	// Journal is the member's journal: an open recovery owns the manifest;
	// a moved-away tombstone means it was set aside on purpose.
	Journal record.Record
	// Decommissioned says why the member is being taken away on purpose
	// ("" if not): the Node's etcd-agent.io/decommission annotation (as
	// last read, kept in the state dir while the API is away), or a
	// person's <state-dir>/manifest-hold.
	Decommissioned string
	// PortInUse names an address of the member that accepts connections
	// ("" none): etcd still runs from somewhere (a renamed manifest the
	// kubelet still runs, another supervisor).
	PortInUse string
	// OtherEtcd names another manifest in the kubelet's dir that runs etcd
	// ("" none): a person's replacement (a restore), whose pod may be in
	// its crash back-off with its ports closed.
	OtherEtcd string
	// LastLiveSHA is the sha256 of the manifest last seen in place: the
	// checkpoint goes back only if it is that manifest (an edit the member
	// was never seen healthy with, or one the checkpoint could not follow,
	// is not replaced by an older one).
	LastLiveSHA string
	// RecentRestores counts this agent's restores in the last
	// RestoreWindow; MaxRestores of them stop the keeper.
	RecentRestores int
	// RestoreLogErr says why the log of restores cannot be read or
	// written ("" when it can): a restore the limit could not count is
	// not made.
	RestoreLogErr string
	AutoHeal      bool
	DryRun        bool
}

// A manifest that keeps vanishing (a config-management run that empties
// the dir) is not fought: after MaxRestores restores within RestoreWindow
// the keeper waits for a person.
const (
	MaxRestores   = 3
	RestoreWindow = time.Hour
)

// ManifestRestore is DecideManifestRestore's answer: Restore, or why not.
type ManifestRestore struct {
	Restore bool
	// Missing: the manifest is gone and not the agent's doing (exported
	// as a metric whatever the answer).
	Missing bool
	Reason  Reason
	Detail  string
}

// DecideManifestRestore says whether to put the checkpoint of the member's
// manifest back. A manifest that vanished by accident (not parked by the
// agent) takes the member down, and a lone member takes the whole control
// plane with it; "simply deleting the etcd pod in a single master setup
// causes a cluster outage" (seeds/003). It comes back only after a window
// of "still gone" (a kubeadm upgrade swaps the file in seconds), only over
// the member's own usable data, and only while the member is provably still
// in its cluster: a removed member's manifest must stay gone, as must one
// whose Node is decommissioned. Starting a member on its own data adds a
// voter back and changes no membership, so no Lease is needed: in a
// one-member cluster the Lease's API is served by this very member.
func DecideManifestRestore(in ManifestRestoreInput) ManifestRestore {
	no := func(missing bool, r Reason, format string, args ...any) ManifestRestore {
		return ManifestRestore{Missing: missing, Reason: r, Detail: fmt.Sprintf(format, args...)}
	}
	o, cp := in.Obs, in.Checkpoint
	switch {
	case in.Live:
		return ManifestRestore{}
	case in.Parked:
		return no(false, ReasonNone, "the agent parked the manifest to stop the member")
	case in.Journal.Active():
		return no(false, ReasonRecoveryInProgress, "recovery %s is open (phase %s): it owns the manifest", in.Journal.ID, in.Journal.Phase)
	case movedAway(in.Journal):
		return no(false, ReasonMovedAway, "member %x moved to %s: its manifest was set aside on purpose", uint64(in.Journal.OldMemberID), in.Journal.MoveTarget)
	case in.Delay <= 0:
		return no(true, ReasonNoCheckpoint, "the manifest is gone; restoring it is off (--manifest-restore-delay=0)")
	case cp == nil:
		return no(true, ReasonNoCheckpoint, "the manifest is gone and no checkpoint of it was kept (the member was never seen healthy with it)")
	case in.Decommissioned != "":
		return no(true, ReasonDecommissioned, "the manifest is gone and the member is being taken away on purpose (%s): never restored", in.Decommissioned)
	case !in.AutoHeal:
		return no(true, ReasonAutoHealDisabled, "the manifest is gone; automatic actions are off (--auto-heal=false): a person is at work")
	case in.OtherEtcd != "":
		return no(true, ReasonMemberRunning, "the manifest is gone and %s runs etcd in its place: a person's replacement is never raced", in.OtherEtcd)
	case cp.SHA256 != in.LastLiveSHA:
		return no(true, ReasonNoCheckpoint, "the checkpoint (sha256 %.12s) is not the manifest last seen in place (%.12s): an older one never replaces it", cp.SHA256, in.LastLiveSHA)
	case o.Local.Name != cp.Member:
		return no(true, ReasonNoCheckpoint, "the checkpoint is of member %s, the local member is %s", cp.Member, o.Local.Name)
	case o.Local.Serving || o.Local.AnsweringID != 0 || in.PortInUse != "":
		return no(true, ReasonMemberRunning, "the manifest is gone but etcd still answers (%s): it runs from elsewhere (a renamed manifest the kubelet still runs?)", firstOf(in.PortInUse, o.Local.ClientURL))
	case o.Local.DataDirClass != observation.DataDirOK || !o.Local.DataDirVerified:
		return no(true, ReasonDataDirUnusable, "the manifest is gone and the data dir is %s (verified: %v): a checkpoint goes back only over the member's own data, checked (%s)",
			o.Local.DataDirClass, o.Local.DataDirVerified, o.Local.DataDirDetail)
	case o.Local.DataDirMemberID != cp.MemberID:
		return no(true, ReasonDataDirUnusable, "the data dir is member %x's, the checkpoint member %x's", o.Local.DataDirMemberID, cp.MemberID)
	case o.Local.DataDirClusterID != 0 && cp.ClusterID != 0 && o.Local.DataDirClusterID != cp.ClusterID:
		return no(true, ReasonForeignCluster, "the data dir is of cluster %x, the checkpoint of cluster %x", o.Local.DataDirClusterID, cp.ClusterID)
	case in.RestoreLogErr != "":
		return no(true, ReasonRestoreLogUnusable, "the manifest is gone; the log of restores (what limits them to %d an hour) cannot be used: %s; nothing is put back until it can", MaxRestores, in.RestoreLogErr)
	case in.RecentRestores >= MaxRestores:
		return no(true, ReasonRestoreLimit, "the manifest was put back %d times in the last %s and is gone again: something removes it on purpose; a person must look", in.RecentRestores, RestoreWindow)
	}
	if r, ok := stillAMember(o, cp); !ok {
		return r
	}
	if left := in.Delay - in.Now.Sub(in.GoneSince); in.GoneSince.IsZero() || left > 0 {
		if in.GoneSince.IsZero() {
			left = in.Delay
		}
		return no(true, ReasonInRestoreDelay, "the manifest is gone; its checkpoint goes back in %s unless it comes back or the member is removed", left.Round(time.Second))
	}
	if in.DryRun {
		return no(true, ReasonDryRun, "would put back the checkpoint of member %x's manifest (gone for %s)", cp.MemberID, in.Now.Sub(in.GoneSince).Round(time.Second))
	}
	return ManifestRestore{Restore: true, Missing: true, Detail: fmt.Sprintf("member %x's manifest gone for %s: its checkpoint of %s goes back",
		cp.MemberID, in.Now.Sub(in.GoneSince).Round(time.Second), cp.SavedAt.UTC().Format(time.RFC3339))}
}

// stillAMember: a member list that a quorum answered now must name the
// checkpoint's member; without one, only a member that was its cluster's
// only voter is known to be a member still (etcd cannot remove the last
// member, nor add one without its vote).
func stillAMember(o observation.Observation, cp *ManifestCheckpoint) (ManifestRestore, bool) {
	fresh := o.MemberListError == "" && !o.PeersReused && len(o.Members) > 0
	switch {
	case fresh && o.ClusterID != 0 && cp.ClusterID != 0 && o.ClusterID != cp.ClusterID:
		return ManifestRestore{Missing: true, Reason: ReasonForeignCluster, Detail: fmt.Sprintf("the endpoints answer for cluster %x, the checkpoint is of cluster %x", o.ClusterID, cp.ClusterID)}, false
	case fresh && !listed(o, cp.MemberID):
		return ManifestRestore{Missing: true, Reason: ReasonMemberRemoved, Detail: fmt.Sprintf("member %x is not in the cluster's member list: it was removed; its manifest stays gone", cp.MemberID)}, false
	case fresh:
		return ManifestRestore{}, true
	case cp.Voters == 1 && len(o.Members) <= 1 && (len(o.Members) == 0 || o.Members[0].ID == cp.MemberID):
		return ManifestRestore{}, true
	default:
		return ManifestRestore{Missing: true, Reason: ReasonMembershipUnknown, Detail: fmt.Sprintf("no quorum answers the member list (%s) and the cluster had %d voters: cannot tell whether member %x was removed",
			o.MemberListError, cp.Voters, cp.MemberID)}, false
	}
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func listed(o observation.Observation, id uint64) bool {
	for _, m := range o.Members {
		if m.ID == id {
			return true
		}
	}
	return false
}
