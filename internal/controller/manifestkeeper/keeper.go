// Package manifestkeeper keeps a checkpoint of a static-pod member's last
// good manifest and puts it back when the manifest vanishes by accident, as
// plan.DecideManifestRestore says (docs/design.md §6, the `manifest` entry
// of §4).
package manifestkeeper

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/netprobe"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
)

// The checkpoint of the member's last good static-pod manifest, in the
// state dir: the manifest as it was while the member served healthy, and
// what it was then (plan.ManifestCheckpoint).
const (
	checkpointDirName  = "manifest-checkpoint"
	checkpointMetaName = "checkpoint.json"
	lastLiveName       = "last-live.sha256"
	decommissionedName = "decommissioned"
	manifestHoldName   = "manifest-hold" // a person's: never written or removed by the agent
	manifestRestoreLog = "manifest-restores.jsonl"
	// restoreLogKeep bounds the restore log (the limit reads an hour of it:
	// plan.MaxRestores lines at most).
	restoreLogKeep      = 100
	keeperEventReason   = nodereport.ReasonManifestRestored
	keeperCheckpointMax = 1 << 20 // a manifest is a few KiB; a bigger file is not one
)

// Keeper keeps a checkpoint of the member's last good manifest and
// puts it back when the manifest vanishes by accident (not parked by the
// agent), as plan.DecideManifestRestore says. It runs in the member's
// observation loop, after the healer (never beside it: both touch the
// manifest), and is cheap: a few stats per poll, a write only on change.
type Keeper struct {
	manifest, parked, stateDir string
	delay                      time.Duration
	dryRun, autoHeal           bool
	listen                     []string // the member's client and peer URLs
	member                     string
	metrics                    *metrics.Metrics
	rep                        *nodereport.Reporter // nil: no API (Events are skipped)
	log                        *zap.Logger

	goneSince time.Time
	// seenSHA is the manifest seen at the last healthy full observation: a
	// checkpoint takes a manifest only when seen twice so (an edit the
	// kubelet has not applied yet is not what the member runs).
	seenSHA  string
	said     plan.Reason // the last answer logged, so each change is said once
	saidGone bool
	// answered, when set, gets each new answer (the status file).
	answered func(plan.ManifestRestore)
	// listenOverride, in tests, is dialled instead of the member's URLs.
	listenOverride string
	// link puts the checkpoint in place (linkNew; a test's failing one).
	link func(path string, data []byte) error
	// logErr is the restore log's last write failure, until a write works.
	logErr error
	// writeLog writes the restore log (fsutil.WriteFileAtomic; a test's failing one).
	writeLog func(path string, data []byte, perm os.FileMode) error
}

// Config is what the keeper reads of the agent's configuration.
type Config struct {
	// Manifest is the kubelet's static-pod manifest of the member; Parked
	// where the agent parks it to stop the member.
	Manifest, Parked, StateDir string
	// Delay is --manifest-restore-delay (0: restores off).
	Delay            time.Duration
	DryRun, AutoHeal bool
}

// New is the keeper of member's manifest.
func New(c Config, member string, m *metrics.Metrics, rep *nodereport.Reporter, log *zap.Logger) *Keeper {
	return &Keeper{manifest: c.Manifest, parked: c.Parked, stateDir: c.StateDir,
		delay: c.Delay, dryRun: c.DryRun, autoHeal: c.AutoHeal, member: member, metrics: m, rep: rep, log: log, link: linkNew, writeLog: fsutil.WriteFileAtomic}
}

// CheckpointCopy is the checkpoint of manifest kept in stateDir.
func CheckpointCopy(stateDir, manifest string) string {
	return filepath.Join(stateDir, checkpointDirName, filepath.Base(manifest))
}

// OnAnswer sets what gets each new answer of the keeper (the status file).
func (k *Keeper) OnAnswer(f func(plan.ManifestRestore)) { k.answered = f }

func (k *Keeper) dir() string { return filepath.Join(k.stateDir, checkpointDirName) }

// checkpointCopy is the checkpoint's manifest file (named as the live one).
func (k *Keeper) checkpointCopy() string {
	return CheckpointCopy(k.stateDir, k.manifest)
}

