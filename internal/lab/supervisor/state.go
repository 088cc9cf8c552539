package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ContainerState is what the supervisor knows about one container, written to
// the state file so the lab's fault verbs and tests can find its PID.
type ContainerState struct {
	PID       int       `json:"pid,omitempty"`
	State     string    `json:"state"` // waiting | running | exited
	Restarts  int       `json:"restarts"`
	StartedAt time.Time `json:"startedAt,omitzero"`
	LastExit  string    `json:"lastExit,omitempty"`
	Init      bool      `json:"init,omitempty"`
}

// PodState is one static pod: one manifest file in the manifests dir.
type PodState struct {
	Manifest   string                    `json:"manifest"`
	Name       string                    `json:"name"`
	Containers map[string]ContainerState `json:"containers"`
}

// State is the supervisor's state file.
type State struct {
	PID     int                 `json:"pid"`
	Updated time.Time           `json:"updated"`
	Pods    map[string]PodState `json:"pods"`
}

// Container returns the state of container name in the pod whose manifest file
// is manifest (e.g. "etcd.yaml").
func (s State) Container(manifest, name string) (ContainerState, bool) {
	p, ok := s.Pods[manifest]
	if !ok {
		return ContainerState{}, false
	}
	c, ok := p.Containers[name]
	return c, ok
}

// ReadState reads a state file written by a running supervisor.
func ReadState(path string) (State, error) {
	var s State
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("supervisor state %s: %w", path, err)
	}
	return s, nil
}

// writeFileAtomic writes via a temp file and rename so a reader never sees a
// half-written file.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
