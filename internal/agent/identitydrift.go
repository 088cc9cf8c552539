package agent

import (
	"fmt"
	"slices"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
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
//
// A manifest that reads but gives no identity (a --wal-dir that disagrees
// with the agent's, one off any hostPath) is an error: the loop must not go
// on judging the member by the old identity (review: a healthy member
// replaced), and the agent ends as it does on that error at its start.
func identityDrift(c Config, id watchdog.Identity) (string, error) {
	if j, _, err := journal.Load(c.StateDir, id.Name); err != nil || j.Active() {
		return "", nil
	}
	now, err := ResolveIdentity(c)
	switch {
	case err != nil && manifestReads(c):
		return "", fmt.Errorf("the member's manifest changed and gives no identity the agent can act on: %w", err)
	case err != nil:
		return "", nil // unreadable now (being rewritten, parked): looked at again at the next observation
	}
	return identityChange(now, id), nil
}

// manifestReads: the static-pod manifest is there and parses.
func manifestReads(c Config) bool {
	_, err := manifest.LoadMember(c.StaticPodManifest)
	return err == nil
}

// identityChange says how now differs from id ("" when it does not).
func identityChange(now, id watchdog.Identity) string {
	switch {
	case now.Name != id.Name:
		return fmt.Sprintf("member name %q, was %q", now.Name, id.Name)
	case now.DataDir != id.DataDir:
		return fmt.Sprintf("data dir %s, was %s", now.DataDir, id.DataDir)
	case now.WALDir != id.WALDir || now.WALDirMountRoot != id.WALDirMountRoot:
		return fmt.Sprintf("WAL dir %q (a mount root in etcd's container: %v), was %q (%v)", now.WALDir, now.WALDirMountRoot, id.WALDir, id.WALDirMountRoot)
	case now.EnableV2 != id.EnableV2:
		return fmt.Sprintf("v2 API (--enable-v2) %v, was %v", now.EnableV2, id.EnableV2)
	case now.ClientURL != id.ClientURL:
		return fmt.Sprintf("client URL %s, was %s", now.ClientURL, id.ClientURL)
	case !slices.Equal(now.PeerURLs, id.PeerURLs):
		return fmt.Sprintf("peer URLs %v, were %v", now.PeerURLs, id.PeerURLs)
	}
	return ""
}