// Consider looks at the manifest once: refreshes the checkpoint of a
// healthy member's manifest, or decides whether to put a vanished one back
// and does; restored says it did.
func (k *Keeper) Consider(r memberstate.Result) (restored bool) {
	live, err := fsutil.Exists(k.manifest)
	if err != nil {
		k.log.Warn("manifest keeper: cannot look at the manifest", zap.Error(err))
		return false
	}
	parked, err := fsutil.Exists(k.parked)
	if err != nil {
		k.log.Warn("manifest keeper: cannot look at the parked manifest", zap.Error(err))
		return false
	}
	o := r.Observation
	if live {
		k.goneSince = time.Time{}
		k.noteLive()
		if r.Verdict.State == memberstate.Healthy && o.Local.Match == observation.MatchOK && !o.PeersReused {
			if err := k.refresh(o); err != nil {
				k.log.Warn("manifest keeper: the checkpoint of the manifest is not taken; the last one stays", zap.Error(err))
			}
		} else {
			k.seenSHA = ""
		}
	} else if !parked && k.goneSince.IsZero() {
		k.goneSince = o.At
	}
	portInUse, other := "", ""
	if !live && !parked {
		portInUse, other = k.answering(o), k.otherEtcd()
	}
	cp, _, cerr := k.load()
	if cerr != nil && !errors.Is(cerr, fs.ErrNotExist) {
		k.log.Warn("manifest keeper: the checkpoint cannot be read", zap.Error(cerr))
	}
	j, _, jerr := journal.Load(k.stateDir, k.member)
	if jerr != nil {
		k.log.Warn("manifest keeper: the journal cannot be read; nothing is restored", zap.Error(jerr))
		return false
	}
	recent, lerr := k.recentRestores(o.At)
	d := plan.DecideManifestRestore(plan.ManifestRestoreInput{Now: o.At, Obs: o, Live: live, Parked: parked, Checkpoint: cp,
		GoneSince: k.goneSince, Delay: k.delay, Journal: j, Decommissioned: k.decommission(), PortInUse: portInUse,
		OtherEtcd: other, LastLiveSHA: k.lastLive(),
		RecentRestores: recent, RestoreLogErr: k.restoreLogErr(lerr), AutoHeal: k.autoHeal, DryRun: k.dryRun})
	k.metrics.ManifestMissing.WithLabelValues(k.member).Set(metrics.Bool(d.Missing))
	k.say(d)
	return d.Restore && k.restore(cp, d, o.At)
}

// say logs the answer when it changes (a missing manifest every poll would
// flood the log; its change is what a person needs).
func (k *Keeper) say(d plan.ManifestRestore) {
	if d.Missing == k.saidGone && d.Reason == k.said {
		return
	}
	k.saidGone, k.said = d.Missing, d.Reason
	if k.answered != nil {
		k.answered(d)
	}
	switch {
	case d.Missing:
		k.log.Warn("the etcd static-pod manifest is gone and the agent did not park it", zap.String("manifest", k.manifest),
			zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail))
	case d.Quiet() && d.Detail == "":
		k.log.Info("the etcd static-pod manifest is in place", zap.String("manifest", k.manifest))
	}
}

