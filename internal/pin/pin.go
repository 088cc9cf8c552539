// Package pin remembers which cluster a member belongs to and which member
// ID it serves under: the cluster ID and the member ID are pinned the first
// time the agent sees the member serve (DESIGN.md rule 7), in the agent's
// state dir and on the Node (so a reinstalled node still knows). A pinned
// member has existed: its start gate never lets etcd start it on missing or
// empty data, and the agent ignores answers from any other cluster.
//
// The record is plain data; the rule that moves it on is plan.NextPin.
package pin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/journal"
)

// Pin is what the agent has seen of one member. The zero Pin means the
// member was never seen serving.
type Pin struct {
	Member string `json:"member"`
	// ClusterID is fixed once pinned; an answer from another cluster is
	// foreign. Only a person changes it (see docs/recovery.md).
	ClusterID journal.MemberID `json:"clusterID"`
	// MemberID is the ID the member last served under (it changes when a
	// rejoin gives the member a new ID).
	MemberID journal.MemberID `json:"memberID"`
	PeerURLs []string         `json:"peerURLs,omitempty"`
	// FirstSeenAt is when the member was first seen serving; SeenAt when
	// the record last changed.
	FirstSeenAt time.Time `json:"firstSeenAt"`
	SeenAt      time.Time `json:"seenAt"`
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

// Path is member's pin file in stateDir.
func Path(stateDir, member string) string { return filepath.Join(stateDir, "pin-"+member+".json") }

// Load reads member's pin; ok is false when there is none. A file that
// cannot be read is an error, never "not seen": that would let the gate
// bootstrap a member that has existed.
func Load(stateDir, member string) (p Pin, ok bool, err error) {
	b, err := os.ReadFile(Path(stateDir, member))
	if errors.Is(err, os.ErrNotExist) {
		return Pin{}, false, nil
	}
	if err != nil {
		return Pin{}, false, fmt.Errorf("read the pin of %s: %w", member, err)
	}
	p, err = Decode(b)
	if err != nil {
		return Pin{}, false, fmt.Errorf("the pin %s is unreadable (fix or remove it by hand, see docs/recovery.md): %w", Path(stateDir, member), err)
	}
	if p.Member != member {
		return Pin{}, false, fmt.Errorf("the pin %s names member %q, not %q", Path(stateDir, member), p.Member, member)
	}
	return p, true, nil
}

// Decode parses one pin record.
func Decode(b []byte) (Pin, error) {
	var p Pin
	if err := json.Unmarshal(b, &p); err != nil {
		return Pin{}, err
	}
	if !p.Seen() {
		return Pin{}, errors.New("the record has no cluster or member ID")
	}
	return p, nil
}

// Save writes p atomically (temp file, fsync, rename, fsync of the dir).
func Save(stateDir string, p Pin) error {
	if !p.Seen() || p.Member == "" {
		return fmt.Errorf("refusing to save an incomplete pin %+v", p)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(Path(stateDir, p.Member), append(b, '\n'), 0o600)
}
