package memberruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The pod runtime (docs/design.md §11) runs a member that is an API pod, e.g.
// one of a StatefulSet's: the agent cannot take the pod away (its
// controller re-creates it at once), so it holds etcd back instead. Its
// start gate ("etcd-agent gate --state-dir=<member state dir> -- etcd ...")
// reads two files in the member's state dir, on the node:
//   - HoldFile: while it exists the gate holds etcd, whatever the data dir
//     says (the pod runtime's "parked manifest");
//   - StartFile: the flags a rejoin starts with (--initial-cluster-state
//     existing, --initial-cluster), which the gate sets on etcd's command
//     line when it lets etcd start.
//
// Stop writes HoldFile, deletes the pod (gracefully: its own grace period)
// and waits for the process to go; the re-created pod's gate holds. Start
// writes StartFile and removes HoldFile; the gate then judges as always.
const (
	HoldFile  = "held-by-agent.json"
	StartFile = "start-flags.json"
)

// Hold is the content of HoldFile.
type Hold struct {
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// StartFlags is the content of StartFile.
type StartFlags struct {
	InitialCluster      string    `json:"initialCluster"`
	InitialClusterState string    `json:"initialClusterState"`
	WrittenAt           time.Time `json:"writtenAt"`
}

// ReadHold says whether the agent holds the member in stateDir, and since
// when. A file that cannot be read counts as held (never start on doubt).
func ReadHold(stateDir string) (Hold, bool, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, HoldFile))
	if errors.Is(err, os.ErrNotExist) {
		return Hold{}, false, nil
	}
	if err != nil {
		return Hold{}, true, err
	}
	var h Hold
	if err := json.Unmarshal(b, &h); err != nil {
		return Hold{}, true, fmt.Errorf("%s: %w", filepath.Join(stateDir, HoldFile), err)
	}
	return h, true, nil
}

// ReadStartFlags returns the rejoin flags the agent left for the gate.
func ReadStartFlags(stateDir string) (StartFlags, bool, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, StartFile))
	if errors.Is(err, os.ErrNotExist) {
		return StartFlags{}, false, nil
	}
	if err != nil {
		return StartFlags{}, false, err
	}
	var s StartFlags
	if err := json.Unmarshal(b, &s); err != nil {
		return StartFlags{}, false, fmt.Errorf("%s: %w", filepath.Join(stateDir, StartFile), err)
	}
	if s.InitialCluster == "" || s.InitialClusterState != "existing" {
		return StartFlags{}, false, fmt.Errorf("%s: incomplete (%+v)", filepath.Join(stateDir, StartFile), s)
	}
	return s, true, nil
}

// PodDeleter deletes the member's pod, gracefully, and tells when the API
// no longer has it (the API is behind it).
type PodDeleter interface {
	// DeletePod deletes the member's pod if it is bound to this node, with
	// its UID as a precondition; it returns that UID ("" when there was no
	// pod to delete).
	DeletePod(ctx context.Context) (types.UID, error)
	// PodGone: the pod with uid is no longer in the API (its kubelet
	// confirmed its containers' end, or it was force-deleted).
	PodGone(ctx context.Context, uid types.UID) (bool, error)
}

type pod struct {
	key      string // namespace/name, for logs
	deleter  PodDeleter
	stateDir string
	// gated says whether the pod runs etcd through the start gate on
	// stateDir: without it a deleted pod comes back on its old data.
	gated    func() error
	urls     []string
	dataDir  string
	stopWait waitLimits
	log      *zap.Logger
	now      func() time.Time

	mu sync.Mutex
}

// NewPod returns the pod runtime for the member pod key ("ns/name") whose
// gate reads stateDir. listenURLs and dataDir tell that the process is gone.
func NewPod(key string, deleter PodDeleter, stateDir string, gated func() error, listenURLs []string, dataDir string, log *zap.Logger, opts ...Option) Runtime {
	if log == nil {
		log = zap.NewNop()
	}
	return &pod{key: key, deleter: deleter, stateDir: stateDir, gated: gated, urls: listenURLs, dataDir: dataDir,
		stopWait: limits(opts), log: log.With(zap.String("runtime", "pod"), zap.String("pod", key)), now: time.Now}
}

func (p *pod) Describe() string {
	return fmt.Sprintf("pod: %s, held by its start gate through %s while stopped", p.key, filepath.Join(p.stateDir, HoldFile))
}

func (p *pod) Stopped() (bool, error) {
	_, held, err := ReadHold(p.stateDir)
	return held, err
}

