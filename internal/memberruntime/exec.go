package memberruntime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// maxOutputInError caps how much of a failed command's output goes into its
// error (the tail: that is where the reason usually is).
const maxOutputInError = 4096

// execRuntime runs user-given shell commands, e.g. for etcd under systemd.
type execRuntime struct {
	stopCommand, startCommand string
	urls                      []string
	dataDir                   string
	stopWait                  waitLimits
	log                       *zap.Logger

	mu sync.Mutex
}

// NewExec returns a runtime that stops and starts the member with shell
// commands run by /bin/sh -c. Both must be idempotent (systemctl stop/start
// are). The start command gets ETCD_INITIAL_CLUSTER and
// ETCD_INITIAL_CLUSTER_STATE=existing in its environment; under systemd the
// command must hand them on itself (e.g. `systemctl set-environment`), since
// a unit does not inherit the caller's environment. listenURLs (client and peer) and dataDir
// (on the node) are used to see that the process is gone.
func NewExec(stopCommand, startCommand string, listenURLs []string, dataDir string, log *zap.Logger, opts ...Option) Runtime {
	if log == nil {
		log = zap.NewNop()
	}
	return &execRuntime{
		stopCommand: stopCommand, startCommand: startCommand,
		urls: listenURLs, dataDir: dataDir, stopWait: limits(opts),
		log: log.With(zap.String("runtime", "exec")),
	}
}

func (e *execRuntime) Describe() string {
	return fmt.Sprintf("exec: stop %q, start %q", e.stopCommand, e.startCommand)
}

func (e *execRuntime) Stop(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := runShell(ctx, "stop", e.stopCommand, nil); err != nil {
		return err
	}
	e.log.Info("ran stop command", zap.String("command", e.stopCommand))
	if err := waitGone(ctx, e.log, e.stopWait, e.urls, e.dataDir); err != nil {
		return fmt.Errorf("stop command %q succeeded but etcd has not stopped: %w", e.stopCommand, err)
	}
	return nil
}

func (e *execRuntime) Start(ctx context.Context, initialCluster string) error {
	if strings.TrimSpace(initialCluster) == "" {
		return errors.New("start: empty --initial-cluster")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	env := []string{"ETCD_INITIAL_CLUSTER=" + initialCluster, "ETCD_INITIAL_CLUSTER_STATE=existing"}
	if err := runShell(ctx, "start", e.startCommand, env); err != nil {
		return err
	}
	e.log.Info("ran start command", zap.String("command", e.startCommand), zap.String("initialCluster", initialCluster))
	return nil
}

// Stopped is answered from the process itself: the commands leave no state
// the agent could read.
func (e *execRuntime) Stopped() (bool, error) {
	st, err := probeProcess(e.urls, e.dataDir)
	return st.gone(), err
}

// runShell runs command with /bin/sh -c. On ctx's end the whole process
// group is killed, so a hung systemctl cannot outlive the call.
func runShell(ctx context.Context, what, command string, env []string) error {
	if strings.TrimSpace(command) == "" {
		return fmt.Errorf("no %s command configured", what)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A grandchild keeping the output pipe open must not block Wait forever.
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return fmt.Errorf("%s command %q failed: %w; output: %s", what, command, err, tailOf(out.Bytes()))
}

// tailOf returns the end of a command's output, trimmed, for an error.
func tailOf(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "(none)"
	}
	if len(b) > maxOutputInError {
		return "..." + string(b[len(b)-maxOutputInError:])
	}
	return string(b)
}
