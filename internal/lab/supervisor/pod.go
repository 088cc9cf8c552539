package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
)

// Backoff between restarts of a container that exited: 1 s doubling to 10 s,
// reset once a container has run for backoffReset (a crash loop slows down,
// an occasional crash restarts quickly).
const (
	backoffInitial = time.Second
	backoffMax     = 10 * time.Second
	backoffReset   = 10 * time.Second
)

type podRunner struct {
	sup      *Supervisor
	manifest string
	hash     string
	pod      *corev1.Pod
	cancel   context.CancelFunc
	done     chan struct{}

	// logName names the pod in its containers' log files.
	logName string
	// launch says how a container runs: static pods as written, API pods
	// with their runtime env and volumes mapped to node folders.
	launch func(corev1.Container) (launchSpec, error)
	// onChange is told of every container state change (the lab kubelet
	// writes the pod's status back).
	onChange func()

	mu     sync.Mutex
	grace  time.Duration // SIGTERM to SIGKILL when the pod stops
	states map[string]ContainerState
}

// launchSpec is one container process: argv, extra environment, folder.
type launchSpec struct {
	argv []string
	env  []string
	dir  string
	// ownEnv: the process gets env (and PATH) only, not the supervisor's
	// environment, as a container gets only its own.
	ownEnv bool
}

// staticLaunch runs a static pod's container as its manifest says: plain
// env values only, paths as written (a static pod's hostPaths are the
// node's own folders in the lab).
func staticLaunch(c corev1.Container) (launchSpec, error) {
	ls := launchSpec{argv: append(append([]string{}, c.Command...), c.Args...), dir: c.WorkingDir}
	for _, e := range c.Env {
		ls.env = append(ls.env, e.Name+"="+e.Value)
	}
	return ls, nil
}

func newPodRunner(s *Supervisor, manifest, hash string, pod *corev1.Pod) *podRunner {
	pr := &podRunner{sup: s, manifest: manifest, hash: hash, pod: pod, done: make(chan struct{}), states: map[string]ContainerState{},
		logName: pod.Name, launch: staticLaunch, grace: s.cfg.StopTimeout}
	for _, c := range pod.Spec.InitContainers {
		pr.states[c.Name] = ContainerState{State: "waiting", Init: true}
	}
	for _, c := range pod.Spec.Containers {
		pr.states[c.Name] = ContainerState{State: "waiting"}
	}
	return pr
}

func (pr *podRunner) snapshot() PodState {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	ps := PodState{Manifest: pr.manifest, Name: pr.pod.Name, Containers: map[string]ContainerState{}}
	for k, v := range pr.states {
		ps.Containers[k] = v
	}
	return ps
}

func (pr *podRunner) update(name string, f func(*ContainerState)) {
	pr.mu.Lock()
	st := pr.states[name]
	f(&st)
	pr.states[name] = st
	pr.mu.Unlock()
	pr.sup.writeState()
	if pr.onChange != nil {
		pr.onChange()
	}
}

// start runs the pod in the background. Its cancel is set before start
// returns, so a stop that follows at once waits for the processes instead
// of finding nothing to cancel and leaving them to start untracked.
func (pr *podRunner) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	pr.mu.Lock()
	pr.cancel = cancel
	pr.mu.Unlock()
	go pr.run(ctx)
}

// run runs the pod: init containers in order (each retried with backoff
// until it succeeds), then every container, each restarted when it exits.
func (pr *podRunner) run(ctx context.Context) {
	defer close(pr.done)
	for _, c := range pr.pod.Spec.InitContainers {
		backoff := backoffInitial
		for {
			err := pr.runOnce(ctx, c, true)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				break
			}
			if !sleepCtx(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, backoffMax)
		}
	}
	var wg sync.WaitGroup
	for _, c := range pr.pod.Spec.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			backoff := backoffInitial
			for {
				started := time.Now()
				_ = pr.runOnce(ctx, c, false)
				if ctx.Err() != nil {
					return
				}
				if time.Since(started) >= backoffReset {
					backoff = backoffInitial
				}
				if !sleepCtx(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, backoffMax)
				pr.update(c.Name, func(s *ContainerState) { s.Restarts++ })
			}
		}()
	}
	wg.Wait()
}