func (p *pod) Stop(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.gated(); err != nil {
		return fmt.Errorf("refusing to stop pod %s: %w (a deleted pod would come back and start etcd on its old data)", p.key, err)
	}
	wroteHold := false
	if _, held, err := ReadHold(p.stateDir); err != nil || !held {
		wroteHold = true
		b, _ := json.Marshal(Hold{Since: p.now().UTC(), Reason: "stopped by the agent for a rejoin"})
		if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
			return err
		}
		if err := fsutil.WriteFileAtomic(filepath.Join(p.stateDir, HoldFile), b, 0o600); err != nil {
			return fmt.Errorf("hold the member before deleting its pod: %w", err)
		}
		p.log.Info("holding the member at its start gate", zap.String("hold", filepath.Join(p.stateDir, HoldFile)))
	}
	uid, err := p.deleter.DeletePod(ctx)
	if _, refused := plan.RefusalOf(err); refused && wroteHold {
		// The deleter refused the pod it read, before any delete: the
		// running pod is not stopped, so this call's hold goes again
		// (a failed delete keeps it: the pod may be going).
		if rerr := os.Remove(filepath.Join(p.stateDir, HoldFile)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return errors.Join(fmt.Errorf("delete pod %s: %w", p.key, err), fmt.Errorf("remove the hold again: %w", rerr))
		}
		_ = fsutil.SyncDir(p.stateDir) // best effort: a hold that survives a crash is put back by the attempt's close
		p.log.Info("the pod was not deleted (refused); its hold removed again", zap.Error(err))
		return fmt.Errorf("delete pod %s: %w", p.key, err)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", p.key, err)
	}
	p.log.Info("deleted the member's pod to stop etcd (graceful; its controller re-creates it, held at the gate)", zap.String("uid", string(uid)))
	// Gone = the API no longer has that pod (its kubelet confirmed the
	// end of its containers) and nobody holds the db lock. Not its IP: a
	// deleted pod's address times out rather than refusing, on a real
	// network.
	if err := p.waitPodGone(ctx, uid); err != nil {
		return fmt.Errorf("pod %s deleted but etcd has not stopped: %w", p.key, err)
	}
	p.log.Info("etcd member stopped")
	return nil
}

func (p *pod) waitPodGone(ctx context.Context, uid types.UID) error {
	start := time.Now()
	var logged time.Time
	var last string
	dataDir := p.dataDir
	err := wait.PollUntilContextTimeout(ctx, pollInterval, p.stopWait.timeout, true, func(ctx context.Context) (bool, error) {
		if uid != "" {
			gone, err := p.deleter.PodGone(ctx, uid)
			if err != nil || !gone {
				last = fmt.Sprintf("pod %s (uid %s) still in the API (%v)", p.key, uid, err)
				return p.still(start, &logged, last), nil
			}
			// A file in place of the data dir has no db lock to check
			// (issue 38): the API's word is the answer there is.
			if fi, err := os.Stat(dataDir); dataDir != "" && err == nil && !fi.IsDir() {
				p.log.Info("data dir is not a directory: its db lock cannot be checked; the API's word that the pod is gone decides",
					zap.String("dataDir", dataDir), zap.String("uid", string(uid)))
				dataDir = ""
			}
		}
		st, err := probeProcess(nil, dataDir)
		if err != nil {
			return false, err
		}
		if !st.gone() {
			last = st.detail
			return p.still(start, &logged, last), nil
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("not gone within %s: %s: %w", p.stopWait.timeout, last, err)
	}
	return err
}

// still logs, every stopWait.every, that Stop still waits; it returns false.
func (p *pod) still(start time.Time, logged *time.Time, detail string) bool {
	if time.Since(start) >= p.stopWait.every && time.Since(*logged) >= p.stopWait.every {
		*logged = time.Now()
		p.log.Info("still waiting for the member's pod to go", zap.Duration("waited", time.Since(start).Round(time.Millisecond)),
			zap.Duration("timeout", p.stopWait.timeout), zap.String("detail", detail))
	}
	return false
}

func (p *pod) Start(ctx context.Context, initialCluster string) error {
	if strings.TrimSpace(initialCluster) == "" {
		return errors.New("start: empty --initial-cluster")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := json.Marshal(StartFlags{InitialCluster: initialCluster, InitialClusterState: "existing", WrittenAt: p.now().UTC()})
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(p.stateDir, StartFile), b, 0o600); err != nil {
		return fmt.Errorf("write the rejoin flags for the gate: %w", err)
	}
	if err := os.Remove(filepath.Join(p.stateDir, HoldFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release the member at its start gate: %w", err)
	}
	if err := fsutil.SyncDir(p.stateDir); err != nil {
		return err
	}
	p.log.Info("released the member at its start gate", zap.String("initialCluster", initialCluster))
	return nil
}
