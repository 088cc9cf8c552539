// Package pin remembers which cluster a member belongs to and which member
// ID it serves under: the cluster ID and the member ID are pinned the first
// time the agent sees the member serve (docs/design.md rule 7), in the agent's
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

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Pin is what the agent has seen of one member (see package record).
type Pin = record.Pin

// Decode parses one pin record.
func Decode(b []byte) (Pin, error) { return record.DecodePin(b) }

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

// AdmissionFile holds, in a pod member's state dir, the agent's word on
// whether the member's cluster has served (record.Admission).
const AdmissionFile = "cluster-admission.json"

// LoadAdmission reads the agent's word; the zero Admission when there is
// none. An unreadable file is an error (the gate then holds).
func LoadAdmission(stateDir string) (record.Admission, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, AdmissionFile))
	if errors.Is(err, os.ErrNotExist) {
		return record.Admission{}, nil
	}
	if err != nil {
		return record.Admission{}, err
	}
	var a record.Admission
	if err := json.Unmarshal(b, &a); err != nil || !a.Given() {
		return record.Admission{}, fmt.Errorf("the cluster admission %s is unreadable (%v): the agent rewrites it", filepath.Join(stateDir, AdmissionFile), err)
	}
	return a, nil
}

// SaveAdmission writes a atomically.
func SaveAdmission(stateDir string, a record.Admission) error {
	if !a.Given() {
		return errors.New("refusing to save an admission without its time")
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(stateDir, AdmissionFile), append(b, '\n'), 0o644)
}

// DecodeMap parses a JSON map member name -> pin (the form kept on a Node
// and in a cluster's record); "" is an empty map.
func DecodeMap(s string) (map[string]Pin, error) {
	pins := map[string]Pin{}
	if s == "" {
		return pins, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	for member, b := range raw {
		p, err := Decode(b)
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", member, err)
		}
		if p.Member != member {
			return nil, fmt.Errorf("member %q: the pin names %q", member, p.Member)
		}
		pins[member] = p
	}
	return pins, nil
}

// EncodeWith sets p in pins and encodes the map (the form DecodeMap reads).
func EncodeWith(pins map[string]Pin, p Pin) (string, error) {
	if old, ok := pins[p.Member]; ok && old.SameMember(p) {
		// A member's high-water mark never goes down: a writer that could
		// not read the record first (a state dir rolled back, the API
		// away at start) must not lower it.
		p.HighWater = p.HighWater.Max(old.HighWater)
	}
	pins[p.Member] = p
	b, err := json.Marshal(pins)
	return string(b), err
}

// HighWaterOf is p's high-water mark as the data dir check takes it (none
// before the member's progress was confirmed).
func HighWaterOf(p Pin) localdisk.HighWater {
	if !p.Seen() || p.HighWater.Index == 0 {
		return localdisk.HighWater{}
	}
	return localdisk.HighWater{MemberID: uint64(p.MemberID), Term: p.HighWater.Term, Index: p.HighWater.Index}
}
