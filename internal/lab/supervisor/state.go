package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
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
	ExitCode  int       `json:"exitCode,omitempty"` // of the last exit: status, or 128+signal
	Init      bool      `json:"init,omitempty"`
	// Ready: the readiness probe passes (API pods with a probe only).
	Ready bool `json:"ready,omitempty"`
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
