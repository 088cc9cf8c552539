package watchdog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
)

// learnEndpoints sets the endpoints to the current members' client URLs
// (plus the configured ones and our own), and persists them: after an agent
// restart while its own member is down, the agent must still find the rest
// of the cluster. A removed member's URL is dropped: its IP may be recycled,
// even for another cluster. The first cluster seen is adopted.
func (w *Watchdog) learnEndpoints(members []observation.Member, clusterID uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.clusterID != clusterID {
		if w.clusterID != 0 {
			// Only the pin store can move us (the list passed its check).
			w.cfg.Log.Warn("cluster ID changed by the pin", zap.String("from", fmt.Sprintf("%x", w.clusterID)),
				zap.String("to", fmt.Sprintf("%x", clusterID)))
		}
		w.clusterID = clusterID
	}
	eps := pruneEndpoints(append([]string{w.cfg.Identity.ClientURL}, w.cfg.Endpoints...), members)
	if slices.Equal(eps, w.endpoints) {
		return
	}
	keep := map[string]bool{}
	for _, e := range eps {
		keep[e] = true
	}
	for _, e := range w.endpoints {
		if !keep[e] {
			w.clients.drop(e)
		}
	}
	w.endpoints = eps
	if w.cfg.EndpointsFile != "" {
		w.saveEndpoints()
	}
}

// saveEndpoints persists w.endpoints; a file found corrupt at start is first
// renamed aside (<file>.corrupt-<UTC time>), never silently overwritten,
// and while that fails nothing is written. Called with w.mu held.
func (w *Watchdog) saveEndpoints() {
	file := w.cfg.EndpointsFile
	if w.corruptAside {
		aside := file + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000000000Z")
		if err := os.Rename(file, aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
			w.cfg.Log.Error("the corrupt learned endpoints file could not be kept aside; not overwriting it", zap.String("file", file), zap.Error(err))
			return
		}
		w.corruptAside = false
		w.cfg.Log.Warn("corrupt learned endpoints file kept aside; writing the learned ones anew", zap.String("file", file), zap.String("keptAs", aside))
	}
	b, _ := json.Marshal(w.endpoints)
	err := os.MkdirAll(filepath.Dir(file), 0o755)
	if err == nil {
		err = fsutil.WriteFileAtomic(file, b, 0o644)
	}
	if err != nil {
		w.cfg.Log.Warn("learned endpoints not saved", zap.Error(err))
	}
}

// pruneEndpoints is keep then every member's client URLs, once each.
func pruneEndpoints(keep []string, members []observation.Member) []string {
	out := slices.Clone(keep)
	for _, m := range members {
		out = append(out, m.ClientURLs...)
	}
	return uniq(out)
}

// errCorruptEndpoints: the file was read but is not a JSON list of URLs.
var errCorruptEndpoints = errors.New("corrupt learned endpoints file")

// loadEndpoints reads the persisted endpoints (none when the file does not
// exist yet).
func loadEndpoints(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var eps []string
	if err := json.Unmarshal(b, &eps); err != nil {
		return nil, fmt.Errorf("%w %s: %w", errCorruptEndpoints, path, err)
	}
	return eps, nil
}

// LoadError is why the learned endpoints file could not be read at start
// (nil when it was read, or did not exist).
func (w *Watchdog) LoadError() error { return w.loadErr }
