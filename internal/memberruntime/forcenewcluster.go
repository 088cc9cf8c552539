package memberruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

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
	p := filepath.Join(stateDir, ForceFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return plan.ForceNewClusterRequest{}, false, nil
	}
	if err != nil {
		return plan.ForceNewClusterRequest{}, true, fmt.Errorf("%s: %w", p, err)
	}
	var r ForceRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return plan.ForceNewClusterRequest{}, true, fmt.Errorf("%s: %w", p, err)
	}
	return plan.ForceNewClusterRequest{MemberID: uint64(r.MemberID), RequestedAt: r.RequestedAt}, true, nil
}

// SetForceRequestAside renames ForceFile to <ForceFile>.<outcome>-<time>
// beside it (kept: what was asked, and what became of it), synced, so that
// no later start reads it again.
func SetForceRequestAside(stateDir, outcome string, now time.Time) (string, error) {
	dst := filepath.Join(stateDir, fmt.Sprintf("%s.%s-%s", ForceFile, outcome, now.UTC().Format("20060102T150405.000000000Z")))
	if err := moveFile(filepath.Join(stateDir, ForceFile), dst); err != nil {
		return "", fmt.Errorf("set the --force-new-cluster request aside: %w", err)
	}
	return dst, nil
}
