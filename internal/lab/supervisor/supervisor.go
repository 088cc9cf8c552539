// Package supervisor is the lab's stand-in for a kubelet running static pods:
// it runs the Pod manifests present in a node's manifests dir (init containers
// one by one to completion, then the containers), restarts a container that
// exits with backoff, stops a pod whose manifest disappears and restarts one
// whose manifest changes. Only what static etcd and agent pods need is
// supported: command, args, env values and workingDir.
package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Config says where a node's static pods and their logs live.
type Config struct {
	ManifestsDir string
	LogsDir      string
	StateFile    string
	// Resync re-reads the manifests dir even without fsnotify events
	// (a rename into the dir from elsewhere is not always reported).
	Resync time.Duration
	// StopTimeout is how long a container has after SIGTERM before SIGKILL.
	StopTimeout time.Duration
	Log         *zap.Logger
	// Kubelet, when set, makes the supervisor the lab kubelet of a Node.
	Kubelet *KubeletConfig
}

// Supervisor runs the static pods of one lab node.
type Supervisor struct {
	cfg  Config
	mu   sync.Mutex
	pods map[string]*podRunner // by manifest file name
	// apiPods are the API pods the lab kubelet runs, by namespace/name.
	apiPods map[string]*podRunner
	kubelet *kubelet
	// writeMu makes snapshot-and-write one step, so the write that lands
	// last always carries the newest snapshot, never an older one.
	writeMu sync.Mutex
}

// New checks cfg and returns a supervisor; Run starts it.
func New(cfg Config) (*Supervisor, error) {
	if cfg.ManifestsDir == "" || cfg.LogsDir == "" || cfg.StateFile == "" {
		return nil, fmt.Errorf("supervisor: manifests dir, logs dir and state file are required")
	}
	if cfg.Resync == 0 {
		cfg.Resync = time.Second
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	for _, d := range []string{cfg.ManifestsDir, cfg.LogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	s := &Supervisor{cfg: cfg, pods: map[string]*podRunner{}, apiPods: map[string]*podRunner{}}
	if cfg.Kubelet != nil {
		k, err := newKubelet(s, *cfg.Kubelet)
		if err != nil {
			return nil, err
		}
		s.kubelet = k
	}
	return s, nil
}

// Run supervises until ctx is done, then stops every container it started.
func (s *Supervisor) Run(ctx context.Context) error {
	// Containers start with every signal at its default, as a container
	// runtime starts them: a lab run under nohup (CI) would otherwise pass
	// an ignored SIGHUP on to etcd through exec, and the gate's stop watch
	// cannot end an etcd that ignores it. Caught here, SIGHUP is reset to
	// its default in every process this supervisor starts.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(s.cfg.ManifestsDir); err != nil {
		return fmt.Errorf("watch %s: %w", s.cfg.ManifestsDir, err)
	}
	tick := time.NewTicker(s.cfg.Resync)
	defer tick.Stop()
	s.sync(ctx)
	kubeletDone := make(chan struct{})
	if s.kubelet != nil {
		go func() { defer close(kubeletDone); s.kubelet.run(ctx) }()
	} else {
		close(kubeletDone)
	}
	for {
		select {
		case <-ctx.Done():
			<-kubeletDone
			s.stopAll()
			return nil
		case <-w.Events:
			s.sync(ctx)
		case err := <-w.Errors:
			s.cfg.Log.Warn("manifest watch error", zap.Error(err))
		case <-tick.C:
			s.sync(ctx)
		}
	}
}

type manifestFile struct {
	pod  *corev1.Pod
	hash string
}

// readManifests returns the pods present in the manifests dir, by file name.
// Hidden files and editor/temp files are ignored, as the kubelet does.
func (s *Supervisor) readManifests() map[string]manifestFile {
	out := map[string]manifestFile{}
	entries, err := os.ReadDir(s.cfg.ManifestsDir)
	if err != nil {
		s.cfg.Log.Warn("read manifests dir", zap.Error(err))
		return out
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		ext := filepath.Ext(name)
		if ext != ".yaml" && ext != ".yml" && ext != ".json" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.cfg.ManifestsDir, name))
		if err != nil {
			continue // removed between ReadDir and ReadFile
		}
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(b, &pod); err != nil || pod.Kind != "Pod" || len(pod.Spec.Containers) == 0 {
			s.cfg.Log.Warn("ignoring manifest that is not a Pod with containers", zap.String("manifest", name), zap.Error(err))
			continue
		}
		sum := sha256.Sum256(b)
		out[name] = manifestFile{pod: &pod, hash: fmt.Sprintf("%x", sum)}
	}
	return out
}

func (s *Supervisor) sync(ctx context.Context) {
	want := s.readManifests()
	s.mu.Lock()
	var stop []*podRunner
	for name, pr := range s.pods {
		if m, ok := want[name]; !ok || m.hash != pr.hash {
			stop = append(stop, pr)
			delete(s.pods, name)
		}
	}
	s.mu.Unlock()
	for _, pr := range stop {
		s.cfg.Log.Info("stopping static pod", zap.String("manifest", pr.manifest))
		pr.stop()
	}
	s.mu.Lock()
	for name, m := range want {
		if _, ok := s.pods[name]; ok {
			continue
		}
		s.cfg.Log.Info("starting static pod", zap.String("manifest", name), zap.String("pod", m.pod.Name))
		pr := newPodRunner(s, name, m.hash, m.pod)
		s.pods[name] = pr
		pr.start(ctx)
	}
	s.mu.Unlock()
	s.writeState()
}

func (s *Supervisor) stopAll() {
	s.mu.Lock()
	pods := make([]*podRunner, 0, len(s.pods))
	for name, pr := range s.pods {
		pods = append(pods, pr)
		delete(s.pods, name)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, pr := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); pr.stop() }()
	}
	if s.kubelet != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.kubelet.stopAll() }()
	}
	wg.Wait()
	s.writeState()
}

func (s *Supervisor) addAPIPod(key string, pr *podRunner) {
	s.mu.Lock()
	s.apiPods[key] = pr
	s.mu.Unlock()
	s.writeState()
}

func (s *Supervisor) removeAPIPod(key string, pr *podRunner) {
	s.mu.Lock()
	if s.apiPods[key] == pr {
		delete(s.apiPods, key)
	}
	s.mu.Unlock()
	s.writeState()
}

// writeState publishes every pod's container states to the state file.
func (s *Supervisor) writeState() {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	st := State{PID: os.Getpid(), Updated: time.Now().UTC(), Pods: map[string]PodState{}}
	names := make([]string, 0, len(s.pods))
	for n := range s.pods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st.Pods[n] = s.pods[n].snapshot()
	}
	for key, pr := range s.apiPods { // namespace/name never clashes with a file name
		st.Pods[key] = pr.snapshot()
	}
	s.mu.Unlock()
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := fsutil.WriteFileAtomic(s.cfg.StateFile, b, 0o644); err != nil {
		s.cfg.Log.Warn("write supervisor state", zap.Error(err))
	}
}
