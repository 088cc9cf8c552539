package plan

import (
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

// A dedicated WAL dir at a mount point: etcd cannot create a new member's
// WAL there (wal.Create removes the dir to rename its temp dir into place:
// "unlinkat ...: device or resource busy", etcd-io/etcd#20218), so the
// learner would never start. Refused before the Lease and the stop.
func TestWALDirDisposal(t *testing.T) {
	for _, c := range []struct {
		dedicated, mount, link bool
		want                   Disposal
		reason                 Reason
		says                   string
	}{
		{false, false, false, DisposeKeep, "", "member/wal"},
		{false, true, true, DisposeKeep, "", "member/wal"},
		{true, false, false, DisposeQuarantine, "", ""},
		{true, true, false, DisposeRefuse, ReasonWALDirMountPoint, "subdirectory"},
		// Issue 38: etcd's wal.Create removes the link and renames its temp
		// dir into its place, beside the link, off the disk it pointed to.
		{true, false, true, DisposeRefuse, ReasonWALDirSymlink, "link's target"},
	} {
		got, reason, why := WALDirDisposal(c.dedicated, c.mount, c.link)
		if got != c.want || reason != c.reason || !strings.Contains(why, c.says) {
			t.Errorf("WALDirDisposal(dedicated=%v, mount=%v, link=%v) = %s %q (%q), want %s %q saying %q", c.dedicated, c.mount, c.link, got, reason, why, c.want, c.reason, c.says)
		}
	}
}

func walDirMountPoint() opt {
	return func(s *spec) { s.in.WALDirDedicated, s.in.WALDirMountPoint = true, true }
}

func TestAWALDirAtAMountPointIsRefusedBeforeTheStop(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
	}{
		{"lost, WAL dir a mount point: refused", []opt{dataDir("corrupt"), walDirMountPoint()}, Refuse, ReasonWALDirMountPoint},
		{"Lease held, WAL dir a mount point: finish before the stop", []opt{dataDir("missing"), walDirMountPoint(), held(record.PhaseStarted)}, Finish, ReasonWALDirMountPoint},
		{"lost, dedicated WAL dir not a mount point: begin", []opt{dataDir("corrupt"), func(s *spec) { s.in.WALDirDedicated = true }}, Begin, ReasonNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			want(t, Decide(cluster(3, 2, c.opts...)), c.action, c.reason)
		})
	}
}
