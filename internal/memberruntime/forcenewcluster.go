package memberruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// ForceFile is a person's request, in a pod member's state dir, that its
// next start be etcd's --force-new-cluster: the majority-lost restore of a
// StatefulSet member from its survivor (docs/management-nodes.md,
// "Majority lost"). The gate judges it (plan.DecideForceNewCluster) and
// sets it aside, used or not, before etcd starts: it is used at most once.
const ForceFile = "force-new-cluster.json"

// ForceRequest is ForceFile's content, as a person writes it.
type ForceRequest struct {
	MemberID    record.MemberID `json:"memberID"`
	RequestedAt time.Time       `json:"requestedAt"`
}

// ReadForceRequest reads ForceFile (false: there is none).
func ReadForceRequest(stateDir string) (plan.ForceNewClusterRequest, bool, error) {
	r, err := ReadForceRequestAt(filepath.Join(stateDir, ForceFile))
	if errors.Is(err, os.ErrNotExist) {
		return plan.ForceNewClusterRequest{}, false, nil
	}
	return r, true, err
}

// ReadForceRequestAt reads a request at p (ForceFile, or one set aside).
func ReadForceRequestAt(p string) (plan.ForceNewClusterRequest, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return plan.ForceNewClusterRequest{}, err
		}
		return plan.ForceNewClusterRequest{}, fmt.Errorf("%s: %w", p, err)
	}
	var r ForceRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return plan.ForceNewClusterRequest{}, fmt.Errorf("%s: %w", p, err)
	}
	return plan.ForceNewClusterRequest{MemberID: uint64(r.MemberID), RequestedAt: r.RequestedAt}, nil
}

// asideStamp is the time in a set-aside request's name.
const asideStamp = "20060102T150405.000000000Z"

// SetForceRequestAside renames ForceFile to <ForceFile>.<outcome>-<time>
// beside it (kept: what was asked, and what became of it), synced, so that
// no later start reads it again; why, when given, is written beside it as
// <that>.why (a refusal's reason, for the person who asked).
func SetForceRequestAside(stateDir, outcome, why string, now time.Time) (string, error) {
	dst := filepath.Join(stateDir, fmt.Sprintf("%s.%s-%s", ForceFile, outcome, now.UTC().Format(asideStamp)))
	if err := moveFile(filepath.Join(stateDir, ForceFile), dst); err != nil {
		return "", fmt.Errorf("set the --force-new-cluster request aside: %w", err)
	}
	if why != "" {
		if err := fsutil.WriteFileAtomic(dst+".why", []byte(why+"\n"), 0o644); err != nil {
			return dst, fmt.Errorf("the reason beside %s: %w", dst, err)
		}
	}
	return dst, nil
}

// StatusFile is the agent's latest report on the member, in its state dir
// (agent.StatusFile).
const StatusFile = "status.json"

// ReadAgentWord reads what the node's agent last reported of the member
// (StatusFile): when, whether the majority is lost, and whether the member
// is a voter in its member list.
func ReadAgentWord(stateDir string) plan.AgentWord {
	p := filepath.Join(stateDir, StatusFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return plan.AgentWord{Err: err.Error()}
	}
	var r struct {
		At           time.Time               `json:"at"`
		MajorityLost bool                    `json:"majorityLost"`
		Observation  observation.Observation `json:"observation"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return plan.AgentWord{Err: fmt.Sprintf("%s: %v", p, err)}
	}
	w := plan.AgentWord{At: r.At, MajorityLost: r.MajorityLost}
	w.Armed, _ = ReadForceArm(stateDir) // unreadable: not armed
	if l := r.Observation.Local; l.ID != 0 {
		m, ok := r.Observation.Member(l.ID)
		w.Voter = ok && !m.IsLearner
	}
	return w
}
