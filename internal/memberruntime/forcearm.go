package memberruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// ArmFile is the agent's mark, beside ForceFile, that it holds the
// cluster's recovery Lease for that request (plan.ForceArm): the gate uses
// a request only while it is armed. NotArmedFile says why a request waits
// unarmed, for the person who wrote it.
// ArmAsideFile is a mark set aside while the agent keeps the Lease until
// its time is over (the gate never reads it; the agent reads it back after
// a restart).
const (
	ArmFile      = "force-new-cluster.armed"
	ArmAsideFile = "force-new-cluster.armed.aside"
	NotArmedFile = "force-new-cluster.not-armed"
)

type forceArmFile struct {
	MemberID    record.MemberID `json:"memberID"`
	RequestedAt time.Time       `json:"requestedAt"`
	Holder      string          `json:"holder"`
	Until       time.Time       `json:"until"`
}

// ReadForceArm reads ArmFile (nil, nil: there is none).
func ReadForceArm(stateDir string) (*plan.ForceArm, error) {
	return readForceArm(filepath.Join(stateDir, ArmFile))
}

// ReadForceArmAside reads ArmAsideFile (nil, nil: there is none).
func ReadForceArmAside(stateDir string) (*plan.ForceArm, error) {
	return readForceArm(filepath.Join(stateDir, ArmAsideFile))
}

// SetForceArmAside renames ArmFile to ArmAsideFile, synced: the gate uses
// nothing after it.
func SetForceArmAside(stateDir string) error {
	return moveFile(filepath.Join(stateDir, ArmFile), filepath.Join(stateDir, ArmAsideFile))
}

func readForceArm(p string) (*plan.ForceArm, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var f forceArmFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &plan.ForceArm{MemberID: uint64(f.MemberID), RequestedAt: f.RequestedAt, Holder: f.Holder, Until: f.Until}, nil
}

// WriteForceArm writes ArmFile (atomically, synced) and removes
// NotArmedFile and an ArmAsideFile (an older mark).
func WriteForceArm(stateDir string, a plan.ForceArm) error {
	b, err := json.Marshal(forceArmFile{MemberID: record.MemberID(a.MemberID), RequestedAt: a.RequestedAt, Holder: a.Holder, Until: a.Until})
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(stateDir, ArmFile), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return errors.Join(removeIfThere(filepath.Join(stateDir, NotArmedFile)), removeIfThere(filepath.Join(stateDir, ArmAsideFile)))
}

// RemoveForceArm removes ArmFile and ArmAsideFile (synced).
func RemoveForceArm(stateDir string) error {
	if err := errors.Join(removeIfThere(filepath.Join(stateDir, ArmFile)), removeIfThere(filepath.Join(stateDir, ArmAsideFile))); err != nil {
		return err
	}
	return fsutil.SyncDir(stateDir)
}

// SayNotArmed writes why a request waits unarmed ("" removes the word).
func SayNotArmed(stateDir, why string) error {
	p := filepath.Join(stateDir, NotArmedFile)
	if why == "" {
		return removeIfThere(p)
	}
	return fsutil.WriteFileAtomic(p, []byte(why+"\n"), 0o644)
}

// ForceRequestUsedAt is when the gate set the request a names aside as
// used (zero: it did not). The set-aside file is the request itself: it is
// matched by its content (member and time asked), never by clocks; the
// time is the one in its name (SetForceRequestAside, this node's clock).
func ForceRequestUsedAt(stateDir string, a plan.ForceArm) time.Time {
	names, _ := filepath.Glob(filepath.Join(stateDir, ForceFile+".used-*"))
	var at time.Time
	for _, n := range names {
		t, err := time.Parse(asideStamp, strings.TrimPrefix(filepath.Base(n), ForceFile+".used-"))
		if err != nil || !t.After(at) { // a .why beside it does not parse
			continue
		}
		if r, err := ReadForceRequestAt(n); err == nil && r.Is(a.Request()) {
			at = t
		}
	}
	return at
}

func removeIfThere(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
