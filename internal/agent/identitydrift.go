package agent

import (
	"fmt"
	"slices"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
)

// identityDrift says how the identity the static-pod manifest gives now
// differs from id, the one the member's loop runs with ("" when it does
// not, or cannot be read now). An operator may change the manifest under a
// running agent (a --wal-dir added, the data dir moved): every observation
// must be made with what etcd runs with (issue 38: a member whose WAL moved
// to a dedicated dir was judged corrupt and replaced). Never while a
// recovery of the member is open: its journal and Lease work on the
// identity they began with, and the heal's own manifest changes (parked,
// restored) are not an operator's.
func identityDrift(c Config, id watchdog.Identity) string {
	if j, _, err := journal.Load(c.StateDir, id.Name); err != nil || j.Active() {
		return ""
	}
	now, err := ResolveIdentity(c)
	if err != nil {
		return "" // unreadable now (being rewritten, parked): looked at again at the next observation
	}
	switch {
	case now.Name != id.Name:
		return fmt.Sprintf("member name %q, was %q", now.Name, id.Name)
	case now.DataDir != id.DataDir:
		return fmt.Sprintf("data dir %s, was %s", now.DataDir, id.DataDir)
	case now.WALDir != id.WALDir || now.WALDirMountRoot != id.WALDirMountRoot:
		return fmt.Sprintf("WAL dir %q (a mount root in etcd's container: %v), was %q (%v)", now.WALDir, now.WALDirMountRoot, id.WALDir, id.WALDirMountRoot)
	case now.ClientURL != id.ClientURL:
		return fmt.Sprintf("client URL %s, was %s", now.ClientURL, id.ClientURL)
	case !slices.Equal(now.PeerURLs, id.PeerURLs):
		return fmt.Sprintf("peer URLs %v, were %v", now.PeerURLs, id.PeerURLs)
	}
	return ""
}
