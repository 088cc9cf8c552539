package watchdog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// learnEndpoints adds every member's client URLs to the endpoints, and
// persists them: after an agent restart while its own member is down, the
// agent must still find the rest of the cluster.
func (w *Watchdog) learnEndpoints(members []observation.Member, clusterID uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed := w.clusterID != clusterID
	w.clusterID = clusterID
	for _, m := range members {
		for _, u := range m.ClientURLs {
			if !slices.Contains(w.endpoints, u) {
				w.endpoints = append(w.endpoints, u)
				changed = true
			}
		}
	}
	if changed && w.cfg.EndpointsFile != "" {
		b, _ := json.Marshal(w.endpoints)
		if os.MkdirAll(filepath.Dir(w.cfg.EndpointsFile), 0o755) == nil {
			_ = fsutil.WriteFileAtomic(w.cfg.EndpointsFile, b, 0o644)
		}
	}
}

func loadEndpoints(path string) []string {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var eps []string
	_ = json.Unmarshal(b, &eps)
	return eps
}
