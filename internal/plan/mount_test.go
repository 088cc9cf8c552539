package plan

import (
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Issue 10 item 4, issue 38: a data dir at a volume's root cannot be
// renamed into the quarantine. Empty (nothing of etcd's in it: UC1 on a
// dedicated disk) it needs none; holding etcd data its member/ is set aside
// inside it, on the same volume (the attempt's space check counts the
// learner's data on that volume).
func TestDataDirDisposal(t *testing.T) {
	for _, c := range []struct {
		mount bool
		class string
		want  Disposal
		says  string
	}{
		{false, "missing", DisposeKeep, "missing"},
		{false, "empty", DisposeQuarantine, ""},
		{false, "corrupt", DisposeQuarantine, ""},
		{false, "ok", DisposeQuarantine, ""},
		{true, "missing", DisposeKeep, "missing"},
		{true, "empty", DisposeKeep, "empty volume root"},
		{true, "ok", DisposeQuarantineContents, "volume's root"},
		{true, "in-use", DisposeQuarantineContents, "volume's root"},
		{true, "corrupt", DisposeQuarantineContents, "same volume"},
		{true, "foreign", DisposeQuarantineContents, "volume's root"},
		{false, "stale", DisposeQuarantine, ""},
		{true, "stale", DisposeQuarantineContents, "volume's root"},
		// Issue 38: the file is renamed into the quarantine like a dir; one
		// mounted over the path cannot be, and holds no etcd data.
		{false, "not-a-directory", DisposeQuarantine, ""},
		{true, "not-a-directory", DisposeRefuse, "not a directory"},
	} {
		got, _, why := DataDirDisposal(DataDirAt{VolumeRoot: c.mount}, c.class)
		if got != c.want || !strings.Contains(why, c.says) {
			t.Errorf("DataDirDisposal(mount=%v, %s) = %s (%q), want %s saying %q", c.mount, c.class, got, why, c.want, c.says)
		}
	}
}

// Issue 38: a data dir that is a symlink (to a dedicated disk's dir) is
// kept with its target, its member/ set aside inside it; a dangling one (the
// disk not mounted) is refused with its own reason.
func TestSymlinkedDataDirDisposal(t *testing.T) {
	for _, c := range []struct {
		at     DataDirAt
		class  string
		want   Disposal
		reason Reason
		says   string
	}{
		{DataDirAt{Symlink: true}, "missing", DisposeRefuse, ReasonDataDirLinkDangling, "dangling"},
		{DataDirAt{Symlink: true, VolumeRoot: true}, "missing", DisposeRefuse, ReasonDataDirLinkDangling, "not mounted"},
		{DataDirAt{Symlink: true}, "empty", DisposeKeep, "", "empty"},
		{DataDirAt{Symlink: true}, "corrupt", DisposeQuarantineContents, "", "symlink"},
		{DataDirAt{Symlink: true}, "ok", DisposeQuarantineContents, "", "symlink"},
		{DataDirAt{Symlink: true}, "foreign", DisposeQuarantineContents, "", "same path"},
		{DataDirAt{Symlink: true}, "not-a-directory", DisposeQuarantine, "", ""},
	} {
		got, reason, why := DataDirDisposal(c.at, c.class)
		if got != c.want || reason != c.reason || !strings.Contains(why, c.says) {
			t.Errorf("DataDirDisposal(%+v, %s) = %s %q (%q), want %s %q saying %q", c.at, c.class, got, reason, why, c.want, c.reason, c.says)
		}
	}
	want(t, Decide(cluster(3, 2, dataDir("missing"), func(s *spec) { s.in.DataDirSymlink = true })), Refuse, ReasonDataDirLinkDangling)
	want(t, Decide(cluster(3, 2, dataDir("corrupt"), func(s *spec) { s.in.DataDirSymlink = true })), Begin, ReasonNone)
}

func mountPoint() opt { return func(s *spec) { s.in.DataDirVolumeRoot = true } }

// The refusal comes before the Lease and the stop, and again on the re-check
// after the Lease; an empty mount point goes ahead.
func TestMountPointDataDirDecidedBeforeTheStop(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
	}{
		{"lost, corrupt data on a mount point: begin (its contents are set aside)", []opt{dataDir("corrupt"), mountPoint()}, Begin, ReasonNone},
		{"lost, empty mount point (UC1, dedicated disk): begin", []opt{dataDir("empty"), mountPoint()}, Begin, ReasonNone},
		{"Lease held, corrupt on a mount point: stop", []opt{dataDir("corrupt"), mountPoint(), held(record.PhaseStarted)}, StopMember, ReasonNone},
		{"Lease held, empty mount point: stop", []opt{dataDir("empty"), mountPoint(), held(record.PhaseStarted)}, StopMember, ReasonNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(cluster(3, 2, c.opts...))
			want(t, d, c.action, c.reason)
		})
	}
}