// refresh writes the checkpoint when the manifest or what it is of changed.
func (k *Keeper) refresh(o observation.Observation) error {
	data, err := readManifest(k.manifest)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	seen := hex.EncodeToString(sum[:])
	if seen != k.seenSHA {
		k.seenSHA = seen // taken at the next healthy look, if unchanged
		return nil
	}
	if err := k.describesMember(o); err != nil {
		return err
	}
	if _, aside, err := manifest.ClientURLsAsideOf(data); err != nil || aside {
		// A learner's start set the client URLs aside (a 3.5 learner): not
		// the member's own manifest, never put back as it is. The agent
		// restarts it on its own soon (plan.decideRestoreClientURLs).
		k.log.Debug("manifest keeper: the client URLs are set aside; not checkpointed until they are back", zap.Error(err))
		return nil
	}
	cp := plan.ManifestCheckpoint{Member: o.Local.Name, MemberID: o.Local.ID, ClusterID: o.ClusterID, Voters: o.Voters(),
		SHA256: hex.EncodeToString(sum[:]), SavedAt: o.At.UTC()}
	if old, _, err := k.load(); err == nil && old.SHA256 == cp.SHA256 && old.MemberID == cp.MemberID &&
		old.ClusterID == cp.ClusterID && old.Voters == cp.Voters && old.Member == cp.Member {
		return nil
	}
	if err := os.MkdirAll(k.dir(), 0o700); err != nil {
		return err
	}
	// The copy first, its description last: a checkpoint.json always
	// describes the copy beside it (load checks the sum).
	if err := fsutil.WriteFileAtomic(k.checkpointCopy(), data, 0o600); err != nil {
		return err
	}
	meta, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(k.dir(), checkpointMetaName), meta, 0o600); err != nil {
		return err
	}
	k.log.Info("checkpoint of the etcd manifest kept", zap.String("checkpoint", k.checkpointCopy()),
		zap.String("memberID", fmt.Sprintf("%x", cp.MemberID)), zap.Int("voters", cp.Voters))
	return nil
}

// describesMember checks that the live manifest is the member's own as the
// agent knows it: the same name, data dir and peer URLs (an edit to
// another member, data dir or address is not a last good manifest), and
// not a one-time --force-new-cluster start (docs/runbooks, majority lost),
// which must never be replayed.
func (k *Keeper) describesMember(o observation.Observation) error {
	m, err := manifest.LoadMember(k.manifest)
	if err != nil {
		return err
	}
	data, err := readManifest(k.manifest)
	if err != nil {
		return err
	}
	host, _ := m.HostPath(m.DataDir)
	switch {
	case m.Name != o.Local.Name:
		return fmt.Errorf("the manifest names member %q, the agent's member is %q", m.Name, o.Local.Name)
	case host != o.Local.DataDir:
		return fmt.Errorf("the manifest's data dir is %q on the node, the member's %q", host, o.Local.DataDir)
	case !slices.Equal(m.PeerURLs, o.Local.PeerURLs):
		return fmt.Errorf("the manifest's peer URLs %v are not the member's %v", m.PeerURLs, o.Local.PeerURLs)
	case bytes.Contains(data, []byte("--force-new-cluster")):
		return errors.New("the manifest starts etcd with --force-new-cluster (a one-time restore): never checkpointed")
	}
	return nil
}

// noteLive keeps the sha256 of the manifest in place (on change only).
func (k *Keeper) noteLive() {
	data, err := readManifest(k.manifest)
	if err != nil {
		return
	}
	sum := sha256.Sum256(data)
	if h := hex.EncodeToString(sum[:]); h != k.lastLive() {
		if err := os.MkdirAll(k.dir(), 0o700); err == nil {
			err = fsutil.WriteFileAtomic(filepath.Join(k.dir(), lastLiveName), []byte(h), 0o600)
		}
		if err != nil {
			k.log.Warn("manifest keeper: the sum of the manifest in place is not kept; no checkpoint goes back until it is", zap.Error(err))
		}
	}
}

func (k *Keeper) lastLive() string {
	b, _ := os.ReadFile(filepath.Join(k.dir(), lastLiveName))
	return string(b)
}