// stop cancels the pod and waits until all its processes have exited.
func (pr *podRunner) stop() { pr.stopWithin(-1) }

// stopWithin is stop with grace between SIGTERM and SIGKILL (a deleted
// pod's grace period; negative: the pod's own). A grace only ever shrinks,
// as on a kubelet, also while the stop is under way.
func (pr *podRunner) stopWithin(grace time.Duration) {
	pr.mu.Lock()
	if grace >= 0 && grace < pr.grace {
		pr.grace = grace
	}
	cancel := pr.cancel
	pr.mu.Unlock()
	if cancel != nil {
		cancel()
		<-pr.done
	}
}

// runOnce runs one container process to its end. When ctx ends first the
// process gets SIGTERM, then SIGKILL after the stop timeout, like a kubelet.
func (pr *podRunner) runOnce(ctx context.Context, c corev1.Container, init bool) error {
	log := pr.sup.cfg.Log.With(zap.String("pod", pr.logName), zap.String("container", c.Name))
	ls, err := pr.launch(c)
	if err == nil && len(ls.argv) == 0 {
		err = errors.New("container has no command (images are not supported by the lab)")
	}
	if err != nil {
		pr.update(c.Name, func(s *ContainerState) { s.State, s.LastExit = "exited", err.Error() })
		return err
	}
	argv := ls.argv
	logPath := filepath.Join(pr.sup.cfg.LogsDir, fmt.Sprintf("%s_%s.log", pr.logName, c.Name))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = ls.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), ls.env...)
	if ls.ownEnv {
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, ls.env...)
	}
	// Pdeathsig: a supervisor that dies (a "lost node") takes its containers with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(logf, "supervisor: start failed: %v\n", err)
		pr.update(c.Name, func(s *ContainerState) { s.State, s.LastExit, s.PID = "exited", "start failed: "+err.Error(), 0 })
		return err
	}
	pid := cmd.Process.Pid
	log.Info("container started", zap.Int("pid", pid))
	pr.update(c.Name, func(s *ContainerState) {
		s.State, s.PID, s.StartedAt, s.Ready = "running", pid, time.Now().UTC(), false
	})
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-waitErr:
	case <-ctx.Done():
		_ = syscall.Kill(pid, syscall.SIGTERM)
		werr = pr.waitGrace(waitErr, time.Now(), func() {
			log.Warn("container ignored SIGTERM; killing", zap.Int("pid", pid))
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		})
	}
	// Whatever the container left behind in its process group goes with it.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	exit, code := "exit 0", 0
	if werr != nil {
		exit, code = werr.Error(), exitCode(cmd.ProcessState)
	}
	log.Info("container exited", zap.Int("pid", pid), zap.String("exit", exit))
	fmt.Fprintf(logf, "supervisor: container exited: %s\n", exit)
	pr.update(c.Name, func(s *ContainerState) {
		s.State, s.LastExit, s.ExitCode, s.PID, s.Ready = "exited", exit, code, 0, false
	})
	return werr
}

// waitGrace waits for the process to exit until termAt plus the pod's
// grace, re-read as it waits (a later delete may shorten it), then kills.
func (pr *podRunner) waitGrace(waitErr <-chan error, termAt time.Time, kill func()) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-waitErr:
			return err
		case <-tick.C:
			pr.mu.Lock()
			grace := pr.grace
			pr.mu.Unlock()
			if time.Since(termAt) >= grace {
				kill()
				return <-waitErr
			}
		}
	}
}

// exitCode is the code a container runtime reports: the exit status, or
// 128 plus the signal that killed the process.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