// otherEtcd names another manifest in the kubelet's dir that runs etcd
// (the kubelet runs every file but dot files).
func (k *Keeper) otherEtcd() string {
	dir := filepath.Dir(k.manifest)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return dir + " (unreadable: " + err.Error() + ")"
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || name == filepath.Base(k.manifest) {
			continue
		}
		if _, err := manifest.LoadMember(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	return ""
}

// answering names the member's client or peer URL that accepts a
// connection now, or whose answer is unknown (a dial that timed out proves
// nothing): "" only when every one refuses (netprobe, each dial bounded to
// a second).
func (k *Keeper) answering(o observation.Observation) string {
	urls := append([]string{o.Local.ClientURL}, o.Local.PeerURLs...)
	if k.listenOverride != "" {
		urls = []string{k.listenOverride}
	}
	for _, u := range urls {
		accepted, refused, err := netprobe.Dial(u, time.Second)
		switch {
		case accepted:
			return u
		case !refused && !errors.Is(err, netprobe.ErrUnprobeable):
			return u + " (no answer either way: " + err.Error() + ")"
		}
	}
	return ""
}

// The restore log's results: a line is written before each attempt, and
// one more when its link failed (the manifest was not put back).
const (
	restoreAttempted = "restoring"
	restoreFailed    = "failed"
)

// recentRestores counts the restores in the state dir's log within
// plan.RestoreWindow before now: the attempts not marked failed. A log
// that cannot be read is an error: counting none would lift the limit.
func (k *Keeper) recentRestores(now time.Time) (int, error) {
	lines, err := k.readLog()
	if err != nil {
		return 0, err
	}
	attempts, failed := map[time.Time]int{}, map[time.Time]int{}
	for _, line := range lines {
		var e struct {
			At     time.Time `json:"at"`
			Result string    `json:"result"`
		}
		if err := json.Unmarshal(line, &e); err != nil || e.At.IsZero() {
			return 0, fmt.Errorf("the restore log has a line it cannot read (%.60q): %v", line, err)
		}
		if now.Sub(e.At) >= plan.RestoreWindow {
			continue
		}
		if e.Result == restoreFailed {
			failed[e.At]++
		} else {
			attempts[e.At]++
		}
	}
	n := 0
	for at, a := range attempts {
		n += max(0, a-failed[at])
	}
	return n, nil
}

// restoreLogErr is why the restore log cannot be used now: unreadable, or
// its last write failed and writing it again (as it is) still does.
func (k *Keeper) restoreLogErr(readErr error) string {
	if readErr != nil {
		return readErr.Error()
	}
	if k.logErr != nil {
		lines, err := k.readLog()
		if err == nil {
			err = k.writeLines(lines)
		}
		if err != nil {
			return err.Error()
		}
		k.logErr = nil
	}
	return ""
}

// load reads the checkpoint and checks that the copy is the one described.
func (k *Keeper) load() (*plan.ManifestCheckpoint, []byte, error) {
	meta, err := os.ReadFile(filepath.Join(k.dir(), checkpointMetaName))
	if err != nil {
		return nil, nil, err
	}
	var cp plan.ManifestCheckpoint
	if err := json.Unmarshal(meta, &cp); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", k.dir(), err)
	}
	data, err := readManifest(k.checkpointCopy())
	if err != nil {
		return nil, nil, err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != cp.SHA256 {
		return nil, nil, fmt.Errorf("checkpoint %s: the copy's sha256 is not the one recorded", k.checkpointCopy())
	}
	return &cp, data, nil
}

// restore puts the checkpoint back without ever replacing a manifest that
// appeared meanwhile (a person's, an upgrade's): the copy is written under
// a name the kubelet ignores (a dot file) and linked to the manifest's
// name, which fails if that exists.
func (k *Keeper) restore(cp *plan.ManifestCheckpoint, d plan.ManifestRestore, now time.Time) bool {
	_, data, err := k.load()
	if err == nil {
		// Journaled first: a crash after the link still counts it, and a
		// restore the log cannot take is not made (the limit would miss it).
		if err = k.record(cp, d, now, restoreAttempted); err != nil {
			k.logErr = err
			k.say(plan.ManifestRestore{Missing: true, Reason: plan.ReasonRestoreLogUnusable, Detail: err.Error()})
		} else {
			if err = k.link(k.manifest, data); err != nil {
				// Not put back: the attempt does not count (if even this
				// line fails, it does: the safe side).
				if rerr := k.record(cp, d, now, restoreFailed); rerr != nil {
					k.log.Warn("the failed restore could not be marked in the restore log; it counts towards the limit", zap.Error(rerr))
				}
			}
		}
	}
	if errors.Is(err, fs.ErrExist) {
		k.log.Info("a manifest appeared while the checkpoint was being put back; it is left as it is", zap.String("manifest", k.manifest))
		return false
	}
	if err != nil {
		k.log.Error("putting the checkpoint of the etcd manifest back failed; tried again at the next poll", zap.String("manifest", k.manifest), zap.Error(err))
		return false
	}
	k.goneSince = time.Time{}
	k.metrics.ManifestRestoresTotal.WithLabelValues(k.member).Inc()
	k.log.Warn("the etcd static-pod manifest vanished and was put back from its checkpoint", zap.String("manifest", k.manifest),
		zap.String("memberID", fmt.Sprintf("%x", cp.MemberID)), zap.String("detail", d.Detail))
	if k.rep != nil {
		k.rep.Eventf("Warning", keeperEventReason, "%s: %s (%s)", k.member, d.Detail, k.manifest)
	}
	return true
}

// record adds the restore to the state dir's log of restores (the journal
// of a step that changes no membership, and what the hourly limit counts),
// keeping its last restoreLogKeep lines: written whole under a temp name,
// synced, renamed.
func (k *Keeper) record(cp *plan.ManifestCheckpoint, d plan.ManifestRestore, at time.Time, result string) error {
	line, err := json.Marshal(map[string]any{"at": at.UTC(), "result": result, "manifest": k.manifest, "memberID": fmt.Sprintf("%x", cp.MemberID),
		"checkpointSavedAt": cp.SavedAt, "sha256": cp.SHA256, "detail": d.Detail})
	if err != nil {
		return err
	}
	lines, err := k.readLog()
	if err != nil {
		return err
	}
	return k.writeLines(append(lines, line))
}

// readLog returns the restore log's lines (none when there is no log).
func (k *Keeper) readLog() ([][]byte, error) {
	b, err := os.ReadFile(filepath.Join(k.stateDir, manifestRestoreLog))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the restore log: %w", err)
	}
	var lines [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// writeLines writes the log whole, its last restoreLogKeep lines.
func (k *Keeper) writeLines(lines [][]byte) error {
	lines = lines[max(0, len(lines)-restoreLogKeep):]
	if err := k.writeLog(filepath.Join(k.stateDir, manifestRestoreLog), append(bytes.Join(lines, []byte("\n")), '\n'), 0o600); err != nil {
		return fmt.Errorf("write the restore log: %w", err)
	}
	return nil
}

// SetDecommissioned keeps the Node's decommission annotation in the state
// dir: a lone member's manifest removed right after the annotation takes
// the API down with it, and an agent restarted then must still know.
func (k *Keeper) SetDecommissioned(on bool) {
	p := filepath.Join(k.stateDir, decommissionedName)
	if on == k.decommissioned() {
		return
	}
	var err error
	if on {
		err = fsutil.WriteFileAtomic(p, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		k.log.Error("the Node's decommission annotation could not be kept in the state dir", zap.Bool("decommissioned", on), zap.Error(err))
		return
	}
	k.log.Info("the Node's decommission annotation changed: a vanished manifest is restored only without it", zap.Bool("decommissioned", on))
}

func (k *Keeper) decommissioned() bool {
	_, err := os.Stat(filepath.Join(k.stateDir, decommissionedName))
	return err == nil
}

// decommission says why the member is being taken away on purpose ("" if
// not): the Node's annotation (kept in the state dir), or a person's hold
// file, which works with no API at all.
func (k *Keeper) decommission() string {
	if k.decommissioned() {
		return "the Node's " + nodereport.AnnotationDecommission + " annotation"
	}
	if _, err := os.Stat(filepath.Join(k.stateDir, manifestHoldName)); err == nil {
		return filepath.Join(k.stateDir, manifestHoldName)
	}
	return ""
}

// Forget drops the checkpoint: the member moved away on purpose.
func (k *Keeper) Forget() {
	if err := os.RemoveAll(k.dir()); err != nil {
		k.log.Warn("the checkpoint of a member that moved away could not be removed", zap.Error(err))
	}
}

func readManifest(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > keeperCheckpointMax {
		return nil, fmt.Errorf("%s: %d bytes is not an etcd manifest", path, st.Size())
	}
	return os.ReadFile(path)
}

// linkNew creates path with data, failing with fs.ErrExist if it exists.
func linkNew(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".restore-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(0o600), tmp.Sync(), tmp.Close())
	if err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}
